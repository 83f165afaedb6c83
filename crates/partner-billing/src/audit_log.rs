//! Reading the audit trail back: keyset pages newest first, for the reseller (its own account
//! only: the JSON list, and the panel's page with "Older" and "Newer" as every panel list has)
//! and for the operator (every account, or one; from a time on).
//!
//! Apart from [`crate::audit`], which writes the entries: the operator's view finds an account
//! by its client id through [`crate::accounts`], which itself writes entries, so reading sits
//! above both.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::accounts::account_id_of;
use crate::activity::{self, Keyed, PanelPage};
use crate::db::dialect::{self, PerBackend};
use crate::domain::{ClientId, InvalidField};
use crate::error::Result;
use crate::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::reads::cursor::List;
use crate::store::Store;
use crate::wire::{AuditEntry, AuditEntryList};

/// Where a page starts: just older than the last entry of the previous page, by its sort key
/// (`created_utc`, `id`). Opaque to callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    created_utc: i64,
    id: i64,
}

/// With two 20-digit numbers, base64 of it fits [`crate::limits::AUDIT_CURSOR_MAX_CHARS`].
const CURSOR_PREFIX: &str = "audit:";

impl Cursor {
    /// Reads a `nextCursor` of an earlier page; anything else is `400` naming `cursor`.
    pub fn parse(text: &str) -> std::result::Result<Self, InvalidField> {
        let invalid = || InvalidField::new("cursor", "is not a cursor of this list");
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (created, id) = text
            .strip_prefix(CURSOR_PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .ok_or_else(invalid)?;
        Ok(Self {
            created_utc: created.parse().map_err(|_| invalid())?,
            id: id.parse().map_err(|_| invalid())?,
        })
    }

    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{CURSOR_PREFIX}{}:{}", self.created_utc, self.id))
    }

    /// Before every entry: the first page.
    fn start() -> Self {
        Self {
            created_utc: i64::MAX,
            id: i64::MAX,
        }
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
static ACCOUNT_PAGE: PerBackend = PerBackend::new(|backend| {
    format!(
        "{COLUMNS} WHERE {} AND {KEYSET} \
         ORDER BY e.account_id, e.created_utc DESC, e.id DESC LIMIT $4",
        dialect::owned_by(backend, "e.account_id", "$1")
    )
});

/// The operator's page of one account's trail (`$5`), entries at or after `$1`.
static OPERATOR_ACCOUNT_PAGE: PerBackend = PerBackend::new(|backend| {
    format!(
        "{COLUMNS} WHERE {} AND e.created_utc >= $1 AND {KEYSET} \
         ORDER BY e.account_id, e.created_utc DESC, e.id DESC LIMIT $4",
        dialect::owned_by(backend, "e.account_id", "$5")
    )
});

/// Rows past `cursor`, one more than `limit` to tell whether a next page exists.
fn into_page(mut rows: Vec<EntryRow>, limit: i64) -> AuditPage {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|row| {
            Cursor {
                created_utc: row.created_utc,
                id: row.id,
            }
            .encode()
        })
    } else {
        None
    };
    AuditPage {
        entries: rows.into_iter().map(EntryRow::into_entry).collect(),
        next_cursor,
    }
}

/// A page of one account's trail, newest first. The account comes from the caller's
/// credentials, never from the cursor: no cursor reaches another account's entries.
pub async fn account_page(
    store: &Store,
    account_id: i64,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<AuditPage> {
    let limit = parse_limit(limit)?;
    let after = cursor
        .map(Cursor::parse)
        .transpose()?
        .unwrap_or_else(Cursor::start);
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
    Ok(into_page(rows, limit))
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
    let after = cursor
        .map(Cursor::parse)
        .transpose()?
        .unwrap_or_else(Cursor::start);
    let since = since.unwrap_or(i64::MIN);
    let rows = match client_id {
        Some(client_id) => {
            let account_id = account_id_of(store, client_id).await?;
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
            let sql = sqlx::AssertSqlSafe(format!(
                "{COLUMNS} WHERE e.created_utc >= $1 AND {KEYSET} \
                 ORDER BY e.created_utc DESC, e.id DESC LIMIT $4"
            ));
            store
                .db()
                .page(
                    sqlx::query_as(sql)
                        .bind(since)
                        .bind(after.created_utc)
                        .bind(after.id)
                        .bind(limit + 1),
                )
                .await?
        }
    };
    Ok(into_page(rows, limit))
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_cursor_reads_back_and_garbage_is_refused() {
        let cursor = Cursor {
            created_utc: 1_700_000_000,
            id: 42,
        };
        assert_eq!(Cursor::parse(&cursor.encode()).ok(), Some(cursor));
        assert!(Cursor::parse("not a cursor").is_err());
        assert!(Cursor::parse("").is_err());
        let longest = Cursor {
            created_utc: i64::MIN,
            id: i64::MIN,
        };
        assert!(longest.encode().len() <= crate::limits::AUDIT_CURSOR_MAX_CHARS);
    }
}
