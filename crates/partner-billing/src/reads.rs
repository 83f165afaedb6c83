//! What an API key reads back about its own account (docs/design.md, "Reading back and
//! voiding"): its licenses, its promo batches (counts, never a code), its ledger as a change
//! feed, and what became of a keyed write.
//!
//! Every list pages by keyset: a page is `WHERE (sort key) beyond (the cursor's) ORDER BY …
//! LIMIT n`, read from an index in that order, so page 10 000 costs what page 1 costs and an
//! insert between two pages neither repeats nor hides an item. Reads write nothing.
//!
//! An account's list is ordered by the account first, `ORDER BY l.account_id DESC, l.id DESC`,
//! under the account condition of `dialect::owned_by`: only the account's own index gives that
//! order, and the cursor's bound (`l.id < $2`) positions it. Ordered by `l.id` alone, once
//! statistics showed one account holding most rows, PostgreSQL read "newest first" off the
//! primary key, filtered by account, and stepped over every newer row of the other accounts
//! first (e2e `hot_path_plans`).

pub(crate) mod cursor;
#[cfg(test)]
mod sqlite_plans;

use serde_json::Value;

use crate::db::Backend;
use crate::db::dialect::{self, PerBackend};
use crate::domain::{IdempotencyKey, InvalidField, Login, PlanSlug, PromoBatchId};
use crate::error::{Error, Result};
use crate::idempotency::Scope;
use crate::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::store::Store;
use crate::wire::{
    LedgerEntryRecord, LedgerPage, LicenseList, LicenseRecord, PromoBatchList, PromoBatchSummary,
    RequestStatus,
};

pub(crate) use cursor::{Filter, List};

/// Which page of a list: how many items, and after which (the previous page's `nextCursor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    limit: i64,
    cursor: Option<String>,
}

impl PageRequest {
    /// `limit` 1–500 (100 when absent); `cursor` as a previous page returned it. The cursor is
    /// checked when the page is read, against the list and the account.
    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, InvalidField> {
        let limit = limit.unwrap_or(PAGE_LIMIT_DEFAULT);
        if !(1..=PAGE_LIMIT_MAX).contains(&limit) {
            return Err(InvalidField::new("limit", "must be between 1 and 500"));
        }
        Ok(Self {
            limit,
            cursor: cursor.map(str::to_owned),
        })
    }

    /// The first page of `limit` items.
    pub fn first(limit: i64) -> Self {
        Self {
            limit: limit.clamp(1, PAGE_LIMIT_MAX),
            cursor: None,
        }
    }

    /// The sort key the page starts after, or `start` for the first page. The cursor must be
    /// one of `list` read with the same `filter`.
    fn position(
        &self,
        store: &Store,
        account_id: i64,
        list: List,
        filter: Filter<'_>,
        start: &[i64],
    ) -> Result<Vec<i64>> {
        match &self.cursor {
            None => Ok(start.to_vec()),
            Some(text) => cursor::decode(store, account_id, list, filter, start.len(), text),
        }
    }
}

/// Which of the account's licenses to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LicenseFilter {
    pub login: Option<Login>,
    pub plan: Option<PlanSlug>,
}

impl LicenseFilter {
    /// The query's `login` and `planSlug`, each optional.
    pub fn parse(login: Option<&str>, plan_slug: Option<&str>) -> Result<Self, InvalidField> {
        Ok(Self {
            login: login.map(|l| Login::parse("login", l)).transpose()?,
            plan: plan_slug
                .map(|p| PlanSlug::parse("planSlug", p))
                .transpose()?,
        })
    }

    /// The filter as its cursors seal it: the login, then the plan.
    fn sealed(&self) -> [&str; 2] {
        [
            self.login.as_ref().map_or("", Login::as_str),
            self.plan.as_ref().map_or("", PlanSlug::as_str),
        ]
    }
}

/// A license with its row id, the sort key of the list.
#[derive(sqlx::FromRow)]
struct LicenseRow {
    row_id: i64,
    #[sqlx(flatten)]
    record: LicenseRecord,
}

