-- An endpoint's deliveries are listed newest first by when each attempt was made. An attempt is
-- recorded when its answer comes (or its time runs out), so two attempts in flight at once can be
-- recorded in the other order: the order of ids is not the order of attempts. This index gives
-- the list's order (endpoint, time, then id for attempts made in the same second) and serves
-- what the old one did. Built in the migration's transaction: recording new attempts waits for
-- the build, which reads every attempt once (run migrations before a rollout, docs/operations.md).
CREATE INDEX webhook_attempts_endpoint_time ON webhook_attempts (endpoint_row_id, attempted_utc, id);
DROP INDEX webhook_attempts_endpoint;
