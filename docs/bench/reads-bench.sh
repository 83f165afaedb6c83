#!/usr/bin/env bash
# The read API on a big ledger (docs/performance.md, "Reads on a ledger of a million entries").
#
# Seeds one reseller's ledger with ENTRIES rows by SQL directly (a recursive CTE: seconds instead
# of a million requests), then, against the release server:
#   1. pages through the whole ledger feed (limit 500) and reports the latency of the first and
#      the last pages: keyset pages cost the same at page 1 and page 2000;
#   2. downloads the panel's ledger CSV and reports the server's peak RSS before and after.
# The seeded entries are not backed by balances (`admin audit verify` would flag them): this
# database is for the benchmark only.
#
# Usage: docs/bench/reads-bench.sh [ENTRIES]   (default 1000000; SQLite, in a temp directory)
set -euo pipefail
ENTRIES=${1:-1000000}
BIN=${BIN:-target/release}
DIR=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$DIR"' EXIT
export PARTNER_BILLING_DATABASE_URL="sqlite://$DIR/bench.db"
export PARTNER_BILLING_MASTER_KEY_FILE="$DIR/master.key"
PB="$BIN/partner-billing"
PASSWORD=benchmark-password-1
$PB admin plan create --slug pro --name Pro >/dev/null
CLIENT=$(printf '%s\n' "$PASSWORD" | $PB admin --json reseller create --name Bench --password-stdin | jq -r .clientId)
$PB admin quota credit --client-id "$CLIENT" --plan pro --units 1 --reason seed >/dev/null

START=$(date +%s.%N)
sqlite3 "$DIR/bench.db" <<SQL
PRAGMA journal_mode = WAL;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $ENTRIES)
INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc)
SELECT (SELECT id FROM accounts WHERE client_id = '$CLIENT'), (SELECT id FROM plans WHERE slug = 'pro'),
       'license', -1, 0, 'bench', NULL, printf('lic-%d', i), 1700000000 + i / 10
FROM n;
SQL
echo "seeded $ENTRIES entries in $(echo "$(date +%s.%N) - $START" | bc) s"

$BIN/partner-billing-server --listen 127.0.0.1:18089 >"$DIR/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:18089/healthz >/dev/null && break; sleep 0.2; done
# A panel session, and an API key made with it.
TOKEN=$(curl -sf -H 'content-type: application/json' \
  -d "{\"clientId\":\"$CLIENT\",\"password\":\"$PASSWORD\"}" \
  http://127.0.0.1:18089/v1/billing/resellers/sessions | jq -r .sessionToken)
SECRET=$(curl -sf -X POST -H "authorization: Bearer $TOKEN" \
  http://127.0.0.1:18089/v1/billing/resellers/me/api-keys | jq -r .secret)

python3 - "$CLIENT" "$SECRET" <<'PY'
import json, sys, time, urllib.request
client, secret = sys.argv[1], sys.argv[2]
cursor, times, total = None, [], 0
while True:
    url = "http://127.0.0.1:18089/v1/billing/partner/ledger?limit=500"
    if cursor:
        url += "&cursor=" + cursor
    req = urllib.request.Request(url, headers={"X-Client-Id": client, "X-Client-Secret": secret})
    t = time.perf_counter()
    page = json.load(urllib.request.urlopen(req))
    times.append((time.perf_counter() - t) * 1000)
    total += len(page["entries"])
    cursor = page["nextCursor"]
    if not page["hasMore"]:
        break
med = lambda xs: sorted(xs)[len(xs) // 2]
print(f"ledger feed: {total} entries in {len(times)} pages of 500")
print(f"  pages 1-10:     median {med(times[:10]):.1f} ms")
print(f"  middle 10:      median {med(times[len(times)//2:len(times)//2+10]):.1f} ms")
print(f"  last 10 pages:  median {med(times[-10:]):.1f} ms")
PY

hwm() { awk '/VmHWM/ {print $2 " " $3}' /proc/$SERVER/status; }
rss() { awk '/VmRSS/ {print $2 " " $3}' /proc/$SERVER/status; }
echo "server RSS before the CSV: $(rss) (peak so far $(hwm))"
# The panel's CSV needs the cookie session.
curl -sf -c "$DIR/jar" -o /dev/null http://127.0.0.1:18089/panel/login
curl -sf -b "$DIR/jar" -c "$DIR/jar" -o /dev/null -H 'origin: http://127.0.0.1:18089' \
  --data-urlencode "client_id=$CLIENT" --data-urlencode "password=$PASSWORD" \
  http://127.0.0.1:18089/panel/login || true
START=$(date +%s.%N)
curl -s -b "$DIR/jar" -o "$DIR/ledger.csv" -w 'first byte %{time_starttransfer}s, total %{time_total}s, %{size_download} bytes\n' \
  http://127.0.0.1:18089/panel/ledger.csv
echo "CSV lines: $(wc -l <"$DIR/ledger.csv")"
echo "server RSS after the CSV: $(rss) (peak $(hwm))"
