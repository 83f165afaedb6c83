-- Subscriptions: a license grants a period [starts_utc, expires_utc) of its plan, and a
-- reseller or the operator may revoke it (revoked_utc). Licenses issued before this migration
-- started when they were issued.
ALTER TABLE licenses ADD COLUMN starts_utc INTEGER NOT NULL DEFAULT 0;
UPDATE licenses SET starts_utc = created_utc;
ALTER TABLE licenses ADD COLUMN revoked_utc INTEGER;

-- The unrevoked licenses of a login and plan by end: the entitlements read and the licenses a
-- revocation moves earlier.
CREATE INDEX licenses_user_plan_period ON licenses (user_id, plan_id, expires_utc)
    WHERE revoked_utc IS NULL;

-- One row per login and plan ever licensed: where the next license of the plan starts.
-- until_utc is the latest end among the unrevoked licenses (a new one starts there when it
-- is in the future), NULL while a perpetual license is held. Every license write and every
-- revocation updates it, so concurrent writers for one login and plan meet on this row.
CREATE TABLE subscriptions (
    user_id   INTEGER NOT NULL REFERENCES users (id),
    plan_id   INTEGER NOT NULL REFERENCES plans (id),
    until_utc INTEGER,
    PRIMARY KEY (user_id, plan_id)
);
INSERT INTO subscriptions (user_id, plan_id, until_utc)
    SELECT user_id, plan_id,
           CASE WHEN count(*) > count(expires_utc) THEN NULL ELSE max(expires_utc) END
    FROM licenses GROUP BY user_id, plan_id;
