-- One product's ledger, in the panel (newest first by id) and in the API's feed (in commit
-- order), is read from an index that starts at the product's entries, as one login's or one
-- plan's licenses are: with only (account_id, plan_id), a rare product's page was found by
-- reading the account's whole ledger in order and skipping the other products' entries, a cost
-- that grew with every license issued. Both new indexes begin with (account_id, plan_id), so
-- they serve what the old one did. Built in the migration's transaction: writes to the ledger
-- wait for the build (about a second per million entries).
CREATE INDEX ledger_entries_account_plan_id ON ledger_entries (account_id, plan_id, id);
CREATE INDEX ledger_entries_account_plan_feed
    ON ledger_entries (account_id, plan_id, commit_xact, id);
DROP INDEX ledger_entries_account_plan;
