# Sourced by the bench scripts: a fresh PostgreSQL database with plan `bench`, login `alice`, one
# reseller credited UNITS units and one API key (made with the CLI and the panel API).
# Needs ADMIN_URL, DB, DIR (a scratch directory), CLI, SERVER_BIN, PORT, UNITS. Sets URL, CLIENT
# and SECRET; exports the server's database URL and master key file; defines start_server
# [COMMAND...] (default SERVER_BIN; waits for /healthz) and stop_server; on exit, stops the
# server and drops the database.
SERVER=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
start_server() {
  [ $# -gt 0 ] || set -- "$SERVER_BIN"
  "$@" --listen 127.0.0.1:$PORT >>"$DIR/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && return; sleep 0.1; done
  echo "server did not start" >&2; exit 1
}
stop_server() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""; }
psql "$ADMIN_URL" -qc "CREATE DATABASE $DB" >/dev/null
URL="${ADMIN_URL%/*}/$DB"
export PARTNER_BILLING_DATABASE_URL="$URL"
export PARTNER_BILLING_MASTER_KEY_FILE="$DIR/master.key"
(umask 077; head -c 32 /dev/urandom >"$PARTNER_BILLING_MASTER_KEY_FILE")
PASSWORD=benchmark-password-1
$CLI admin plan create --slug bench --name Bench --duration-days 30 >/dev/null
$CLI admin user add --login alice >/dev/null
CLIENT=$(printf '%s\n' "$PASSWORD" | $CLI admin --json reseller create --name Bench --password-stdin | jq -r .clientId)
$CLI admin quota credit --client-id "$CLIENT" --plan bench --units "$UNITS" --reason seed >/dev/null
start_server
TOKEN=$(curl -sf -H 'content-type: application/json' \
  -d "{\"clientId\":\"$CLIENT\",\"password\":\"$PASSWORD\"}" \
  http://127.0.0.1:$PORT/v1/billing/resellers/sessions | jq -r .sessionToken)
SECRET=$(curl -sf -X POST -H "authorization: Bearer $TOKEN" \
  http://127.0.0.1:$PORT/v1/billing/resellers/me/api-keys | jq -r .secret)
stop_server
psql "$URL" -qc "ANALYZE" >/dev/null
