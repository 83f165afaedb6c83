-- The audit trail: who changed what, from where, in the same transaction as the change.
-- Append-only: the service only inserts; the triggers below refuse any UPDATE or DELETE.
CREATE TABLE audit_entries (
    id             INTEGER PRIMARY KEY,
    -- The reseller account the change concerns; NULL for changes of no account (a plan, an
    -- operator token, an end-user login).
    account_id     INTEGER REFERENCES accounts (id),
    action         TEXT    NOT NULL,
    -- `panel:<clientId>`, `api_key:<apiKeyId>`, `operator_token:<name>`, `cli:<OS user>`.
    actor          TEXT    NOT NULL,
    -- The peer's IP address (no port), HTTP only.
    source_address TEXT,
    request_id     TEXT,
    -- JSON object: the ids the change touched (`{"apiKeyId":"rsk_…"}`).
    subjects       TEXT    NOT NULL,
    -- JSON object: what changed; never a secret, token, password or code.
    details        TEXT    NOT NULL,
    created_utc    INTEGER NOT NULL
);
-- Keyset pages, newest first: per account (panel, API, `admin audit log --client-id`) and all.
CREATE INDEX audit_entries_account_time ON audit_entries (account_id, created_utc DESC, id DESC);
CREATE INDEX audit_entries_time ON audit_entries (created_utc DESC, id DESC);

CREATE TRIGGER audit_entries_no_update BEFORE UPDATE ON audit_entries
BEGIN
    SELECT RAISE(ABORT, 'audit_entries is append-only: UPDATE refused');
END;

CREATE TRIGGER audit_entries_no_delete BEFORE DELETE ON audit_entries
BEGIN
    SELECT RAISE(ABORT, 'audit_entries is append-only: DELETE refused');
END;

-- An operator's credit or adjustment with a reference is idempotent per account and
-- reference: the reference names one correction, whatever its plan.
CREATE UNIQUE INDEX ledger_entries_operator_reference ON ledger_entries (account_id, reference)
    WHERE kind IN ('credit', 'adjustment') AND reference IS NOT NULL;
