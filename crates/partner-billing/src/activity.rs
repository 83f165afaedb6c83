//! What a reseller reads about its own account in the panel: the ledger (a page at a time, or
//! streamed for the CSV), its promo batches with how many codes were redeemed (never a code),
//! its licenses, and its activity (the audit trail, read in `audit`).
//!
//! Every page is a keyset page, newest first, with an "Older" and a "Newer" cursor: `WHERE
//! (key) < (cursor) ORDER BY key DESC` (or `> … ASC` going back), where the key is the list's
//! sort key (the row id, or the trail's `created_utc, id`), ordered by the account first, in
//! the direction its index is read, so that the index on (account, key) serves it and nothing
//! else can (`dialect::owned_by`). A list filtered to one login or product is ordered by
//! that column too, after the account, and read from the index on (account, column, key)
//! (`dialect::grouped_keyset`). Keyset pages only (never a skip count), and nothing reads a
//! whole table: the CSV is read in keyset chunks as it is sent.

use futures_util::Stream;

use crate::db::Backend;
use crate::db::dialect::{self, PerBackend};
use crate::domain::Login;
use crate::error::Result;
use crate::limits::{
    PANEL_LEDGER_PAGE_SIZE, PANEL_LICENSES_PAGE_SIZE, PANEL_PROMO_BATCHES_PAGE_SIZE,
};
use crate::reads::cursor::{self, List};
use crate::store::Store;
use crate::utc::{SECONDS_PER_DAY, day_start};

/// Ledger entries read at a time for the CSV.
const CSV_CHUNK: i64 = 1000;

/// A page of a panel list, newest first, with the cursors of its neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelPage<T> {
    pub items: Vec<T>,
    /// The cursor of the next older page, if there is one.
    pub older: Option<String>,
    /// The cursor of the next newer page, if there is one.
    pub newer: Option<String>,
}

/// A row that knows its place in the list: the values of the list's key columns.
pub(crate) trait Keyed {
    fn sort_key(&self) -> Vec<i64>;
}

const OLDER: i64 = 0;
const NEWER: i64 = 1;

/// What a panel list reads: `select` (its columns, `FROM` and joins, no `WHERE`) of the rows
/// whose `owner` column is the account (bound as `$1`), newest first by the `key` columns
/// (most significant first; unique together), from an index on (owner, key); or, for a list
/// filtered to one value of a column, from an index on (owner, that column, key).
pub(crate) struct ListQuery<'a> {
    pub(crate) select: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) key: &'a [&'a str],
    /// The index stores the key newest first (its key columns `DESC`): read forwards, owner
    /// ascending, for the older pages.
    pub(crate) key_descending_in_index: bool,
    /// The filter, bound as `$2`: `None` lists every row of the owner (and `$2` must be '').
    pub(crate) filter: Option<Group<'a>>,
}

/// A filter that holds a list to the rows whose `column` is `value`, an expression of `$2`
/// (the login's id, say): read from the index on (owner, column, key), the column stored in
/// the key's direction, so that a rare value's page never steps over the owner's other rows.
pub(crate) struct Group<'a> {
    pub(crate) column: &'a str,
    pub(crate) value: &'a str,
}

impl ListQuery<'_> {
    /// The statement of a page beyond a position: older rows (`<`, newest first) or newer ones
    /// (`>`, oldest first). `$1` the owner, `$2` the filter, then the position's key values,
    /// then the limit.
    fn page_sql(&self, backend: Backend, op: &str) -> String {
        let order = if op == ">" { "ASC" } else { "DESC" };
        // Ordered by the owner first, so that only the owner's own index serves the page (see
        // `dialect::owned_by`), in the direction that index is read in.
        let owner_order = match (order, self.key_descending_in_index) {
            ("ASC", true) | ("DESC", false) => "DESC",
            _ => "ASC",
        };
        let owned = dialect::owned_by(backend, self.owner, "$1");
        let columns = self.key.join(", ");
        let params: Vec<String> = (0..self.key.len()).map(|i| format!("${}", i + 3)).collect();
        let position = params.join(", ");
        let limit_param = self.key.len() + 3;
        let (keyset, group_order) = match &self.filter {
            None => (format!("({columns}) {op} ({position}) AND $2 = ''"), None),
            Some(group) => (
                dialect::grouped_keyset(
                    backend,
                    group.column,
                    group.value,
                    &columns,
                    op,
                    &position,
                ),
                Some(format!("{} {order}", group.column)),
            ),
        };
        let order_by: Vec<String> = std::iter::once(format!("{} {owner_order}", self.owner))
            .chain(group_order)
            .chain(self.key.iter().map(|column| format!("{column} {order}")))
            .collect();
        format!(
            "{} WHERE {owned} AND {keyset} ORDER BY {} LIMIT ${limit_param}",
            self.select,
            order_by.join(", ")
        )
    }
}