const LICENSE_SELECT: &str = "SELECT l.id AS row_id, l.license_id, p.slug AS plan_slug, u.login, \
     l.source, l.batch_id, l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc \
     FROM licenses l JOIN users u ON u.id = l.user_id JOIN plans p ON p.id = l.plan_id";

// One statement per filter, each served by its own index (account, [user|plan], id), ordered
// by the account first (see the module's docs): `$1` the account, `$2` the cursor's id, `$3` the
// limit, `$4` the login or '', `$5` the plan or ''. A filter's column is ordered on too, and
// held as `dialect::grouped_keyset` says, so that only its own index serves the page: never
// stepping over every other license of the account to find a rare login's (or plan's). With
// both filters the login's index serves, and the plan is a plain condition: a login has a few
// licenses, a plan may have millions. (The unary plus keeps SQLite from seeking by the plan's
// index instead: a term on `+column` is not one an index can serve.)
const LOGIN_ID: &str = "(SELECT id FROM users WHERE login = $4)";
const PLAN_ID: &str = "(SELECT id FROM plans WHERE slug = $5)";

static LICENSES_SQL: PerBackend = PerBackend::new(|backend| {
    licenses_sql(backend, "l.id < $2 AND $4 = '' AND $5 = ''", "l.id DESC")
});

static LICENSES_OF_LOGIN_SQL: PerBackend = PerBackend::new(|backend| {
    licenses_sql(
        backend,
        &format!("{} AND $5 = ''", older_of(backend, "l.user_id", LOGIN_ID)),
        "l.user_id DESC, l.id DESC",
    )
});

static LICENSES_OF_PLAN_SQL: PerBackend = PerBackend::new(|backend| {
    licenses_sql(
        backend,
        &format!("{} AND $4 = ''", older_of(backend, "l.plan_id", PLAN_ID)),
        "l.plan_id DESC, l.id DESC",
    )
});

static LICENSES_OF_LOGIN_AND_PLAN_SQL: PerBackend = PerBackend::new(|backend| {
    licenses_sql(
        backend,
        &format!(
            "{} AND +l.plan_id = {PLAN_ID}",
            older_of(backend, "l.user_id", LOGIN_ID)
        ),
        "l.user_id DESC, l.id DESC",
    )
});

/// The licenses whose `group` column is `value`, older than the cursor's id (`$2`).
fn older_of(backend: Backend, group: &str, value: &str) -> String {
    dialect::grouped_keyset(backend, group, value, "l.id", "<", "$2")
}

/// A page of the account's licenses where `condition`, ordered by the account, then `order`.
fn licenses_sql(backend: Backend, condition: &str, order: &str) -> String {
    format!(
        "{LICENSE_SELECT} WHERE {} AND {condition} \
         ORDER BY l.account_id DESC, {order} LIMIT $3",
        dialect::owned_by(backend, "l.account_id", "$1")
    )
}

/// The account's licenses (those it issued and those redeemed from its codes), newest first.
pub async fn list_licenses(
    store: &Store,
    account_id: i64,
    filter: &LicenseFilter,
    page: &PageRequest,
) -> Result<LicenseList> {
    let sealed = filter.sealed();
    let before = page.position(store, account_id, List::Licenses, &sealed, &[i64::MAX])?[0];
    let sql = match (&filter.login, &filter.plan) {
        (None, None) => &LICENSES_SQL,
        (Some(_), None) => &LICENSES_OF_LOGIN_SQL,
        (None, Some(_)) => &LICENSES_OF_PLAN_SQL,
        (Some(_), Some(_)) => &LICENSES_OF_LOGIN_AND_PLAN_SQL,
    };
    let rows: Vec<LicenseRow> = store
        .db()
        .page(
            sqlx::query_as(sql.get(store.backend()))
                .bind(account_id)
                .bind(before)
                .bind(page.limit + 1)
                .bind(filter.login.as_ref().map_or("", |l| l.as_str()))
                .bind(filter.plan.as_ref().map_or("", |p| p.as_str())),
        )
        .await?;
    let (rows, next) = split_page(rows, page.limit, |row| vec![row.row_id]);
    Ok(LicenseList {
        licenses: rows.into_iter().map(|row| row.record).collect(),
        next_cursor: next
            .map(|position| cursor::encode(store, account_id, List::Licenses, &sealed, &position))
            .transpose()?,
    })
}

