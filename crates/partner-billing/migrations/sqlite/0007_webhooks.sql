-- Webhooks: endpoints, the transactional outbox of events, every delivery attempt,
-- and the low-balance alert thresholds.

-- A reseller's endpoint. The signing secret is sealed under the master key (AEAD), never in
-- clear. `event_types` is a comma-separated list. Deleted endpoints keep their row (the outbox
-- refers to it) but are neither listed nor delivered to.
CREATE TABLE webhook_endpoints (
    id            INTEGER PRIMARY KEY,
    endpoint_id   TEXT    NOT NULL UNIQUE,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    url           TEXT    NOT NULL,
    event_types   TEXT    NOT NULL,
    description   TEXT,
    status        TEXT    NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled', 'deleted')),
    sealed_secret TEXT    NOT NULL,
    created_utc   INTEGER NOT NULL
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, status);

-- An event, with the exact body every attempt sends. Written in the transaction of its cause.
CREATE TABLE webhook_events (
    id          INTEGER PRIMARY KEY,
    event_id    TEXT    NOT NULL UNIQUE,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    event_type  TEXT    NOT NULL,
    body        TEXT    NOT NULL,
    created_utc INTEGER NOT NULL
);

-- The outbox: one message per event and subscribed endpoint. A worker leases a due message
-- (`lease_until_utc`), sends it, and records the outcome.
CREATE TABLE webhook_messages (
    id               INTEGER PRIMARY KEY,
    event_row_id     INTEGER NOT NULL REFERENCES webhook_events (id),
    endpoint_row_id  INTEGER NOT NULL REFERENCES webhook_endpoints (id),
    status           TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_utc INTEGER,
    lease_until_utc  INTEGER
);
CREATE INDEX webhook_messages_due ON webhook_messages (next_attempt_utc) WHERE status = 'pending';

-- Every attempt, as the deliveries list shows it.
CREATE TABLE webhook_attempts (
    id               INTEGER PRIMARY KEY,
    message_row_id   INTEGER NOT NULL REFERENCES webhook_messages (id),
    endpoint_row_id  INTEGER NOT NULL REFERENCES webhook_endpoints (id),
    attempt          INTEGER NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    attempted_utc    INTEGER NOT NULL,
    next_attempt_utc INTEGER
);
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_row_id, id);

-- Low-balance alert per account and plan; 0 (or no row) is off.
CREATE TABLE balance_alerts (
    account_id            INTEGER NOT NULL REFERENCES accounts (id),
    plan_id               INTEGER NOT NULL REFERENCES plans (id),
    low_balance_threshold INTEGER NOT NULL CHECK (low_balance_threshold >= 0),
    PRIMARY KEY (account_id, plan_id)
);
