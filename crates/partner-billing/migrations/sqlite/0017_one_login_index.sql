-- A login's licenses by one index, not two. `licenses_user` (user_id) served the reads of all of
-- a login's licenses; the partial `licenses_user_plan_period` (user_id, plan_id, expires_utc,
-- unrevoked only) served its entitlements, where its next license starts and what a revocation
-- moves earlier. Each license wrote an entry into both, at the end of its login's range, a page
-- of its own per login: with many logins, the write path's largest source of full-page images
-- after a checkpoint. One index over every license serves all of those reads (a revoked license,
-- which is rare, is skipped by its row); each license now writes one entry fewer. Built in the
-- migration's transaction: license writes wait for the build (about a second per million
-- licenses, measured on PostgreSQL), and the two drops briefly hold off reads of the table.
CREATE INDEX licenses_user_plan_end ON licenses (user_id, plan_id, expires_utc);
DROP INDEX licenses_user_plan_period;
DROP INDEX licenses_user;
