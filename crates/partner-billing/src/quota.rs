//! Prepaid quota: per account and plan a balance that always equals the sum of its
//! append-only ledger entries, and is never negative. Reading balances and the ledger is here;
//! writing the ledger (a charge's debit, a group's entries) is in `ledger`, the operator's
//! credits and adjustments in `corrections`.

mod corrections;
mod ledger;

pub use corrections::{Corrected, Correction, adjust, credit};
pub use ledger::EntryKind;
pub(crate) use ledger::{BalanceChange, Charge, GroupDebit, LedgerRow, debit};

use serde::Serialize;

use crate::accounts::account_id_of;
use crate::domain::{ClientId, PlanSlug};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::wire::Balances;

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