/// One page of a [`ListQuery`], starting at `cursor`. Malformed or foreign cursors, and
/// cursors of the list under another filter, are `Request.ValidationFailed` on `cursor`; the
/// page's own links carry its filter.
pub(crate) async fn newest_first<T>(
    store: &Store,
    account_id: i64,
    list: List,
    query: &ListQuery<'_>,
    filter: &str,
    cursor: Option<&str>,
    limit: i64,
) -> Result<PanelPage<T>>
where
    T: Keyed + for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> + Send + Unpin,
{
    let key = query.key;
    let (direction, position) = match cursor {
        None => (OLDER, vec![i64::MAX; key.len()]),
        Some(text) => {
            let values = cursor::decode(store, account_id, list, &[filter], key.len() + 1, text)?;
            (values[0], values[1..].to_vec())
        }
    };
    let fetch = |op: &str, position: Vec<i64>, limit: i64| {
        let sql = query.page_sql(store.backend(), op);
        async move {
            let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(account_id)
                .bind(filter);
            for value in position {
                query = query.bind(value);
            }
            let rows: Vec<T> = store.db().page(query.bind(limit)).await?;
            Ok::<_, crate::Error>(rows)
        }
    };
    let op = if direction == NEWER { ">" } else { "<" };
    let mut items = fetch(op, position, limit + 1).await?;
    let more = items.len() as i64 > limit;
    items.truncate(limit as usize);
    if direction == NEWER {
        items.reverse();
    }
    let (Some(first), Some(last)) = (items.first(), items.last()) else {
        return Ok(PanelPage {
            items,
            older: None,
            newer: None,
        });
    };
    let (first_key, last_key) = (first.sort_key(), last.sort_key());
    let older_exists = if direction == NEWER {
        !fetch("<", last_key.clone(), 1).await?.is_empty()
    } else {
        more
    };
    let newer_exists = if direction == NEWER {
        more
    } else {
        !fetch(">", first_key.clone(), 1).await?.is_empty()
    };
    let link = |direction: i64, key: &[i64]| {
        let mut position = vec![direction];
        position.extend_from_slice(key);
        cursor::encode(store, account_id, list, &[filter], &position)
    };
    Ok(PanelPage {
        older: older_exists.then(|| link(OLDER, &last_key)).transpose()?,
        newer: newer_exists.then(|| link(NEWER, &first_key)).transpose()?,
        items,
    })
}

/// One ledger entry as the reseller sees it (no actor, no operator reason).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerRow {
    pub entry_id: i64,
    pub created_utc: i64,
    pub product_slug: String,
    pub kind: String,
    pub units: i64,
    pub balance_after: i64,
    pub reference: Option<String>,
}

impl Keyed for LedgerRow {
    fn sort_key(&self) -> Vec<i64> {
        vec![self.entry_id]
    }
}

const LEDGER_SELECT: &str = "SELECT l.id AS entry_id, l.created_utc, p.slug AS product_slug, \
     l.kind, l.delta AS units, l.balance_after, l.reference \
     FROM ledger_entries l JOIN plans p ON p.id = l.plan_id";

/// The account's ledger, newest first.
const LEDGER_LIST: ListQuery<'static> = ListQuery {
    select: LEDGER_SELECT,
    owner: "l.account_id",
    key: &["l.id"],
    key_descending_in_index: false,
    filter: None,
};

/// The ledger of one product (`$2`), from the (account, plan, id) index.
const LEDGER_OF_PRODUCT_LIST: ListQuery<'static> = ListQuery {
    filter: Some(Group {
        column: "l.plan_id",
        value: "(SELECT id FROM plans WHERE slug = $2)",
    }),
    ..LEDGER_LIST
};

/// One chunk of the CSV: `CSV_CHUNK` entries older than `$2`, of the account `$1`.
static CSV_CHUNK_SQL: PerBackend = PerBackend::new(|backend| {
    format!(
        "{LEDGER_SELECT} WHERE {} AND l.id < $2 ORDER BY l.account_id DESC, l.id DESC LIMIT $3",
        dialect::owned_by(backend, "l.account_id", "$1")
    )
});