/// One of the account's licenses; any other id, malformed ones included, is
/// [`Error::LicenseNotFound`].
pub async fn get_license(
    store: &Store,
    account_id: i64,
    license_id: &str,
) -> Result<LicenseRecord> {
    let license_id = crate::subscriptions::parse_license_id(license_id)?;
    let sql = format!("{LICENSE_SELECT} WHERE l.account_id = $1 AND l.license_id = $2");
    let row: Option<LicenseRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(account_id)
        .bind(license_id.to_string())
        .fetch_optional(store.pool())
        .await?;
    row.map(|row| row.record).ok_or(Error::LicenseNotFound)
}

/// A promo batch with its row id, the sort key of the list.
#[derive(sqlx::FromRow)]
struct PromoBatchRow {
    row_id: i64,
    #[sqlx(flatten)]
    summary: PromoBatchSummary,
}

/// `$2` is the recovery window in seconds.
const PROMO_BATCH_SELECT: &str = "SELECT b.id AS row_id, b.batch_id, b.order_public_id, \
     p.slug AS plan_slug, b.code_count AS count, \
     b.redeemed, \
     b.voided_utc, b.created_utc, b.created_utc + $2 AS recoverable_until_utc \
     FROM promo_batches b JOIN plans p ON p.id = b.plan_id";

/// A page of the account's promo batches (`$1`), older than the cursor's id (`$3`).
static PROMO_BATCHES_SQL: PerBackend = PerBackend::new(|backend| {
    format!(
        "{PROMO_BATCH_SELECT} WHERE {} AND b.id < $3 ORDER BY b.account_id DESC, b.id DESC \
         LIMIT $4",
        dialect::owned_by(backend, "b.account_id", "$1")
    )
});

/// The account's promo batches, newest first, with how often their codes were redeemed.
pub async fn list_promo_batches(
    store: &Store,
    account_id: i64,
    page: &PageRequest,
) -> Result<PromoBatchList> {
    let before = page.position(store, account_id, List::PromoBatches, &[], &[i64::MAX])?[0];
    let rows: Vec<PromoBatchRow> = store
        .db()
        .page(
            sqlx::query_as(PROMO_BATCHES_SQL.get(store.backend()))
                .bind(account_id)
                .bind(crate::limits::PROMO_RECOVERY_WINDOW_SECONDS)
                .bind(before)
                .bind(page.limit + 1),
        )
        .await?;
    let (rows, next) = split_page(rows, page.limit, |row| vec![row.row_id]);
    Ok(PromoBatchList {
        promo_batches: rows.into_iter().map(|row| row.summary).collect(),
        next_cursor: next
            .map(|position| cursor::encode(store, account_id, List::PromoBatches, &[], &position))
            .transpose()?,
    })
}

/// The batch a `batchId` names; any other text, malformed or not, names none: it is answered
/// [`Error::PromoBatchNotFound`] like an unknown id, and never sent to the database.
pub(crate) fn parse_batch_id(batch_id: &str) -> Result<PromoBatchId> {
    PromoBatchId::parse("batchId", batch_id).map_err(|_| Error::PromoBatchNotFound)
}

/// One of the account's promo batches by its `batchId`; any other is
/// [`Error::PromoBatchNotFound`].
pub async fn get_promo_batch(
    store: &Store,
    account_id: i64,
    batch_id: &str,
) -> Result<PromoBatchSummary> {
    promo_batch(store, account_id, &parse_batch_id(batch_id)?).await
}

