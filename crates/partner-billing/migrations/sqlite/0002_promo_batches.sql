-- Promo batches: the purchase, its code hashes, and the encrypted 72-hour recovery payload.

CREATE TABLE promo_batches (
    id                   INTEGER PRIMARY KEY,
    batch_id             TEXT    NOT NULL UNIQUE,
    order_public_id      TEXT    NOT NULL UNIQUE,
    account_id           INTEGER NOT NULL REFERENCES accounts (id),
    plan_id              INTEGER NOT NULL REFERENCES plans (id),
    code_count           INTEGER NOT NULL CHECK (code_count BETWEEN 1 AND 1000),
    -- The plan's promo policy when the batch was generated.
    redemptions_per_code INTEGER NOT NULL CHECK (redemptions_per_code >= 1),
    codes_expire_utc     INTEGER NOT NULL,
    created_utc          INTEGER NOT NULL
);
CREATE INDEX promo_batches_account ON promo_batches (account_id);

-- Only HMAC-SHA256(master key, normalised code) is stored.
CREATE TABLE promo_codes (
    code_hash      TEXT    PRIMARY KEY,
    batch_row_id   INTEGER NOT NULL REFERENCES promo_batches (id),
    redemptions    INTEGER NOT NULL DEFAULT 0 CHECK (redemptions >= 0)
);
CREATE INDEX promo_codes_batch ON promo_codes (batch_row_id);

-- XChaCha20-Poly1305 under the master key; deleted 72 hours after generation.
CREATE TABLE promo_recovery_payloads (
    batch_row_id INTEGER PRIMARY KEY REFERENCES promo_batches (id),
    sealed_codes TEXT    NOT NULL,
    purge_after_utc INTEGER NOT NULL
);
CREATE INDEX promo_recovery_purge ON promo_recovery_payloads (purge_after_utc);