/// A page of the account's ledger, newest first, optionally for one product (`""` for all).
pub async fn ledger_page(
    store: &Store,
    account_id: i64,
    product_slug: &str,
    cursor: Option<&str>,
) -> Result<PanelPage<LedgerRow>> {
    let query = if product_slug.is_empty() {
        &LEDGER_LIST
    } else {
        &LEDGER_OF_PRODUCT_LIST
    };
    newest_first(
        store,
        account_id,
        List::PanelLedger,
        query,
        product_slug,
        cursor,
        PANEL_LEDGER_PAGE_SIZE,
    )
    .await
}

/// Every ledger entry of the account, newest first, read `CSV_CHUNK` at a time as the
/// stream is polled: memory stays flat however long the ledger, and no connection is held
/// between chunks.
pub fn ledger_stream(store: Store, account_id: i64) -> impl Stream<Item = Result<LedgerRow>> {
    use futures_util::stream::{self, TryStreamExt};
    stream::try_unfold(Some(i64::MAX), move |before| {
        let store = store.clone();
        async move {
            let Some(before) = before else {
                return Ok::<_, crate::Error>(None);
            };
            let rows: Vec<LedgerRow> = store
                .db()
                .page(
                    sqlx::query_as(CSV_CHUNK_SQL.get(store.backend()))
                        .bind(account_id)
                        .bind(before)
                        .bind(CSV_CHUNK),
                )
                .await?;
            let next = (rows.len() as i64 == CSV_CHUNK)
                .then(|| rows.last().map(|r| r.entry_id))
                .flatten();
            Ok(Some((stream::iter(rows.into_iter().map(Ok)), next)))
        }
    })
    .try_flatten()
}

/// A promo batch with its redemption count; the codes themselves are never read here.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PromoBatchRow {
    pub row_id: i64,
    pub batch_id: String,
    pub product_slug: String,
    pub code_count: i64,
    pub redeemed: i64,
    pub created_utc: i64,
    /// The end of the window in which a retry with the same key returns the codes again.
    pub recoverable_until_utc: i64,
    /// When the reseller voided the whole batch.
    pub voided_utc: Option<i64>,
}

impl Keyed for PromoBatchRow {
    fn sort_key(&self) -> Vec<i64> {
        vec![self.row_id]
    }
}

/// The columns of a promo batch row and their tables.
static PROMO_BATCHES_SELECT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT b.id AS row_id, b.batch_id, p.slug AS product_slug, b.code_count, b.redeemed, \
         b.created_utc, b.created_utc + {window} AS recoverable_until_utc, b.voided_utc \
         FROM promo_batches b JOIN plans p ON p.id = b.plan_id",
        window = crate::limits::PROMO_RECOVERY_WINDOW_SECONDS,
    )
});

/// The account's promo batches, newest first.
fn promo_batches_list() -> ListQuery<'static> {
    ListQuery {
        select: &PROMO_BATCHES_SELECT,
        owner: "b.account_id",
        key: &["b.id"],
        key_descending_in_index: false,
        filter: None,
    }
}

/// The account's promo batches, newest first, a page at a time.
pub async fn promo_batches(
    store: &Store,
    account_id: i64,
    cursor: Option<&str>,
) -> Result<PanelPage<PromoBatchRow>> {
    newest_first(
        store,
        account_id,
        List::PanelPromoBatches,
        &promo_batches_list(),
        "",
        cursor,
        PANEL_PROMO_BATCHES_PAGE_SIZE,
    )
    .await
}

/// A license the account issued, or one redeemed from its promo codes.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LicenseRow {
    pub row_id: i64,
    pub license_id: String,
    pub login: String,
    pub product_slug: String,
    pub created_utc: i64,
    pub starts_utc: i64,
    pub expires_utc: Option<i64>,
    pub revoked_utc: Option<i64>,
}

impl Keyed for LicenseRow {
    fn sort_key(&self) -> Vec<i64> {
        vec![self.row_id]
    }
}

/// The account's licenses, newest first, a page at a time, optionally for one login
/// (compared exactly).
pub async fn licenses(
    store: &Store,
    account_id: i64,
    login: Option<&Login>,
    cursor: Option<&str>,
) -> Result<PanelPage<LicenseRow>> {
    let query = if login.is_some() {
        &LICENSES_OF_LOGIN_LIST
    } else {
        &LICENSES_LIST
    };
    newest_first(
        store,
        account_id,
        List::PanelLicenses,
        query,
        login.map_or("", Login::as_str),
        cursor,
        PANEL_LICENSES_PAGE_SIZE,
    )
    .await
}

