//! `GET /panel/activity`: the account's audit trail, newest first, a keyset page at a time with
//! "Older" and "Newer" links, as every panel list.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{Response, handler};
use serde::Deserialize;

use partner_billing::audit_log;
use partner_billing::wire::AuditEntry;

use super::layout::{self, Utc};
use super::session::SignedIn;
use crate::AppState;

struct ActivityRow {
    created: Utc,
    action: String,
    actor: String,
    details: Vec<Detail>,
    source: String,
}

/// One of an entry's ids or details, `name: value`.
struct Detail {
    name: String,
    value: DetailValue,
}

enum DetailValue {
    Text(String),
    /// A time (`expiresUtc`, …), shown in a `<time>` as every time of the panel.
    Time(Utc),
}

impl ActivityRow {
    fn of(entry: AuditEntry) -> Self {
        let mut details: Vec<Detail> = entry
            .ids
            .iter()
            .map(|(name, value)| Detail {
                name: name.clone(),
                value: DetailValue::Text(value.clone()),
            })
            .collect();
        if let serde_json::Value::Object(fields) = &entry.details {
            for (name, value) in fields {
                let value = match value {
                    serde_json::Value::Null => continue,
                    serde_json::Value::Array(items) => {
                        DetailValue::Text(items.iter().map(shown).collect::<Vec<_>>().join(", "))
                    }
                    serde_json::Value::Number(n) if name.ends_with("Utc") => match n.as_i64() {
                        Some(seconds) => DetailValue::Time(Utc::new(seconds)),
                        None => DetailValue::Text(n.to_string()),
                    },
                    other => DetailValue::Text(shown(other)),
                };
                details.push(Detail {
                    name: name.clone(),
                    value,
                });
            }
        }
        Self {
            created: Utc::new(entry.created_utc),
            action: entry.action,
            actor: entry.actor,
            details,
            source: entry.source_address.unwrap_or_default(),
        }
    }
}

/// A detail's value as text: a string as it is, anything else as JSON.
fn shown(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[derive(Template)]
#[template(path = "activity.html")]
struct ActivityPage {
    csrf: String,
    current: &'static str,
    entries: Vec<ActivityRow>,
    older: Option<String>,
    newer: Option<String>,
}

#[derive(Deserialize)]
pub struct ActivityQuery {
    #[serde(default, deserialize_with = "layout::page_cursor")]
    cursor: Option<String>,
}

#[handler]
pub async fn page(
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<ActivityQuery>,
) -> Response {
    let page = match audit_log::panel_page(
        &state.store,
        who.account.account_id,
        query.cursor.as_deref(),
    )
    .await
    {
        Ok(page) => page,
        Err(err) => return layout::failure_for(&who, err),
    };
    layout::render(
        StatusCode::OK,
        &ActivityPage {
            csrf: who.csrf,
            current: "activity",
            entries: page.items.into_iter().map(ActivityRow::of).collect(),
            older: page.older,
            newer: page.newer,
        },
    )
}
