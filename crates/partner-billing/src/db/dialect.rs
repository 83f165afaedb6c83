//! The statements spelled differently on SQLite and PostgreSQL, so that no module above the
//! database layer asks which backend it runs on.
//!
//! SQLite has one writer at a time: every write transaction begins with `BEGIN IMMEDIATE`
//! and holds the whole database, so row locks and advisory locks have nothing to add there.
//! PostgreSQL writers run side by side and lock what they touch.

pub(crate) mod group;

use std::sync::OnceLock;

use super::{Backend, Tx};
use crate::error::Result;

/// The statements of a license group transaction on this backend.
pub(crate) fn license_group(backend: Backend) -> &'static group::GroupStatements {
    match backend {
        Backend::Sqlite => &group::SQLITE,
        Backend::Postgres => &group::POSTGRES,
    }
}

/// Inserts promo code hashes from a JSON array of strings (`$2`) for batch row `$1`, skipping
/// any hash already taken.
pub(crate) fn insert_code_hashes(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "INSERT INTO promo_codes (code_hash, batch_row_id) \
             SELECT value, $1 FROM json_each($2) WHERE true ON CONFLICT (code_hash) DO NOTHING"
        }
        Backend::Postgres => {
            "INSERT INTO promo_codes (code_hash, batch_row_id) \
             SELECT value, $1 FROM json_array_elements_text($2::json) \
             ON CONFLICT (code_hash) DO NOTHING"
        }
    }
}

/// Locks the account's row until the transaction ends and reads its client id: `FOR UPDATE`
/// on PostgreSQL; on SQLite `BEGIN IMMEDIATE` already serialises writers.
pub(crate) async fn lock_account(backend: Backend, tx: &mut Tx, account_id: i64) -> Result<String> {
    let sql = match backend {
        Backend::Sqlite => "SELECT client_id FROM accounts WHERE id = $1",
        Backend::Postgres => "SELECT client_id FROM accounts WHERE id = $1 FOR UPDATE",
    };
    Ok(sqlx::query_scalar(sql)
        .bind(account_id)
        .fetch_one(&mut **tx)
        .await?)
}

/// Takes a transaction-scoped lock on `name` across processes if no one holds it; `false`
/// when another transaction does. PostgreSQL: an advisory lock on the name's hash; SQLite:
/// always `true`, its write lock being held already.
pub(crate) async fn try_lock_name(backend: Backend, tx: &mut Tx, name: &str) -> Result<bool> {
    match backend {
        Backend::Sqlite => Ok(true),
        Backend::Postgres => Ok(sqlx::query_scalar(
            "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
        )
        .bind(name)
        .fetch_one(&mut **tx)
        .await?),
    }
}

/// [`try_lock_name`] for many names in one statement, in their order: which this transaction
/// now holds. SQLite: all, its write lock being held already.
pub(crate) async fn try_lock_names(
    backend: Backend,
    tx: &mut Tx,
    names: &[String],
) -> Result<Vec<bool>> {
    match backend {
        Backend::Postgres if !names.is_empty() => Ok(sqlx::query_scalar(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(t.name, 0)) \
             FROM json_array_elements_text($1::json) WITH ORDINALITY AS t(name, n) ORDER BY t.n",
        )
        .bind(super::json_param(names)?)
        .fetch_all(&mut **tx)
        .await?),
        _ => Ok(vec![true; names.len()]),
    }
}

/// The pick of due webhook messages; PostgreSQL appends its row-lock clause.
macro_rules! lease_select {
    () => {
        "SELECT m.id, m.endpoint_row_id, m.attempts, ev.event_id, ev.body, e.url, e.endpoint_id, e.sealed_secret \
         FROM webhook_messages m JOIN webhook_events ev ON ev.id = m.event_row_id \
         JOIN webhook_endpoints e ON e.id = m.endpoint_row_id \
         WHERE m.status = 'pending' AND m.next_attempt_utc <= $1 \
         AND (m.lease_until_utc IS NULL OR m.lease_until_utc <= $1) AND e.status = 'enabled' \
         ORDER BY m.next_attempt_utc, m.id LIMIT $2"
    };
}