/// The account's licenses, newest first.
const LICENSES_LIST: ListQuery<'static> = ListQuery {
    select: "SELECT l.id AS row_id, l.license_id, u.login, p.slug AS product_slug, \
             l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc \
             FROM licenses l JOIN users u ON u.id = l.user_id \
             JOIN plans p ON p.id = l.plan_id",
    owner: "l.account_id",
    key: &["l.id"],
    key_descending_in_index: false,
    filter: None,
};

/// One login's licenses (`$2`), from the (account, user, id) index.
const LICENSES_OF_LOGIN_LIST: ListQuery<'static> = ListQuery {
    filter: Some(Group {
        column: "l.user_id",
        value: "(SELECT id FROM users WHERE login = $2)",
    }),
    ..LICENSES_LIST
};

/// Units spent on one day (UTC) on one product: licenses and promo batches charged that day.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UsageRow {
    /// The day's first second (Unix seconds, UTC).
    pub day_utc: i64,
    pub product_slug: String,
    pub units: i64,
}

/// Days the overview's usage covers, today included.
pub const USAGE_DAYS: i64 = 30;

/// Units the account spent per day and product over the last [`USAGE_DAYS`] days, oldest
/// day first; days without spending are absent. At most 30 × products rows, read from the
/// ledger's (account, time) index.
pub async fn usage_by_day(store: &Store, account_id: i64) -> Result<Vec<UsageRow>> {
    let since = day_start(store.now_utc()) - (USAGE_DAYS - 1) * SECONDS_PER_DAY;
    // The day of an entry as `day_start` tells it (times are never negative here).
    let sql = format!(
        "SELECT (l.created_utc / {SECONDS_PER_DAY}) * {SECONDS_PER_DAY} AS day_utc, \
         p.slug AS product_slug, CAST(SUM(-l.delta) AS BIGINT) AS units \
         FROM ledger_entries l JOIN plans p ON p.id = l.plan_id \
         WHERE l.account_id = $1 AND l.created_utc >= $2 \
         AND l.kind IN ('license', 'promo_batch') \
         GROUP BY (l.created_utc / {SECONDS_PER_DAY}) * {SECONDS_PER_DAY}, p.slug \
         ORDER BY day_utc, product_slug"
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(account_id)
        .bind(since)
        .fetch_all(store.pool())
        .await?)
}

/// Every panel list's page statements, both directions, and the CSV's chunk, each with the
/// table (alias) it lists and the index seek SQLite's plan must show for it: for the plan
/// tests.
#[cfg(test)]
pub(crate) fn panel_lists(backend: Backend) -> Vec<(String, String, &'static str, String)> {
    let lists = [
        (
            "ledger",
            &LEDGER_LIST,
            "l",
            "ledger_entries_account_id (account_id=? AND id{op}?)",
        ),
        (
            "one product's ledger",
            &LEDGER_OF_PRODUCT_LIST,
            "l",
            // The ledger's id is its row id, which every index of the table ends with.
            "ledger_entries_account_plan (account_id=? AND plan_id=? AND rowid{op}?)",
        ),
        (
            "licenses",
            &LICENSES_LIST,
            "l",
            "licenses_account_id (account_id=? AND id{op}?)",
        ),
        (
            "one login's licenses",
            &LICENSES_OF_LOGIN_LIST,
            "l",
            "licenses_account_user_id (account_id=? AND user_id=? AND id{op}?)",
        ),
        (
            "promo batches",
            &promo_batches_list(),
            "b",
            // The id is the row id, which every index of the table ends with.
            "promo_batches_account (account_id=? AND rowid{op}?)",
        ),
        (
            "activity",
            &crate::audit_log::PANEL_LIST,
            "e",
            "audit_entries_account_time (account_id=? AND created_utc{op}?)",
        ),
    ];
    let mut statements = vec![(
        "the CSV's chunk".to_owned(),
        CSV_CHUNK_SQL.get(backend).to_owned(),
        "l",
        "ledger_entries_account_id (account_id=? AND id<?)".to_owned(),
    )];
    for (name, list, table, seek) in lists {
        for op in ["<", ">"] {
            statements.push((
                format!("{name}, {op}"),
                list.page_sql(backend, op),
                table,
                seek.replace("{op}", op),
            ));
        }
    }
    statements
}
