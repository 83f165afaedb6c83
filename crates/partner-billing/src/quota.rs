//! Prepaid quota: per account and plan a balance that always equals the sum of its
//! append-only ledger entries, and is never negative. Reading balances and the ledger is here;
//! writing the ledger (a charge's debit, a group's entries) is in `ledger`, the operator's
//! credits and adjustments in `corrections`.

mod corrections;
mod ledger;

pub use corrections::{Corrected, Correction, adjust, check_adjustment_units, credit};
pub use ledger::EntryKind;
pub(crate) use ledger::{BalanceChange, Charge, GroupDebit, LedgerRow, debit};

use futures_util::stream::{self, Stream, TryStreamExt};
use serde::Serialize;

use crate::accounts::account_id_of;
use crate::db::Backend;
use crate::db::dialect::{self, PerBackend};
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

/// How many ledger entries one read of [`ledger`] takes.
const LEDGER_CHUNK: i64 = 1000;

/// One chunk of [`ledger`]: the account's entries after `$3`, oldest first, ordered by the
/// account first so that only its own index serves them (`dialect::owned_by`); `$2` is ''.
pub(crate) static LEDGER_CHUNK_SQL: PerBackend =
    PerBackend::new(|backend| ledger_chunk_sql(backend, None));

/// One chunk of [`ledger`] for one plan (`$2`, its slug), from the index on (account, plan,
/// id), so that a plan with a few entries on an account with millions is read without stepping
/// over the others (`dialect::grouped_keyset`).
pub(crate) static LEDGER_OF_PLAN_CHUNK_SQL: PerBackend = PerBackend::new(|backend| {
    ledger_chunk_sql(backend, Some("(SELECT id FROM plans WHERE slug = $2)"))
});

fn ledger_chunk_sql(backend: Backend, plan: Option<&str>) -> String {
    let (after, order) = match plan {
        None => ("l.id > $3 AND $2 = ''".to_owned(), "l.account_id, l.id"),
        Some(plan) => (
            dialect::grouped_keyset(backend, "l.plan_id", plan, "l.id", ">", "$3"),
            "l.account_id, l.plan_id, l.id",
        ),
    };
    format!(
        "SELECT l.id AS entry_id, p.slug AS product_slug, l.kind, l.delta, \
         l.balance_after, l.actor, l.reason, l.reference, l.created_utc \
         FROM ledger_entries l JOIN plans p ON p.id = l.plan_id \
         WHERE {} AND {after} ORDER BY {order} LIMIT $4",
        dialect::owned_by(backend, "l.account_id", "$1")
    )
}

/// The ledger of an account, oldest first, optionally for one plan, read `LEDGER_CHUNK`
/// entries at a time (by id, from where the last chunk ended) as the stream is polled, so that
/// memory stays flat however long the ledger. Every chunk is read in one snapshot (see
/// `Store::begin_snapshot_of_pages`), held on one connection until the stream ends or is
/// dropped: on PostgreSQL ids are not handed out in commit order, and chunks read in snapshots
/// of their own could skip an entry committed behind a later one. An unknown client id fails
/// before the stream starts.
pub async fn ledger(
    store: &Store,
    client_id: &ClientId,
    plan: Option<&PlanSlug>,
) -> Result<impl Stream<Item = Result<LedgerEntry>> + use<>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        entry_id: i64,
        #[sqlx(flatten)]
        entry: LedgerEntry,
    }
    let account_id = account_id_of(store, client_id).await?;
    let mut snapshot = store.begin_snapshot_of_pages().await?;
    if let Some(plan) = plan {
        // A plan that does not exist is a mistake to say, not an empty ledger (asked on the
        // snapshot's connection: no second one from the pool).
        crate::plans::find_plan(&mut snapshot, plan).await?;
    }
    let backend = store.backend();
    let (sql, plan) = match plan {
        None => (&LEDGER_CHUNK_SQL, String::new()),
        Some(plan) => (&LEDGER_OF_PLAN_CHUNK_SQL, plan.as_str().to_owned()),
    };
    Ok(stream::try_unfold(Some((snapshot, 0_i64)), move |state| {
        let plan = plan.clone();
        async move {
            let Some((mut snapshot, after)) = state else {
                return Ok::<_, Error>(None);
            };
            let rows: Vec<Row> = sqlx::query_as(sql.get(backend))
                .bind(account_id)
                .bind(plan)
                .bind(after)
                .bind(LEDGER_CHUNK)
                .fetch_all(&mut *snapshot)
                .await?;
            let next = match rows.last() {
                Some(last) if rows.len() as i64 == LEDGER_CHUNK => Some((snapshot, last.entry_id)),
                _ => {
                    snapshot.rollback().await?;
                    None
                }
            };
            let entries = rows.into_iter().map(|row| Ok(row.entry));
            Ok(Some((stream::iter(entries), next)))
        }
    })
    .try_flatten())
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
    let mut tx = store.begin_snapshot().await?;
    // Only the discrepancies come back: the check reads every balance, the answer holds
    // what differs (none, normally), so memory does not grow with the number of balances.
    let discrepancies: Vec<Discrepancy> = sqlx::query_as(
        "SELECT d.client_id, d.product_slug, d.balance, d.ledger_sum FROM (\
         SELECT a.client_id, p.slug AS product_slug, b.remaining AS balance, \
         COALESCE((SELECT CAST(SUM(l.delta) AS BIGINT) FROM ledger_entries l \
                   WHERE l.account_id = b.account_id AND l.plan_id = b.plan_id), 0) AS ledger_sum \
         FROM balances b JOIN accounts a ON a.id = b.account_id JOIN plans p ON p.id = b.plan_id\
         ) d WHERE d.balance <> d.ledger_sum ORDER BY d.client_id, d.product_slug",
    )
    .fetch_all(&mut *tx)
    .await?;
    let balances_checked: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM balances")
        .fetch_one(&mut *tx)
        .await?;
    // Every ledger entry, and every license that names an account, names a balance: on
    // PostgreSQL no foreign key of theirs says so (migration 0015), this check does.
    let (orphans, orphan_licenses): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM ledger_entries l WHERE NOT EXISTS \
         (SELECT 1 FROM balances b WHERE b.account_id = l.account_id AND b.plan_id = l.plan_id)), \
         (SELECT COUNT(*) FROM licenses l WHERE l.account_id IS NOT NULL AND NOT EXISTS \
         (SELECT 1 FROM balances b WHERE b.account_id = l.account_id AND b.plan_id = l.plan_id))",
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.rollback().await?;
    if orphans > 0 || orphan_licenses > 0 {
        return Err(Error::Internal(format!(
            "{orphans} ledger entries and {orphan_licenses} licenses have no balance"
        )));
    }
    Ok(AuditReport {
        balances_checked,
        discrepancies,
    })
}
