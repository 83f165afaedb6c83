-- pgbench script: the raw per-request license transaction the server's one-request path runs
-- (as tests/src/bin/loadbench/raw.rs), on one account. Replace SECRET_HASH with that key's
-- `api_keys.secret_hash` and ACCOUNT with its `account_id`; plan row 1 is `bench`, user row 1
-- `alice`. Simple protocol (-M prepared cannot type the key parameter here):
--   pgbench -n -M simple -c 8 -j 2 -T 10 -f docs/bench/raw-license-hot.sql postgres://…
\set k random(1, 9000000000000000)
SELECT k.id AS key_row, k.api_key_id, k.account_id, k.last_used_utc, a.client_id FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.secret_hash = 'SECRET_HASH' AND k.status = 'active' AND a.standing = 'good';
BEGIN;
SELECT pg_try_advisory_xact_lock(hashtextextended('account:ACCOUNT:pgb-' || CAST(:k AS text), 0));
SELECT operation, fingerprint, response_body FROM idempotency_records WHERE account_id = ACCOUNT AND idempotency_key = 'pgb-' || CAST(:k AS text);
SELECT id, duration_days, redemptions_per_code, code_validity_days FROM plans WHERE slug = 'bench';
SELECT id FROM users WHERE login = 'alice';
UPDATE balances SET remaining = remaining - 1 WHERE account_id = ACCOUNT AND plan_id = 1 AND remaining >= 1 RETURNING remaining;
INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) VALUES (ACCOUNT, 1, 'license', -1, 5, 'api_key:x', NULL, 'lic-' || CAST(:k AS text), 0);
INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, expires_utc) VALUES ('pgb-' || CAST(:k AS text), 1, 1, ACCOUNT, 'direct', 0, NULL);
INSERT INTO idempotency_records (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) VALUES (ACCOUNT, 'pgb-' || CAST(:k AS text), 'license', 'f', 200, '{"licenseId":"x","planSlug":"bench","login":"alice","remainingBalance":5,"createdUtc":0,"expiresUtc":null}', 0);
COMMIT;
