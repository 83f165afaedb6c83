#!/usr/bin/env bash
# The authenticated read against the raw SQL of the same request (docs/performance.md, "Reads").
#
# On a fresh PostgreSQL database: plan `bench`, one reseller credited, one API key (made with the
# release CLI and the panel API). Then, alternating, RUNS times per client count:
#   - wrk: GET /v1/billing/partner/balances with the key (docs/bench/balances.lua);
#   - pgbench -M prepared, the server stopped: the statements the server runs for that request.
#     RAW=two (default) is the two statements of a read that authenticates first and reads next
#     (the key lookup with its account, then the balances); RAW=one is the one statement the
#     server now runs (the key lookup joined to the balances).
#   - wrk: POST /v1/billing/partner/licenses on the same account (docs/bench/license-hot.lua),
#     HTTP only: the issue path against the read path of the same run.
# Prints req/s, tx/s and the ratios for each run, and the server's peak RSS.
#
# Usage: docs/bench/balances.sh [POSTGRES_ADMIN_URL]  (default postgres://postgres@127.0.0.1:5432/test)
#        CLIENTS="8 64" BENCH_SECONDS=10 RUNS=2 BIN=target/release
set -euo pipefail
ADMIN_URL=${1:-postgres://postgres@127.0.0.1:5432/test}
CLIENTS=${CLIENTS:-8 64}
SECONDS_EACH=${BENCH_SECONDS:-10}
RUNS=${RUNS:-2}
BIN=${BIN:-target/release}
HERE=$(cd "$(dirname "$0")" && pwd)
DB=pbbench_reads_$$
DIR=$(mktemp -d)
CLI="$BIN/partner-billing"
SERVER_BIN="$BIN/partner-billing-server"
PORT=18090
UNITS=1000000000
. "$HERE/seed.sh"
HASH=$(printf '%s' "$SECRET" | sha256sum | cut -d' ' -f1)
ACCOUNT=$(psql "$URL" -Atc "SELECT account_id FROM api_keys WHERE secret_hash = '$HASH'")
[ -n "$ACCOUNT" ] || { echo "the key's hash is not SHA-256 of the secret here" >&2; exit 1; }
# The key lookup as keys.rs runs it (active at now, account in good standing), then the balances.
NOW='extract(epoch FROM now())::bigint'
KEY_SQL="SELECT k.id AS key_row, k.api_key_id, k.account_id, k.last_used_utc, a.client_id FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.secret_hash = '$HASH' AND k.status = 'active' AND (k.expires_utc IS NULL OR k.expires_utc > $NOW) AND a.standing = 'good';"
BAL_SQL="SELECT p.slug AS product_slug, b.remaining AS remaining_balance FROM balances b JOIN plans p ON p.id = b.plan_id WHERE b.account_id = $ACCOUNT ORDER BY p.slug;"
ONE_SQL="SELECT k.id AS key_row, k.api_key_id, k.account_id, k.last_used_utc, a.client_id, p.slug AS product_slug, b.remaining AS remaining_balance FROM api_keys k JOIN accounts a ON a.id = k.account_id LEFT JOIN balances b ON b.account_id = k.account_id LEFT JOIN plans p ON p.id = b.plan_id WHERE k.secret_hash = '$HASH' AND k.status = 'active' AND (k.expires_utc IS NULL OR k.expires_utc > $NOW) AND a.standing = 'good' ORDER BY p.slug;"
case "${RAW:-two}" in
  two) printf '%s\n%s\n' "$KEY_SQL" "$BAL_SQL" >"$DIR/raw.sql" ;;
  one) printf '%s\n' "$ONE_SQL" >"$DIR/raw.sql" ;;
esac
sed -e "s/CLIENT_ID/$CLIENT/" -e "s/SECRET/$SECRET/" "$HERE/balances.lua" >"$DIR/balances.lua"
sed -e "s/CLIENT_ID/$CLIENT/" -e "s/SECRET/$SECRET/" "$HERE/license-hot.lua" >"$DIR/license-hot.lua"
echo "raw statements (${RAW:-two}):"; cat "$DIR/raw.sql"
# One wrk measurement on a freshly started server: SCRIPT, CLIENTS, WARMUP seconds. Sets
# rps, p50, non2xx and rss (the server's peak RSS in kB).
measure() {
  start_server
  wrk -t2 -c"$2" -d"$3s" -s "$DIR/$1" http://127.0.0.1:$PORT >/dev/null # warm-up
  local out
  out=$(wrk -t2 -c"$2" -d"${SECONDS_EACH}s" --latency -s "$DIR/$1" http://127.0.0.1:$PORT)
  rss=$(awk '/VmHWM/ {print $2}' /proc/$SERVER/status)
  stop_server
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  non2xx=$(awk '/non2xx/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
}
for c in $CLIENTS; do
  for run in $(seq "$RUNS"); do
    measure balances.lua "$c" 5
    read_rps=$rps
    raw=$(pgbench -n -M prepared -c "$c" -j 2 -T "$SECONDS_EACH" -f "$DIR/raw.sql" "$URL" 2>/dev/null)
    tps=$(awk '/^tps/ {print $3}' <<<"$raw")
    lat=$(awk '/latency average/ {print $4}' <<<"$raw")
    printf 'clients %3s run %s: balances HTTP %8.0f req/s (p50 %s, non-2xx %s, peak RSS %s kB) | pgbench %8.0f tx/s (avg %s ms) | ratio %.2f\n' \
      "$c" "$run" "$rps" "$p50" "${non2xx:-0}" "$rss" "$tps" "$lat" "$(echo "$rps / $tps" | bc -l)"
    measure license-hot.lua "$c" 2
    printf 'clients %3s run %s: license-hot HTTP %8.0f req/s (p50 %s, non-2xx %s, peak RSS %s kB) | license-hot / balances %.2f\n' \
      "$c" "$run" "$rps" "$p50" "${non2xx:-0}" "$rss" "$(echo "$rps / $read_rps" | bc -l)"
  done
done