/// One of the account's promo batches.
pub(crate) async fn promo_batch(
    store: &Store,
    account_id: i64,
    batch_id: &PromoBatchId,
) -> Result<PromoBatchSummary> {
    let sql = format!("{PROMO_BATCH_SELECT} WHERE b.account_id = $1 AND b.batch_id = $3");
    let row: Option<PromoBatchRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(account_id)
        .bind(crate::limits::PROMO_RECOVERY_WINDOW_SECONDS)
        .bind(batch_id.to_string())
        .fetch_optional(store.pool())
        .await?;
    row.map(|row| row.summary).ok_or(Error::PromoBatchNotFound)
}

/// A ledger entry with its place in the feed.
#[derive(sqlx::FromRow)]
struct LedgerRow {
    commit_xact: i64,
    #[sqlx(flatten)]
    entry: LedgerEntryRecord,
}

// The feed's page: `$1` the account, `$2` and `$3` the cursor's position, `$4` the limit, `$5`
// the product or ''. One product's feed is read from its own index (account, plan, ...), as a
// filtered license list is.
static LEDGER_SQL: PerBackend = PerBackend::new(|backend| ledger_sql(backend, None));

static LEDGER_OF_PRODUCT_SQL: PerBackend =
    PerBackend::new(|backend| ledger_sql(backend, Some("(SELECT id FROM plans WHERE slug = $5)")));

/// A page of the account's ledger feed, of one product's entries when `product` (an
/// expression of its id) is given.
fn ledger_sql(backend: Backend, product: Option<&str>) -> String {
    let (after_position, order) = dialect::ledger_feed_after(backend, product);
    format!(
        "SELECT l.commit_xact, l.id AS entry_id, p.slug AS product_slug, l.kind, \
         l.delta AS units, l.balance_after, l.reference, l.created_utc \
         FROM ledger_entries l JOIN plans p ON p.id = l.plan_id \
         WHERE l.account_id = $1 AND {after_position}{no_product}{settled} \
         ORDER BY {order} LIMIT $4",
        no_product = if product.is_some() {
            ""
        } else {
            " AND $5 = ''"
        },
        settled = dialect::ledger_feed_settled(backend),
    )
}

/// The domain of ledger entries' public ids (`MasterKey::public_id`).
const LEDGER_ENTRY_IDS: &str = "ledger entry";

/// The feed's position before the first entry.
const LEDGER_START: [i64; 2] = [-1, -1];

/// The account's ledger, oldest first, optionally of one product. The page's `nextCursor` is
/// never null: kept and sent later, it returns only the entries written since. Entries are
/// read in commit order (see `dialect::ledger_feed_settled`), so a feed never skips one that
/// committed late.
pub async fn ledger(
    store: &Store,
    account_id: i64,
    product: Option<&PlanSlug>,
    page: &PageRequest,
) -> Result<LedgerPage> {
    let sealed = [product.map_or("", PlanSlug::as_str)];
    let after = page.position(store, account_id, List::Ledger, &sealed, &LEDGER_START)?;
    let sql = match product {
        None => &LEDGER_SQL,
        Some(_) => &LEDGER_OF_PRODUCT_SQL,
    };
    let rows: Vec<LedgerRow> = store
        .db()
        .page(
            sqlx::query_as(sql.get(store.backend()))
                .bind(account_id)
                .bind(after[0])
                .bind(after[1])
                .bind(page.limit + 1)
                .bind(product.map_or("", |p| p.as_str())),
        )
        .await?;
    let has_more = rows.len() as i64 > page.limit;
    let mut rows = rows;
    rows.truncate(page.limit as usize);
    let position = rows
        .last()
        .map_or(after, |row| vec![row.commit_xact, row.entry.entry_id]);
    // An entry's id is numbered across every account: the reseller sees its public form.
    let key = store.master_key()?;
    let entries = rows
        .into_iter()
        .map(|row| {
            let entry_id = key
                .public_id(LEDGER_ENTRY_IDS, row.entry.entry_id)
                .ok_or_else(|| Error::Internal("a ledger entry id past 2^52".to_owned()))?;
            Ok(LedgerEntryRecord {
                entry_id,
                ..row.entry
            })
        })
        .collect::<Result<_>>()?;
    Ok(LedgerPage {
        entries,
        next_cursor: cursor::encode(store, account_id, List::Ledger, &sealed, &position)?,
        has_more,
    })
}

