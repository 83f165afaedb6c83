-- Product API (PostgreSQL): operator tokens, promo-code redemptions, the per-login guessing limit,
-- and the idempotency records of product writes.

-- Bearer tokens of the product's backend (`rso_…`); only the SHA-256 is stored.
CREATE TABLE operator_tokens (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    token_hash    TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    created_utc   BIGINT  NOT NULL,
    last_used_utc BIGINT,
    revoked_utc   BIGINT
);

-- One row per redemption: a login redeems a code at most once, whatever the code allows.
CREATE TABLE promo_redemptions (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code_hash   TEXT    NOT NULL REFERENCES promo_codes (code_hash),
    user_id     BIGINT  NOT NULL REFERENCES users (id),
    license_id  TEXT    NOT NULL UNIQUE REFERENCES licenses (license_id),
    actor       TEXT    NOT NULL,
    created_utc BIGINT  NOT NULL,
    UNIQUE (code_hash, user_id)
);
CREATE INDEX promo_redemptions_user ON promo_redemptions (user_id);

-- Failed redemption attempts (and attempts still running) per login, for the guessing limit.
-- Kept in the database so that every replica sees the same count; rows older than the window
-- are pruned as the login tries again.
CREATE TABLE redemption_attempts (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       BIGINT  NOT NULL REFERENCES users (id),
    attempted_utc BIGINT  NOT NULL
);
CREATE INDEX redemption_attempts_user ON redemption_attempts (user_id, attempted_utc);

-- The stored outcome of each successful product write, scoped to its caller (an operator
-- token, `token:<id>`, or the operator's console, `console`).
CREATE TABLE operator_idempotency_records (
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    status          BIGINT  NOT NULL,
    response_body   TEXT    NOT NULL,
    created_utc     BIGINT  NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);
