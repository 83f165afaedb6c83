//! `GET /panel/licenses`: the licenses of the account, filter by login.

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
    limit: i64,
}

#[derive(Deserialize)]
pub struct LicensesQuery {
    #[serde(default)]
    login: String,
}

#[handler]
pub async fn page(
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<LicensesQuery>,
) -> Response {
    let login: String = query.login.chars().take(LOGIN_MAX_CHARS).collect();
    let licenses = match activity::licenses(&state.store, who.account.account_id, &login).await {
        Ok(rows) => rows
            .into_iter()
            .map(|l| LicenseRow {
                license_id: l.license_id,
                login: l.login,
                product_slug: l.product_slug,
                created: Utc::new(l.created_utc),
                expires: Utc::optional(l.expires_utc),
            })
            .collect(),
        Err(err) => return layout::failure(err),
    };
    layout::render(
        StatusCode::OK,
        &LicensesPage {
            csrf: who.csrf,
            current: "licenses",
            login,
            licenses,
            limit: activity::LICENSES_PAGE_SIZE,
        },
    )
}