/// Up to `$2` due messages of enabled endpoints at `$1`, oldest due first; on PostgreSQL
/// locked and skipping rows another worker has locked, so workers never lease one message
/// twice.
pub(crate) fn lease_due_messages(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => concat!(lease_select!(), " FOR UPDATE OF m SKIP LOCKED"),
        Backend::Sqlite => lease_select!(),
    }
}

/// Whether a transaction of another connection holds the lock [`try_lock_name`] takes on
/// `name`, read without taking it. PostgreSQL: the advisory lock in `pg_locks` (its 64-bit key
/// is split in `classid`, the high half, and `objid`); SQLite: `false`, its locks are never
/// held past one write transaction of this process.
pub(crate) async fn name_locked(
    backend: Backend,
    pool: &sqlx::AnyPool,
    name: &str,
) -> Result<bool> {
    match backend {
        Backend::Sqlite => Ok(false),
        Backend::Postgres => Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0))",
        )
        .bind(name)
        .fetch_one(pool)
        .await?),
    }
}

/// The condition that the rows belong to one owner (an account, an endpoint), `column` equal
/// to the parameter `param`, in a list that pages through that owner's rows newest first (or
/// oldest first) by its own index, `(column, key...)`, ordered `column` first.
///
/// PostgreSQL: `column = ANY(ARRAY[param])`. With `column = param` the planner drops `column`
/// from the order (it is the same on every row), and the order by the key alone is also the
/// primary key's: once statistics show one owner holding most rows, it reads the primary key
/// and filters by owner, stepping over every other owner's rows on the way (a large account's
/// first page grew with everyone else's history). The array comparison means the same, but the
/// planner keeps `column` in the order, which only the owner's own index gives; and the key's
/// bound (`id < $n`) then positions that index, so a deep page costs what the first one does.
/// SQLite plans by rules and takes the owner's index either way.
pub(crate) fn owned_by(backend: Backend, column: &str, param: &str) -> String {
    match backend {
        Backend::Sqlite => format!("{column} = {param}"),
        Backend::Postgres => format!("{column} = ANY(ARRAY[{param}::bigint])"),
    }
}

/// The keyset test of a list filtered to one value of a column, `group` (the login's
/// `l.user_id`, the product's `l.plan_id`): the rows whose `group` is `value` (an expression)
/// and whose `key` (one column or several, comma-separated) lies beyond `position` in the
/// direction `op` (`<` for older pages, `>` for newer), in a list ordered by its owner, then
/// `group`, then `key`, which only the index on (owner, group, key) gives.
///
/// PostgreSQL: the row value `(group, key) op (value, position)` positions that index, and the
/// group's bound on the other side (`group >= value` for `<`) keeps the list to its value. With
/// `group = value` the planner would drop `group` from the order, as it does for an owner
/// (see [`owned_by`]), and the owner's index, filtered row by row, could serve it: stepping
/// over every other row of the owner to find a rare login's. And not both bounds on `group`:
/// the planner takes such a range on a value it cannot see for 0.5 % of the rows and may then
/// sort a large group's rows rather than read them in order. SQLite: `group = value AND key op
/// position`: it seeks on a row value's first column only, so a row value would step over
/// every row of a large group before the position, page after page.
pub(crate) fn grouped_keyset(
    backend: Backend,
    group: &str,
    value: &str,
    key: &str,
    op: &str,
    position: &str,
) -> String {
    match backend {
        Backend::Sqlite => format!("{group} = {value} AND ({key}) {op} ({position})"),
        Backend::Postgres => {
            let other_side = if op == "<" { ">=" } else { "<=" };
            format!("({group}, {key}) {op} ({value}, {position}) AND {group} {other_side} {value}")
        }
    }
}

