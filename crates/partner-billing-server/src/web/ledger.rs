//! `GET /panel/ledger` (newest first, 50 a page, filter by product) and its CSV download.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{Response, handler};
use serde::Deserialize;

use partner_billing::{activity, quota};

use super::layout::{self, Utc};
use super::session::SignedIn;
use crate::AppState;

struct EntryRow {
    time: Utc,
    product_slug: String,
    kind: String,
    units: i64,
    balance_after: i64,
    reference: String,
}

#[derive(Template)]
#[template(path = "ledger.html")]
struct LedgerPage {
    csrf: String,
    current: &'static str,
    products: Vec<String>,
    product: String,
    entries: Vec<EntryRow>,
    page: i64,
    has_next: bool,
}

impl LedgerPage {
    fn page_link(&self, number: i64) -> String {
        let mut link = format!("/panel/ledger?page={number}");
        if !self.product.is_empty() {
            link.push_str("&product=");
            link.push_str(&self.product);
        }
        link
    }
}

#[derive(Deserialize)]
pub struct LedgerQuery {
    #[serde(default)]
    product: String,
    #[serde(default)]
    page: Option<i64>,
}

#[handler]
pub async fn page(
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<LedgerQuery>,
) -> Response {
    let account_id = who.account.account_id;
    let products: Vec<String> = match quota::balances(&state.store, account_id).await {
        Ok(b) => b.balances.into_iter().map(|b| b.product_slug).collect(),
        Err(err) => return layout::failure(err),
    };
    // Only a product of the account is a filter; anything else shows every entry.
    let product = if products.contains(&query.product) {
        query.product
    } else {
        String::new()
    };
    let page = query.page.unwrap_or(1).clamp(1, 1_000_000);
    let ledger = match activity::ledger_page(&state.store, account_id, &product, page).await {
        Ok(ledger) => ledger,
        Err(err) => return layout::failure(err),
    };
    let entries = ledger
        .entries
        .into_iter()
        .map(|e| EntryRow {
            time: Utc::new(e.created_utc),
            product_slug: e.product_slug,
            kind: e.kind,
            units: e.units,
            balance_after: e.balance_after,
            reference: e.reference.unwrap_or_default(),
        })
        .collect();
    layout::render(
        StatusCode::OK,
        &LedgerPage {
            csrf: who.csrf,
            current: "ledger",
            products,
            product,
            entries,
            page: ledger.page,
            has_next: ledger.has_next,
        },
    )
}

/// A CSV field, quoted when it holds a comma, quote or line break; a leading `=`, `+`, `-` or
/// `@` in text is prefixed with `'` so spreadsheets do not run it as a formula.
fn csv_field(value: &str) -> String {
    let value = if value.starts_with(['=', '+', '-', '@']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value
    }
}

/// `GET /panel/ledger.csv`: every entry, newest first.
#[handler]
pub async fn csv(who: SignedIn, state: Data<&AppState>) -> Response {
    let entries = match activity::ledger_all(&state.store, who.account.account_id).await {
        Ok(entries) => entries,
        Err(err) => return layout::failure(err),
    };
    let mut body = String::from("created_utc,product_slug,kind,units,balance_after,reference\n");
    for e in entries {
        body.push_str(&format!(
            "{},{},{},{},{},{}\n",
            e.created_utc,
            csv_field(&e.product_slug),
            csv_field(&e.kind),
            e.units,
            e.balance_after,
            csv_field(e.reference.as_deref().unwrap_or_default()),
        ));
    }
    Response::builder()
        .content_type("text/csv; charset=utf-8")
        .header(
            "content-disposition",
            "attachment; filename=\"partner-billing-ledger.csv\"",
        )
        .body(body)
}
