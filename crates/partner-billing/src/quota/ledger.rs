//! Writing the ledger: the debit of one charge with its entry, the one insert of an entry (the
//! operator's corrections use it too), and the rows of a license group's debits, by name, for
//! the group's set-oriented statements.

use crate::db::Tx;
use crate::domain::PlanId;
use crate::error::{Error, Result};

/// Why a ledger entry was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Credit,
    License,
    PromoBatch,
    Adjustment,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Credit => "credit",
            Self::License => "license",
            Self::PromoBatch => "promo_batch",
            Self::Adjustment => "adjustment",
        }
    }
}

/// A charge against an account's balance of one plan, as its ledger entry records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge<'a> {
    pub account_id: i64,
    pub plan_id: PlanId,
    pub units: i64,
    pub kind: EntryKind,
    /// Who charged: `api_key:<id>`.
    pub actor: &'a str,
    /// What was bought: the license id or the batch's order id.
    pub reference: &'a str,
    pub now_utc: i64,
}

/// Debits the charge's units if the balance covers them, inside the caller's transaction, and
/// writes the ledger entry. Returns the balance after. A balance below the units (or no
/// balance at all) is [`Error::InsufficientQuota`] and changes nothing.
pub(crate) async fn debit(tx: &mut Tx, charge: &Charge<'_>) -> Result<i64> {
    let Charge {
        account_id,
        plan_id,
        units,
        kind,
        actor,
        reference,
        now_utc,
    } = *charge;
    let remaining: Option<i64> = sqlx::query_scalar(
        "UPDATE balances SET remaining = remaining - $1 \
         WHERE account_id = $2 AND plan_id = $3 AND remaining >= $1 RETURNING remaining",
    )
    .bind(units)
    .bind(account_id)
    .bind(plan_id)
    .fetch_optional(&mut **tx)
    .await?;
    let remaining = remaining.ok_or(Error::InsufficientQuota)?;
    append_entry(
        tx,
        &NewEntry {
            account_id,
            plan_id,
            kind,
            delta: -units,
            balance_after: remaining,
            actor,
            reason: None,
            reference: Some(reference),
            created_utc: now_utc,
        },
    )
    .await?;
    Ok(remaining)
}

/// One ledger entry to append.
pub(super) struct NewEntry<'a> {
    pub(super) account_id: i64,
    pub(super) plan_id: PlanId,
    pub(super) kind: EntryKind,
    pub(super) delta: i64,
    pub(super) balance_after: i64,
    pub(super) actor: &'a str,
    pub(super) reason: Option<&'a str>,
    pub(super) reference: Option<&'a str>,
    pub(super) created_utc: i64,
}

async fn append_entry(tx: &mut Tx, entry: &NewEntry<'_>) -> Result<()> {
    Ok(try_append_entry(tx, entry).await?)
}

/// [`append_entry`] with the database's error as it is, for a caller that tells a unique
/// violation (an operator reference used twice at once) from other failures.
pub(super) async fn try_append_entry(tx: &mut Tx, entry: &NewEntry<'_>) -> sqlx::Result<()> {
    let NewEntry {
        account_id,
        plan_id,
        kind,
        delta,
        balance_after,
        actor,
        reason,
        reference,
        created_utc: now_utc,
    } = *entry;
    sqlx::query(
        "INSERT INTO ledger_entries \
         (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(account_id)
    .bind(plan_id)
    .bind(kind.as_str())
    .bind(delta)
    .bind(balance_after)
    .bind(actor)
    .bind(reason)
    .bind(reference)
    .bind(now_utc)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// One debit of a group transaction, in the order its ledger entries are written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupDebit<'a> {
    pub account_id: i64,
    pub plan_id: i64,
    pub units: i64,
    /// The balance after this debit (and every earlier one of its row).
    pub balance_after: i64,
    pub actor: &'a str,
    pub reference: &'a str,
}

/// A ledger entry of a group's debit, by column name, as the group's statements take it (a
/// JSON object per entry; the kind and the time are the statement's own parameters).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct LedgerRow<'a> {
    pub account_id: i64,
    pub plan_id: i64,
    pub delta: i64,
    pub balance_after: i64,
    pub actor: &'a str,
    pub reference: &'a str,
}

impl<'a> GroupDebit<'a> {
    /// Its ledger entry.
    pub(crate) fn ledger_row(&self) -> LedgerRow<'a> {
        LedgerRow {
            account_id: self.account_id,
            plan_id: self.plan_id,
            delta: -self.units,
            balance_after: self.balance_after,
            actor: self.actor,
            reference: self.reference,
        }
    }
}

/// A balance a group debits: set to `after` only where it still holds `before`, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub(crate) struct BalanceChange {
    pub account_id: i64,
    pub plan_id: i64,
    pub before: i64,
    pub after: i64,
}
