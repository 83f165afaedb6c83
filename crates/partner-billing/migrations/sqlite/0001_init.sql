-- Partner Billing schema, SQLite. Timestamps are Unix seconds (UTC); hashes are hex SHA-256.

CREATE TABLE plans (
    id                   INTEGER PRIMARY KEY,
    slug                 TEXT    NOT NULL UNIQUE,
    name                 TEXT    NOT NULL,
    duration_days        INTEGER,
    redemptions_per_code INTEGER NOT NULL DEFAULT 1 CHECK (redemptions_per_code >= 1),
    code_validity_days   INTEGER NOT NULL DEFAULT 365 CHECK (code_validity_days >= 1),
    created_utc          INTEGER NOT NULL
);

CREATE TABLE users (
    id          INTEGER PRIMARY KEY,
    login       TEXT    NOT NULL UNIQUE,
    created_utc INTEGER NOT NULL
);

CREATE TABLE accounts (
    id            INTEGER PRIMARY KEY,
    client_id     TEXT    NOT NULL UNIQUE,
    name          TEXT    NOT NULL,
    password_hash TEXT    NOT NULL,
    standing      TEXT    NOT NULL DEFAULT 'good' CHECK (standing IN ('good', 'suspended')),
    created_utc   INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id            INTEGER PRIMARY KEY,
    api_key_id    TEXT    NOT NULL UNIQUE,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    name          TEXT,
    secret_hash   TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    created_utc   INTEGER NOT NULL,
    last_used_utc INTEGER,
    revoked_utc   INTEGER
);
CREATE INDEX api_keys_account ON api_keys (account_id);

CREATE TABLE panel_sessions (
    token_hash  TEXT    PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    created_utc INTEGER NOT NULL,
    expires_utc INTEGER NOT NULL
);

CREATE TABLE balances (
    account_id INTEGER NOT NULL REFERENCES accounts (id),
    plan_id    INTEGER NOT NULL REFERENCES plans (id),
    remaining  INTEGER NOT NULL CHECK (remaining >= 0),
    PRIMARY KEY (account_id, plan_id)
);

-- Append-only: every balance change, with who, why and what it paid for.
CREATE TABLE ledger_entries (
    id            INTEGER PRIMARY KEY,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    plan_id       INTEGER NOT NULL REFERENCES plans (id),
    kind          TEXT    NOT NULL CHECK (kind IN ('credit', 'license', 'promo_batch', 'adjustment')),
    delta         INTEGER NOT NULL,
    balance_after INTEGER NOT NULL CHECK (balance_after >= 0),
    actor         TEXT    NOT NULL,
    reason        TEXT,
    reference     TEXT,
    created_utc   INTEGER NOT NULL
);
CREATE INDEX ledger_entries_account_plan ON ledger_entries (account_id, plan_id);

CREATE TABLE licenses (
    id          INTEGER PRIMARY KEY,
    license_id  TEXT    NOT NULL UNIQUE,
    user_id     INTEGER NOT NULL REFERENCES users (id),
    plan_id     INTEGER NOT NULL REFERENCES plans (id),
    account_id  INTEGER REFERENCES accounts (id),
    source      TEXT    NOT NULL CHECK (source IN ('direct', 'promo')),
    batch_id    TEXT,
    created_utc INTEGER NOT NULL,
    expires_utc INTEGER
);
CREATE INDEX licenses_user ON licenses (user_id);

-- The stored outcome of each successful partner write, kept as long as its ledger entry.
CREATE TABLE idempotency_records (
    account_id      INTEGER NOT NULL REFERENCES accounts (id),
    idempotency_key TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    status          INTEGER NOT NULL,
    response_body   TEXT    NOT NULL,
    created_utc     INTEGER NOT NULL,
    PRIMARY KEY (account_id, idempotency_key)
);
