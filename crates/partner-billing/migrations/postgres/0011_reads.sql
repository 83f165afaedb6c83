-- Reads and voiding for a reseller's backend (docs/design.md, "Reading back and voiding").

-- A batch voided by its reseller: none of its codes redeems from then on. NULL: not voided.
ALTER TABLE promo_batches ADD COLUMN voided_utc BIGINT;
-- One code voided by its reseller (the batch itself stays as it is). NULL: not voided.
ALTER TABLE promo_codes ADD COLUMN voided_utc BIGINT;

-- The ledger's change feed reads an account's entries in commit order. Writers commit side by
-- side, so a row id taken early may commit after a later one; each entry records the id of the
-- transaction that wrote it, and the feed only hands out entries of transactions older than
-- every transaction still running (pg_snapshot_xmin), in (transaction, id) order: nothing that
-- commits later can sort before what was already handed out. Existing entries get 0: they are
-- all committed.
ALTER TABLE ledger_entries ADD COLUMN commit_xact BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ledger_entries ALTER COLUMN commit_xact SET DEFAULT (pg_current_xact_id()::text::bigint);

-- One index per list, in the order its keyset pages read it.
CREATE INDEX ledger_entries_feed ON ledger_entries (account_id, commit_xact, id);
CREATE INDEX ledger_entries_account_id ON ledger_entries (account_id, id);
CREATE INDEX licenses_account_id ON licenses (account_id, id);
CREATE INDEX licenses_account_user_id ON licenses (account_id, user_id, id);
CREATE INDEX licenses_account_plan_id ON licenses (account_id, plan_id, id);
CREATE INDEX promo_batches_account_id ON promo_batches (account_id, id);
