-- One product's ledger, in the panel (newest first) and in the API's feed (oldest first: on
-- SQLite the id is the commit order), is read from an index that starts at the product's
-- entries, as one login's or one plan's licenses are: with only (account_id, plan_id), a rare
-- product's page was found by reading the account's whole ledger in order and skipping the
-- other products' entries. The new index begins with (account_id, plan_id), so it serves what
-- the old one did.
CREATE INDEX ledger_entries_account_plan_id ON ledger_entries (account_id, plan_id, id);
DROP INDEX ledger_entries_account_plan;
