//! Reading the audit trail back: keyset pages newest first, for the reseller (its own account
//! only: the JSON list, and the panel's page with "Older" and "Newer" as every panel list has)
//! and for the operator (every account, or one; from a time on).
//!
//! Apart from [`crate::audit`], which writes the entries: the operator's view finds an account
//! by its client id through [`crate::accounts`], which itself writes entries, so reading sits
//! above both.

use std::collections::BTreeMap;

use crate::accounts::account_id_of;
use crate::activity::{self, Keyed, PanelPage};
use crate::db::dialect::{self, PerBackend};
use crate::domain::{ClientId, InvalidField};
use crate::error::Result;
use crate::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::reads::cursor::{self, Filter, List};
use crate::store::Store;
use crate::wire::{AuditEntry, AuditEntryList};

/// Where a page starts: just older than the last entry of the previous page, by its sort key
/// (`created_utc`, `id`). Its cursor is sealed as every list's (`reads::cursor`): to the
/// account (the operator's log: to the client id it was read for, or none) and to the
/// operator's `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    created_utc: i64,
    id: i64,
}

impl Position {
    /// Before every entry: the first page.
    const START: Self = Self {
        created_utc: i64::MAX,
        id: i64::MAX,
    };
}

/// Whose trail a page reads, and so what its cursors are sealed to.
#[derive(Clone, Copy)]
struct Trail<'a> {
    list: List,
    /// The account, or 0 for the operator's log of every account.
    account_id: i64,
    filter: Filter<'a>,
}

impl Trail<'_> {
    /// The position a cursor of this trail carries; any other text is `400` naming `cursor`.
    fn position(&self, store: &Store, cursor: Option<&str>) -> Result<Position> {
        let Some(cursor) = cursor else {
            return Ok(Position::START);
        };
        let key = cursor::decode(store, self.account_id, self.list, self.filter, 2, cursor)?;
        Ok(Position {
            created_utc: key[0],
            id: key[1],
        })
    }

    /// The page of `rows` (read past a position, one more than `limit` to tell whether a next
    /// page exists), with the cursor of the next one.
    fn page(&self, store: &Store, mut rows: Vec<EntryRow>, limit: i64) -> Result<AuditPage> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last()
                .map(|row| {
                    let key = [row.created_utc, row.id];
                    cursor::encode(store, self.account_id, self.list, self.filter, &key)
                })
                .transpose()?
        } else {
            None
        };
        Ok(AuditPage {
            entries: rows.into_iter().map(EntryRow::into_entry).collect(),
            next_cursor,
        })
    }
}

/// `limit` of a page: 1 to [`PAGE_LIMIT_MAX`], [`PAGE_LIMIT_DEFAULT`] when left out.
pub fn parse_limit(limit: Option<i64>) -> std::result::Result<i64, InvalidField> {
    match limit {
        None => Ok(PAGE_LIMIT_DEFAULT),
        Some(n) if (1..=PAGE_LIMIT_MAX).contains(&n) => Ok(n),
        Some(_) => Err(InvalidField::new("limit", "must be between 1 and 500")),
    }
}

/// A page of entries and where the next one starts.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next (older) page, `None` on the last one.
    pub next_cursor: Option<String>,
}

impl From<AuditPage> for AuditEntryList {
    fn from(page: AuditPage) -> Self {
        Self {
            entries: page.entries,
            next_cursor: page.next_cursor,
        }
    }
}

#[derive(sqlx::FromRow)]
struct EntryRow {
    id: i64,
    created_utc: i64,
    action: String,
    actor: String,
    source_address: Option<String>,
    request_id: Option<String>,
    client_id: Option<String>,
    subjects: String,
    details: String,
}

impl Keyed for EntryRow {
    fn sort_key(&self) -> Vec<i64> {
        vec![self.created_utc, self.id]
    }
}

impl EntryRow {
    fn into_entry(self) -> AuditEntry {
        AuditEntry {
            created_utc: self.created_utc,
            action: self.action,
            actor: self.actor,
            source_address: self.source_address,
            request_id: self.request_id,
            client_id: self.client_id,
            ids: serde_json::from_str::<BTreeMap<String, String>>(&self.subjects)
                .unwrap_or_default(),
            details: serde_json::from_str(&self.details)
                .unwrap_or_else(|_| serde_json::Value::Object(Default::default())),
        }
    }
}

const COLUMNS: &str = "SELECT e.id, e.created_utc, e.action, e.actor, e.source_address, \
     e.request_id, a.client_id, e.subjects, e.details \
     FROM audit_entries e LEFT JOIN accounts a ON a.id = e.account_id";