/// The ledger feed's position test and order (alias `l`; `$2`, `$3` the cursor's transaction
/// and id), of one product's entries when `product` (an expression of its id) is given.
/// PostgreSQL: the row value `(commit_xact, id)`, an index range on (account, commit_xact, id),
/// or on (account, plan, commit_xact, id) for one product ([`grouped_keyset`]). SQLite: every
/// entry's `commit_xact` is 0, so the id alone orders the feed, and an index range on
/// (account, id), or (account, plan, id), serves it (SQLite does not seek on a row-value
/// comparison: it would scan from the start, page after page).
pub(crate) fn ledger_feed_after(backend: Backend, product: Option<&str>) -> (String, &'static str) {
    match (backend, product) {
        (Backend::Sqlite, None) => ("l.commit_xact >= $2 AND l.id > $3".to_owned(), "l.id"),
        (Backend::Sqlite, Some(product)) => (
            format!("l.plan_id = {product} AND l.commit_xact >= $2 AND l.id > $3"),
            "l.id",
        ),
        (Backend::Postgres, None) => (
            "(l.commit_xact, l.id) > ($2, $3)".to_owned(),
            "l.commit_xact, l.id",
        ),
        (Backend::Postgres, Some(product)) => (
            grouped_keyset(
                backend,
                "l.plan_id",
                product,
                "l.commit_xact, l.id",
                ">",
                "$2, $3",
            ),
            "l.plan_id, l.commit_xact, l.id",
        ),
    }
}

/// The condition that keeps the ledger's change feed from handing out an entry before every
/// entry that could sort before it has committed (alias `l` for `ledger_entries`). PostgreSQL:
/// only entries of transactions older than every transaction still running; SQLite: none, its
/// one writer commits entries in id order.
pub(crate) fn ledger_feed_settled(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "",
        Backend::Postgres => {
            " AND l.commit_xact < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        }
    }
}

/// The text elements of the JSON array bound as parameter `$n`, as a subquery for `IN`:
/// `json_each` on SQLite; on PostgreSQL through `small_json_array`, whose small row estimate
/// makes the planner probe the index once per element instead of scanning the whole table
/// (`json_array_elements_text` is estimated at 100 rows).
pub(crate) fn json_text_elements(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => format!("(SELECT value FROM json_each(${n}))"),
        Backend::Postgres => {
            format!("(SELECT e #>> '{{}}' FROM small_json_array(${n}::json) AS e)")
        }
    }
}

/// The text elements of the JSON array bound as parameter `$n` with their 1-based positions,
/// as a table for `FROM`: columns `value` and `n`.
/// A statement's text for each backend, built on first use and kept for the process (a shared
/// read finds its queue by the text's address, so each backend's text is one string).
pub(crate) struct PerBackend {
    build: fn(Backend) -> String,
    sqlite: OnceLock<String>,
    postgres: OnceLock<String>,
}

impl PerBackend {
    pub(crate) const fn new(build: fn(Backend) -> String) -> Self {
        Self {
            build,
            sqlite: OnceLock::new(),
            postgres: OnceLock::new(),
        }
    }

    /// The text for `backend`.
    pub(crate) fn get(&'static self, backend: Backend) -> &'static str {
        let text = match backend {
            Backend::Sqlite => &self.sqlite,
            Backend::Postgres => &self.postgres,
        };
        text.get_or_init(|| (self.build)(backend))
    }
}

pub(crate) fn numbered_json_texts(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => format!("(SELECT value, key + 1 AS n FROM json_each(${n}))"),
        Backend::Postgres => format!(
            "(SELECT value, n FROM json_array_elements_text(${n}::json) WITH ORDINALITY AS t(value, n))"
        ),
    }
}

/// Joins the row of `table` (alias `alias`) whose unique `column` equals `value` (an expression
/// of the rows joined before), probing `column`'s index once per row whatever the planner's
/// statistics say. PostgreSQL: a lateral subquery with a limit, which the planner cannot turn
/// into a join driven from another side (with stale statistics it otherwise may: all of a
/// table's rows read through another index). SQLite takes the unique index for the join: it
/// chooses by cost, and with no statistics (the service never runs `ANALYZE`) it assumes every
/// table large.
pub(crate) fn join_unique(
    backend: Backend,
    table: &str,
    alias: &str,
    column: &str,
    value: &str,
) -> String {
    match backend {
        Backend::Sqlite => format!("JOIN {table} {alias} ON {alias}.{column} = {value}"),
        Backend::Postgres => format!(
            "CROSS JOIN LATERAL (SELECT * FROM {table} WHERE {column} = {value} LIMIT 1) {alias}"
        ),
    }
}
