//! Prepaid quota: per account and plan a balance that always equals the sum of its
//! append-only ledger entries, and is never negative. The operator's credits and adjustments
//! are in `corrections`.

mod corrections;

pub use corrections::{Corrected, Correction, adjust, credit};

use serde::Serialize;

use crate::accounts::account_id_of;
use crate::db::Tx;
use crate::domain::{ClientId, PlanId, PlanSlug};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::wire::Balances;

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

/// One ledger entry as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub product_slug: String,
    pub kind: String,
    pub delta: i64,
    pub balance_after: i64,
    pub actor: String,
    pub reason: Option<String>,
    pub reference: Option<String>,
    pub created_utc: i64,
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
struct NewEntry<'a> {
    account_id: i64,
    plan_id: PlanId,
    kind: EntryKind,
    delta: i64,
    balance_after: i64,
    actor: &'a str,
    reason: Option<&'a str>,
    reference: Option<&'a str>,
    created_utc: i64,
}

async fn append_entry(tx: &mut Tx, entry: &NewEntry<'_>) -> Result<()> {
    Ok(try_append_entry(tx, entry).await?)
}

/// [`append_entry`] with the database's error as it is, for a caller that tells a unique
/// violation (an operator reference used twice at once) from other failures.
async fn try_append_entry(tx: &mut Tx, entry: &NewEntry<'_>) -> sqlx::Result<()> {
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

/// Every plan ever credited to the account, zero included, sorted by slug.
pub async fn balances(store: &Store, account_id: i64) -> Result<Balances> {
    let balances = sqlx::query_as(
        "SELECT p.slug AS product_slug, b.remaining AS remaining_balance \
         FROM balances b JOIN plans p ON p.id = b.plan_id \
         WHERE b.account_id = $1 ORDER BY p.slug",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?;
    Ok(Balances { balances })
}

/// The operator's view of balances, by client id.
pub async fn balances_for(store: &Store, client_id: &ClientId) -> Result<Balances> {
    let account_id = account_id_of(store, client_id).await?;
    balances(store, account_id).await
}

/// The ledger of an account, oldest first, optionally for one plan.
pub async fn ledger(
    store: &Store,
    client_id: &ClientId,
    plan: Option<&PlanSlug>,
) -> Result<Vec<LedgerEntry>> {
    let account_id = account_id_of(store, client_id).await?;
    Ok(sqlx::query_as(
        "SELECT p.slug AS product_slug, l.kind, l.delta, l.balance_after, l.actor, l.reason, \
         l.reference, l.created_utc \
         FROM ledger_entries l JOIN plans p ON p.id = l.plan_id \
         WHERE l.account_id = $1 AND ($2 IS NULL OR p.slug = $2) ORDER BY l.id",
    )
    .bind(account_id)
    .bind(plan.map(PlanSlug::as_str))
    .fetch_all(store.pool())
    .await?)
}

/// A balance that differs from the sum of its ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Discrepancy {
    pub client_id: String,
    pub product_slug: String,
    pub balance: i64,
    pub ledger_sum: i64,
}

/// The result of `audit verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    pub balances_checked: i64,
    pub discrepancies: Vec<Discrepancy>,
}

/// Compares every balance with the sum of its ledger entries, in one consistent read.
pub async fn audit_verify(store: &Store) -> Result<AuditReport> {
    let mut tx = store.begin_write().await?;
    let rows: Vec<Discrepancy> = sqlx::query_as(
        "SELECT a.client_id, p.slug AS product_slug, b.remaining AS balance, \
         COALESCE((SELECT CAST(SUM(l.delta) AS BIGINT) FROM ledger_entries l \
                   WHERE l.account_id = b.account_id AND l.plan_id = b.plan_id), 0) AS ledger_sum \
         FROM balances b JOIN accounts a ON a.id = b.account_id JOIN plans p ON p.id = b.plan_id \
         ORDER BY a.client_id, p.slug",
    )
    .fetch_all(&mut *tx)
    .await?;
    let orphans: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM ledger_entries l WHERE NOT EXISTS \
         (SELECT 1 FROM balances b WHERE b.account_id = l.account_id AND b.plan_id = l.plan_id)",
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.rollback().await?;
    let balances_checked = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let discrepancies: Vec<Discrepancy> = rows
        .into_iter()
        .filter(|row| row.balance != row.ledger_sum)
        .collect();
    if orphans > 0 {
        return Err(Error::Internal(format!(
            "{orphans} ledger entries have no balance"
        )));
    }
    Ok(AuditReport {
        balances_checked,
        discrepancies,
    })
}
