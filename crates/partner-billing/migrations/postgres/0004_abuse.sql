-- Abuse resistance: attempt counters shared by every replica, and the master
-- key's fingerprint.

-- Attempts counted per (kind, subject) in buckets of a fixed length starting at bucket_utc:
-- sign-in failures per client id and per source address, UnknownLogin answers per account.
-- A subject is an identifier (client id, address, account id), never a password or secret.
CREATE TABLE abuse_attempts (
    kind       TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    bucket_utc BIGINT NOT NULL,
    attempts   BIGINT NOT NULL,
    PRIMARY KEY (kind, subject, bucket_utc)
);
CREATE INDEX abuse_attempts_bucket ON abuse_attempts (bucket_utc);

-- The master key this database belongs to: HMAC-SHA256(key, "partner-billing master key
-- check"), hex. One row; a start with another key is refused.
CREATE TABLE master_key_check (
    id          BIGINT PRIMARY KEY CHECK (id = 1),
    fingerprint TEXT    NOT NULL,
    created_utc BIGINT NOT NULL
);
