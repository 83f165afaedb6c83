//! `GET /panel/licenses`: the licenses of the account, newest first, a keyset page at a time,
//! filter by login.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{Response, handler};
use serde::Deserialize;

use partner_billing::activity;
use partner_billing::limits::LOGIN_MAX_CHARS;

use super::layout::{self, Utc};
use super::session::SignedIn;
use crate::AppState;

struct LicenseRow {
    license_id: String,
    login: String,
    product_slug: String,
    created: Utc,
    expires: Option<Utc>,
}

#[derive(Template)]
#[template(path = "licenses.html")]
struct LicensesPage {
    csrf: String,
    current: &'static str,
    login: String,
    licenses: Vec<LicenseRow>,
    older: Option<String>,
    newer: Option<String>,
}

impl LicensesPage {
    fn page_link(&self, cursor: &str) -> String {
        let mut link = format!("/panel/licenses?cursor={cursor}");
        if !self.login.is_empty() {
            link.push_str("&login=");
            link.push_str(&urlencoding(&self.login));
        }
        link
    }
}

/// A login as a query value: every byte but unreserved ASCII percent-encoded.
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
pub struct LicensesQuery {
    #[serde(default)]
    login: String,
    #[serde(default)]
    cursor: Option<String>,
}

#[handler]
pub async fn page(
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<LicensesQuery>,
) -> Response {
    let login: String = query.login.chars().take(LOGIN_MAX_CHARS).collect();
    let page = match activity::licenses(
        &state.store,
        who.account.account_id,
        &login,
        query.cursor.as_deref(),
    )
    .await
    {
        Ok(page) => page,
        Err(err) => return layout::failure(err),
    };
    let licenses = page
        .items
        .into_iter()
        .map(|l| LicenseRow {
            license_id: l.license_id,
            login: l.login,
            product_slug: l.product_slug,
            created: Utc::new(l.created_utc),
            expires: Utc::optional(l.expires_utc),
        })
        .collect();
    layout::render(
        StatusCode::OK,
        &LicensesPage {
            csrf: who.csrf,
            current: "licenses",
            login,
            licenses,
            older: page.older,
            newer: page.newer,
        },
    )
}
