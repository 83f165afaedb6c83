-- When the `api_key.expired` event of a rolled key was recorded; NULL until its expiry has been
-- noticed. The sweep that records the event sets it in the same transaction, so each expiry
-- yields exactly one event whatever the number of replicas.
ALTER TABLE api_keys ADD COLUMN expiry_event_utc BIGINT;
