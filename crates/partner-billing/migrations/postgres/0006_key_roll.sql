-- Key roll with a grace period: a rolled key keeps working until `expires_utc` (Unix seconds,
-- UTC) and is refused from that second on. NULL: the key does not expire. The stored status stays
-- 'active'; "expired" is derived from the clock when a key is listed or presented.
ALTER TABLE api_keys ADD COLUMN expires_utc BIGINT;
