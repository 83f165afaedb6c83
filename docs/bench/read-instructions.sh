#!/usr/bin/env bash
# Instructions the server executes per authenticated read (docs/performance.md, "The request id
# in a task-local…"): a figure that, unlike req/s, does not drift with the machine's load.
#
# On a fresh PostgreSQL database: plan `bench`, one reseller credited, one API key (as
# docs/bench/balances.sh). For each server binary given: start it under
# `valgrind --tool=callgrind` with one tokio worker thread, send READS reads over one
# connection as warm-up, zero the counters, send READS more, dump, and print the instructions
# per read (only answers 200 count). Each binary's profile is kept as callgrind.<n>.out* for callgrind_annotate.
# READ_PATH names another read (a list page, say); LICENSES licenses are issued first for it to
# list.
#
# Usage: docs/bench/read-instructions.sh SERVER_BINARY...   (default target/release/partner-billing-server)
#        READS=2000 CLI=target/release/partner-billing ADMIN_URL=postgres://postgres@127.0.0.1:5432/test
#        READ_PATH=/v1/billing/partner/balances LICENSES=0
set -euo pipefail
ADMIN_URL=${ADMIN_URL:-postgres://postgres@127.0.0.1:5432/test}
READS=${READS:-2000}
READ_PATH=${READ_PATH:-/v1/billing/partner/balances}
LICENSES=${LICENSES:-0}
CLI=${CLI:-target/release/partner-billing}
[ $# -gt 0 ] || set -- target/release/partner-billing-server
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$PWD
DB=pbbench_instr_$$
DIR=$(mktemp -d)
SERVER_BIN=$1
PORT=18094
UNITS=1000
. "$HERE/seed.sh"
if [ "$LICENSES" -gt 0 ]; then
  start_server
  for i in $(seq "$LICENSES"); do
    curl -sf -o /dev/null -H "X-Client-Id: $CLIENT" -H "X-Client-Secret: $SECRET" \
      -H 'content-type: application/json' \
      -d "{\"planSlug\":\"bench\",\"login\":\"alice\",\"idempotencyKey\":\"seed-license-$i\"}" \
      http://127.0.0.1:$PORT/v1/billing/partner/licenses
  done
  stop_server
fi
# READS reads over one connection: curl sends them one after another on one connection.
for _ in $(seq "$READS"); do
  printf 'url = "http://127.0.0.1:%s%s"\noutput = "/dev/null"\n' "$PORT" "$READ_PATH"
done >"$DIR/reads.curl"
reads() {
  curl -s -H "X-Client-Id: $CLIENT" -H "X-Client-Secret: $SECRET" -w '%{http_code}\n' \
    --config "$DIR/reads.curl" | grep -c '^200$'
}
n=0
for server in "$@"; do
  n=$((n + 1))
  rm -f "$OUT/callgrind.$n.out"*
  TOKIO_WORKER_THREADS=1 start_server valgrind --tool=callgrind \
    --callgrind-out-file="$OUT/callgrind.$n.out" "$server"
  reads >/dev/null
  callgrind_control -z "$SERVER" >/dev/null 2>&1
  sent=$(reads)
  callgrind_control -d "$SERVER" >/dev/null 2>&1
  stop_server
  total=$(grep -h '^totals:' "$OUT/callgrind.$n.out".1 | awk '{print $2}')
  printf '%s: %s reads, %s instructions, %.0f per read\n' "$server" "$sent" "$total" "$(echo "$total / $sent" | bc -l)"
done
