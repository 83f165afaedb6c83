#!/usr/bin/env bash
# A list page against the raw SQL of the same page (docs/performance.md, "Answers written with
# serde, and a list page against its statement").
#
# On a fresh PostgreSQL database (docs/bench/seed.sh): LICENSES licenses issued on one account
# through the API (wrk, license-hot.lua), `ANALYZE`. Then, alternating, RUNS times per client
# count:
#   - wrk: GET /v1/billing/partner/licenses?limit=LIMIT with the key (the first page);
#   - pgbench -M prepared, the server stopped: the page's statement, its values written in (the
#     server binds them, under a generic plan).
# Prints req/s, tx/s, their ratio, and the server's CPU time per request (from /proc).
#
# Usage: docs/bench/pages.sh [POSTGRES_ADMIN_URL]  (default postgres://postgres@127.0.0.1:5432/test)
#        CLIENTS="8 64" BENCH_SECONDS=10 RUNS=2 LICENSES=20000 LIMIT=20 BIN=target/release
set -euo pipefail
ADMIN_URL=${1:-postgres://postgres@127.0.0.1:5432/test}
CLIENTS=${CLIENTS:-8 64}
SECONDS_EACH=${BENCH_SECONDS:-10}
RUNS=${RUNS:-2}
LICENSES=${LICENSES:-20000}
LIMIT=${LIMIT:-20}
BIN=${BIN:-target/release}
HERE=$(cd "$(dirname "$0")" && pwd)
DB=pbbench_pages_$$
DIR=$(mktemp -d)
CLI="$BIN/partner-billing"
SERVER_BIN="$BIN/partner-billing-server"
PORT=18091
UNITS=1000000000
. "$HERE/seed.sh"
sed -e "s/CLIENT_ID/$CLIENT/" -e "s/SECRET/$SECRET/" "$HERE/license-hot.lua" >"$DIR/license-hot.lua"
cat >"$DIR/page.lua" <<LUA
request = function()
  return wrk.format("GET", "/v1/billing/partner/licenses?limit=$LIMIT",
    {["X-Client-Id"]="$CLIENT", ["X-Client-Secret"]="$SECRET"})
end
done = function(summary, latency, requests)
  io.write(string.format("non2xx %d\n", summary.errors.status))
end
LUA
start_server
while [ "$(psql "$URL" -Atc 'SELECT count(*) FROM licenses')" -lt "$LICENSES" ]; do
  wrk -t2 -c64 -d2s -s "$DIR/license-hot.lua" http://127.0.0.1:$PORT >/dev/null
done
stop_server
psql "$URL" -qc "ANALYZE" >/dev/null
ACCOUNT=$(psql "$URL" -Atc "SELECT account_id FROM licenses LIMIT 1")
echo "licenses: $(psql "$URL" -Atc 'SELECT count(*) FROM licenses') on account $ACCOUNT"
# The first page as reads.rs sends it (no filter): the account's licenses, newest first.
cat >"$DIR/raw.sql" <<SQL
SELECT l.id AS row_id, l.license_id, p.slug AS plan_slug, u.login, l.source, l.batch_id, l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc FROM licenses l JOIN users u ON u.id = l.user_id JOIN plans p ON p.id = l.plan_id WHERE l.account_id = ANY(ARRAY[$ACCOUNT::bigint]) AND l.id < 9223372036854775807 AND '' = '' AND '' = '' ORDER BY l.account_id DESC, l.id DESC LIMIT $((LIMIT + 1));
SQL
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
for c in $CLIENTS; do
  for run in $(seq "$RUNS"); do
    start_server
    wrk -t2 -c"$c" -d2s -s "$DIR/page.lua" http://127.0.0.1:$PORT >/dev/null # warm-up
    before=$(cpu "$SERVER")
    out=$(wrk -t2 -c"$c" -d"${SECONDS_EACH}s" --latency -s "$DIR/page.lua" http://127.0.0.1:$PORT)
    after=$(cpu "$SERVER")
    stop_server
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    non2xx=$(awk '/non2xx/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    cpu_us=$(echo "scale=0; ($after - $before) * 1000000 / $TICK / $reqs" | bc)
    tps=$(pgbench -n -M prepared -c "$c" -j 2 -T "$SECONDS_EACH" -f "$DIR/raw.sql" "$URL" 2>/dev/null |
      awk '/^tps/ {print int($3)}')
    ratio=$(echo "scale=2; $rps / $tps" | bc)
    echo "clients $c run $run: page $rps req/s (p50 $p50, non2xx ${non2xx:-0}, server CPU $cpu_us µs/req), raw $tps tx/s, ratio $ratio"
  done
done
