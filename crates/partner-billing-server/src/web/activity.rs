//! `GET /panel/activity`: the account's audit trail, newest first, a keyset page at a time.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{Response, handler};
use serde::Deserialize;

use partner_billing::Error;
use partner_billing::audit_log;
use partner_billing::limits::PANEL_ACTIVITY_PAGE_SIZE;
use partner_billing::wire::AuditEntry;

use super::layout::{self, Utc};
use super::session::SignedIn;
use crate::AppState;

struct ActivityRow {
    created: Utc,
    action: String,
    actor: String,
    details: String,
    source: String,
}

impl ActivityRow {
    fn of(entry: AuditEntry) -> Self {
        let mut parts: Vec<String> = entry
            .ids
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        if let serde_json::Value::Object(details) = &entry.details {
            for (name, value) in details {
                let value = match value {
                    serde_json::Value::String(text) => text.clone(),
                    serde_json::Value::Null => continue,
                    other => other.to_string(),
                };
                parts.push(format!("{name}: {value}"));
            }
        }
        Self {
            created: Utc::new(entry.created_utc),
            action: entry.action,
            actor: entry.actor,
            details: parts.join(", "),
            source: entry.source_address.unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "activity.html")]
struct ActivityPage {
    csrf: String,
    current: &'static str,
    entries: Vec<ActivityRow>,
    /// Set when not on the first page: a link back to the newest entries.
    paged: bool,
    older: Option<String>,
}

#[derive(Deserialize)]
pub struct ActivityQuery {
    cursor: Option<String>,
}

#[handler]
pub async fn page(
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<ActivityQuery>,
) -> Response {
    let cursor = query.cursor.filter(|c| !c.is_empty());
    let page = match audit_log::account_page(
        &state.store,
        who.account.account_id,
        Some(PANEL_ACTIVITY_PAGE_SIZE),
        cursor.as_deref(),
    )
    .await
    {
        Ok(page) => page,
        Err(Error::Validation(_)) => {
            return layout::message_page(
                StatusCode::BAD_REQUEST,
                "Page not found",
                "This link to an older page is not valid. Go to Activity to see the newest entries.",
            );
        }
        Err(err) => return layout::failure(err),
    };
    layout::render(
        StatusCode::OK,
        &ActivityPage {
            csrf: who.csrf,
            current: "activity",
            entries: page.entries.into_iter().map(ActivityRow::of).collect(),
            paged: cursor.is_some(),
            older: page.next_cursor,
        },
    )
}
