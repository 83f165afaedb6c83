-- Reads and voiding for a reseller's backend (docs/design.md, "Reading back and voiding").

-- A batch voided by its reseller: none of its codes redeems from then on. NULL: not voided.
ALTER TABLE promo_batches ADD COLUMN voided_utc INTEGER;
-- One code voided by its reseller (the batch itself stays as it is). NULL: not voided.
ALTER TABLE promo_codes ADD COLUMN voided_utc INTEGER;

-- The ledger's change feed reads an account's entries in commit order. SQLite has one writer
-- at a time, so row ids already commit in order and this column stays 0; PostgreSQL's writers
-- commit side by side and record their transaction id here (see its migration).
ALTER TABLE ledger_entries ADD COLUMN commit_xact INTEGER NOT NULL DEFAULT 0;

-- One index per list, in the order its keyset pages read it.
CREATE INDEX ledger_entries_feed ON ledger_entries (account_id, commit_xact, id);
CREATE INDEX ledger_entries_account_id ON ledger_entries (account_id, id);
CREATE INDEX licenses_account_id ON licenses (account_id, id);
CREATE INDEX licenses_account_user_id ON licenses (account_id, user_id, id);
CREATE INDEX licenses_account_plan_id ON licenses (account_id, plan_id, id);
CREATE INDEX promo_batches_account_id ON promo_batches (account_id, id);