/// Entries before the cursor (`$2`, `$3`), newest first: a row comparison, which starts the
/// index (created_utc, id) at the cursor on PostgreSQL (an `OR` of the two columns' tests
/// cannot, and a deep page read every newer entry first). SQLite starts it at the cursor's
/// second (its `id` is the rowid) and steps over that second's newer entries.
const KEYSET: &str = "(e.created_utc, e.id) < ($2, $3)";

/// A page of one account's trail (`$1`), ordered by the account first so that only the
/// account's own index (account, created_utc DESC, id DESC) serves it (`dialect::owned_by`).
pub(crate) static ACCOUNT_PAGE: PerBackend = PerBackend::new(|backend| {
    format!(
        "{COLUMNS} WHERE {} AND {KEYSET} \
         ORDER BY e.account_id, e.created_utc DESC, e.id DESC LIMIT $4",
        dialect::owned_by(backend, "e.account_id", "$1")
    )
});

/// The operator's page of one account's trail (`$5`), entries at or after `$1`.
pub(crate) static OPERATOR_ACCOUNT_PAGE: PerBackend = PerBackend::new(|backend| {
    format!(
        "{COLUMNS} WHERE {} AND e.created_utc >= $1 AND {KEYSET} \
         ORDER BY e.account_id, e.created_utc DESC, e.id DESC LIMIT $4",
        dialect::owned_by(backend, "e.account_id", "$5")
    )
});

/// The operator's page of every account's trail, entries at or after `$1`.
pub(crate) static OPERATOR_PAGE: PerBackend = PerBackend::new(|_| {
    format!(
        "{COLUMNS} WHERE e.created_utc >= $1 AND {KEYSET} \
         ORDER BY e.created_utc DESC, e.id DESC LIMIT $4"
    )
});

/// A page of one account's trail, newest first. The account comes from the caller's
/// credentials, never from the cursor: no cursor reaches another account's entries.
pub async fn account_page(
    store: &Store,
    account_id: i64,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<AuditPage> {
    let limit = parse_limit(limit)?;
    let trail = Trail {
        list: List::Activity,
        account_id,
        filter: &[],
    };
    let after = trail.position(store, cursor)?;
    let rows = store
        .db()
        .page(
            sqlx::query_as(ACCOUNT_PAGE.get(store.backend()))
                .bind(account_id)
                .bind(after.created_utc)
                .bind(after.id)
                .bind(limit + 1),
        )
        .await?;
    trail.page(store, rows, limit)
}

/// The account's trail in the panel, newest first, from the (account, time, id) index.
pub(crate) const PANEL_LIST: activity::ListQuery<'static> = activity::ListQuery {
    select: COLUMNS,
    owner: "e.account_id",
    key: &["e.created_utc", "e.id"],
    key_descending_in_index: true,
    filter: None,
};

/// A page of one account's trail for the panel, newest first by the trail's sort key
/// (`created_utc`, `id`: the JSON list's order), with the cursors of the older and the newer
/// page, as every panel list pages.
pub async fn panel_page(
    store: &Store,
    account_id: i64,
    cursor: Option<&str>,
) -> Result<PanelPage<AuditEntry>> {
    let page: PanelPage<EntryRow> = activity::newest_first(
        store,
        account_id,
        List::PanelActivity,
        &PANEL_LIST,
        "",
        cursor,
        crate::limits::PANEL_ACTIVITY_PAGE_SIZE,
    )
    .await?;
    Ok(PanelPage {
        items: page.items.into_iter().map(EntryRow::into_entry).collect(),
        older: page.older,
        newer: page.newer,
    })
}

/// The operator's view (`admin audit log`): newest first, every account or one, entries at or
/// after `since` (Unix seconds) only.
pub async fn operator_log(
    store: &Store,
    client_id: Option<&ClientId>,
    since: Option<i64>,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<AuditPage> {
    let limit = parse_limit(limit)?;
    let account_id = match client_id {
        Some(client_id) => Some(account_id_of(store, client_id).await?),
        None => None,
    };
    let since_filter = since.map(|since| since.to_string()).unwrap_or_default();
    let trail = Trail {
        list: List::OperatorLog,
        account_id: account_id.unwrap_or(0),
        filter: &[&since_filter],
    };
    let after = trail.position(store, cursor)?;
    let since = since.unwrap_or(i64::MIN);
    let rows = match account_id {
        Some(account_id) => {
            store
                .db()
                .page(
                    sqlx::query_as(OPERATOR_ACCOUNT_PAGE.get(store.backend()))
                        .bind(since)
                        .bind(after.created_utc)
                        .bind(after.id)
                        .bind(limit + 1)
                        .bind(account_id),
                )
                .await?
        }
        None => {
            store
                .db()
                .page(
                    sqlx::query_as(OPERATOR_PAGE.get(store.backend()))
                        .bind(since)
                        .bind(after.created_utc)
                        .bind(after.id)
                        .bind(limit + 1),
                )
                .await?
        }
    };
    trail.page(store, rows, limit)
}