/// Whether the ledger feed would hand out every entry committed so far, by the feed's own
/// condition: on PostgreSQL it holds an entry back while an older writing transaction of the
/// server still runs. For tests that count the feed's entries after their writes.
#[doc(hidden)]
pub async fn ledger_feed_settled(store: &Store) -> Result<bool> {
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM ledger_entries) - \
         (SELECT COUNT(*) FROM ledger_entries l WHERE true{settled})",
        settled = dialect::ledger_feed_settled(store.backend()),
    );
    let held_back: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(store.pool())
        .await?;
    Ok(held_back == 0)
}

/// At most `limit` rows, and the sort key of the last one when more follow.
fn split_page<T>(
    mut rows: Vec<T>,
    limit: i64,
    position: impl Fn(&T) -> Vec<i64>,
) -> (Vec<T>, Option<Vec<i64>>) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more {
        rows.last().map(position)
    } else {
        None
    };
    (rows, next)
}

/// A stored outcome as the lookup reads it.
#[derive(sqlx::FromRow)]
struct RecordRow {
    operation: String,
    response_body: String,
    created_utc: i64,
}

async fn stored_outcome(
    store: &Store,
    account_id: i64,
    key: &IdempotencyKey,
) -> Result<Option<RecordRow>> {
    Ok(sqlx::query_as(
        "SELECT operation, response_body, created_utc FROM idempotency_records \
         WHERE account_id = $1 AND idempotency_key = $2",
    )
    .bind(account_id)
    .bind(key.as_str())
    .fetch_optional(store.pool())
    .await?)
}

/// What became of the account's write under `key`: succeeded (with the ids it created, never
/// a code), still running, or [`Error::RequestNotFound`] (it never arrived, or was refused:
/// refusals are not recorded).
pub async fn request_status(store: &Store, account_id: i64, key: &str) -> Result<RequestStatus> {
    // A key no write could carry has no record: the same answer as any unknown key.
    let Ok(key) = IdempotencyKey::parse("idempotencyKey", key) else {
        return Err(Error::RequestNotFound);
    };
    if let Some(record) = stored_outcome(store, account_id, &key).await? {
        return succeeded(&key, record);
    }
    let name = Scope::Account(account_id).lock_name(&key);
    let running = match store.in_flight_operation(&name) {
        Some(operation) => Some(operation),
        None if dialect::name_locked(store.backend(), store.pool(), &name).await? => Some(""),
        None => None,
    };
    // It may have committed between the two reads.
    if let Some(record) = stored_outcome(store, account_id, &key).await? {
        return succeeded(&key, record);
    }
    match running {
        Some(operation) => Ok(RequestStatus {
            idempotency_key: key.to_string(),
            status: "in_progress".to_owned(),
            operation: (!operation.is_empty()).then(|| operation.to_owned()),
            created_utc: store.now_utc(),
            license_id: None,
            batch_id: None,
            order_public_id: None,
        }),
        None => Err(Error::RequestNotFound),
    }
}

fn succeeded(key: &IdempotencyKey, record: RecordRow) -> Result<RequestStatus> {
    // The stored answer holds no code (a batch's codes are sealed apart); only ids are read.
    let body: Value = serde_json::from_str(&record.response_body)
        .map_err(|e| Error::Internal(format!("stored outcome unreadable: {e}")))?;
    let member = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let is_license = record.operation == "license";
    Ok(RequestStatus {
        idempotency_key: key.to_string(),
        status: "succeeded".to_owned(),
        license_id: if is_license {
            member("licenseId")
        } else {
            None
        },
        batch_id: if is_license { None } else { member("batchId") },
        order_public_id: if is_license {
            None
        } else {
            member("orderPublicId")
        },
        operation: Some(record.operation),
        created_utc: record.created_utc,
    })
}
