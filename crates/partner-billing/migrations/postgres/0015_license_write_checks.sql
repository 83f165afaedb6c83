-- Five foreign keys that checked again, for every row the license path writes, what the balance
-- row already proves. Every ledger entry is written in the transaction that writes the
-- balance (account, plan) it records, and only if that write found or made the row: the license
-- group's one statement fails whole otherwise, and a promo batch's debit, an operator's
-- credit and an adjustment each write the balance first. Every license that names an account
-- names a charged balance: its own (direct) or its promo batch's, debited when the batch was
-- generated. Every idempotency record belongs to the account that authenticated the request.
-- The balance row's foreign keys name its account and plan, and accounts and plans are never
-- deleted. Each check was a query of its own under a share lock of the parent row, five per
-- license: about a sixth of the database's CPU on the license path (docs/performance.md,
-- "Checks the balance row already makes"). `admin audit verify` still fails on any ledger entry
-- without its balance. The user of a license keeps its foreign key (no balance names
-- the user).
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_account_id_fkey,
    DROP CONSTRAINT ledger_entries_plan_id_fkey;
ALTER TABLE licenses
    DROP CONSTRAINT licenses_account_id_fkey,
    DROP CONSTRAINT licenses_plan_id_fkey;
ALTER TABLE idempotency_records
    DROP CONSTRAINT idempotency_records_account_id_fkey;
