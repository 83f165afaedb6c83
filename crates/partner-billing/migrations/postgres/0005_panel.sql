-- Panel sessions end after an hour without use as well as 12 h after sign-in.
ALTER TABLE panel_sessions ADD COLUMN last_seen_utc BIGINT;
CREATE INDEX panel_sessions_expiry ON panel_sessions (expires_utc);
CREATE INDEX panel_sessions_account ON panel_sessions (account_id);
CREATE INDEX ledger_entries_account_time ON ledger_entries (account_id, created_utc);
