#!/usr/bin/env bash
# Instructions the server executes per authenticated read (docs/performance.md, "The request id
# in a task-local…"): a figure that, unlike req/s, does not drift with the machine's load.
#
# On a fresh PostgreSQL database: plan `bench`, one reseller credited, one API key (as
# docs/bench/balances.sh). For each server binary given: start it under
# `valgrind --tool=callgrind` with one tokio worker thread, send READS reads over one
# connection as warm-up, zero the counters, send READS more, dump, and print the instructions
# per read (only answers 200 count). Each binary's profile is kept as callgrind.<n>.out* for callgrind_annotate.
#
# Usage: docs/bench/read-instructions.sh SERVER_BINARY...   (default target/release/partner-billing-server)
#        READS=2000 CLI=target/release/partner-billing ADMIN_URL=postgres://postgres@127.0.0.1:5432/test
set -euo pipefail
ADMIN_URL=${ADMIN_URL:-postgres://postgres@127.0.0.1:5432/test}
READS=${READS:-2000}
CLI=${CLI:-target/release/partner-billing}
[ $# -gt 0 ] || set -- target/release/partner-billing-server
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$PWD
DB=pbbench_instr_$$
DIR=$(mktemp -d)
SERVER=""
PORT=18094
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
psql "$ADMIN_URL" -qc "CREATE DATABASE $DB" >/dev/null
export PARTNER_BILLING_DATABASE_URL="${ADMIN_URL%/*}/$DB"
export PARTNER_BILLING_MASTER_KEY_FILE="$DIR/master.key"
(umask 077; head -c 32 /dev/urandom >"$PARTNER_BILLING_MASTER_KEY_FILE")
PASSWORD=benchmark-password-1
$CLI admin plan create --slug bench --name Bench --duration-days 30 >/dev/null
$CLI admin user add --login alice >/dev/null
CLIENT=$(printf '%s\n' "$PASSWORD" | $CLI admin --json reseller create --name Bench --password-stdin | jq -r .clientId)
$CLI admin quota credit --client-id "$CLIENT" --plan bench --units 1000 --reason seed >/dev/null
wait_up() {
  for _ in $(seq 600); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && return; sleep 0.1; done
  echo "server did not start" >&2; exit 1
}
"$1" --listen 127.0.0.1:$PORT >>"$DIR/server.log" 2>&1 &
SERVER=$!
wait_up
TOKEN=$(curl -sf -H 'content-type: application/json' \
  -d "{\"clientId\":\"$CLIENT\",\"password\":\"$PASSWORD\"}" \
  http://127.0.0.1:$PORT/v1/billing/resellers/sessions | jq -r .sessionToken)
SECRET=$(curl -sf -X POST -H "authorization: Bearer $TOKEN" \
  http://127.0.0.1:$PORT/v1/billing/resellers/me/api-keys | jq -r .secret)
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
psql "$PARTNER_BILLING_DATABASE_URL" -qc "ANALYZE" >/dev/null
# READS reads over one connection: curl sends them one after another on one connection.
for _ in $(seq "$READS"); do
  printf 'url = "http://127.0.0.1:%s/v1/billing/partner/balances"\noutput = "/dev/null"\n' "$PORT"
done >"$DIR/reads.curl"
reads() {
  curl -s -H "X-Client-Id: $CLIENT" -H "X-Client-Secret: $SECRET" -w '%{http_code}\n' \
    --config "$DIR/reads.curl" | grep -c '^200$'
}
n=0
for server in "$@"; do
  n=$((n + 1))
  rm -f "$OUT/callgrind.$n.out"*
  TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$n.out" \
    "$server" --listen 127.0.0.1:$PORT >>"$DIR/server.log" 2>&1 &
  SERVER=$!
  wait_up
  reads >/dev/null
  callgrind_control -z "$SERVER" >/dev/null 2>&1
  sent=$(reads)
  callgrind_control -d "$SERVER" >/dev/null 2>&1
  kill -INT "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
  total=$(grep -h '^totals:' "$OUT/callgrind.$n.out".1 | awk '{print $2}')
  printf '%s: %s reads, %s instructions, %.0f per read\n' "$server" "$sent" "$total" "$(echo "$total / $sent" | bc -l)"
done
