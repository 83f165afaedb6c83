//! `GET /panel/ledger` (newest first, 50 a page by keyset, filter by product) and its CSV
//! download, streamed.

use askama::Template;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use poem::http::StatusCode;
use poem::web::{Data, Query};
use poem::{Body, Response, handler};
use serde::Deserialize;

use partner_billing::csv::{Cell, line};
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
    older: Option<String>,
    newer: Option<String>,
}

impl LedgerPage {
    fn page_link(&self, cursor: &str) -> String {
        let mut link = format!("/panel/ledger?cursor={cursor}");
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
    #[serde(default, deserialize_with = "layout::page_cursor")]
    cursor: Option<String>,
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
        Err(err) => return layout::failure_for(&who, err),
    };
    // Only a product of the account is a filter; anything else shows every entry.
    let product = if products.contains(&query.product) {
        query.product
    } else {
        String::new()
    };
    let ledger =
        match activity::ledger_page(&state.store, account_id, &product, query.cursor.as_deref())
            .await
        {
            Ok(ledger) => ledger,
            Err(err) => return layout::failure_for(&who, err),
        };
    let entries = ledger
        .items
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
            older: ledger.older,
            newer: ledger.newer,
        },
    )
}

/// The CSV's header row.
const CSV_HEADER: [&str; 6] = [
    "created_utc",
    "product_slug",
    "kind",
    "units",
    "balance_after",
    "reference",
];

/// `GET /panel/ledger.csv`: every entry, newest first, streamed: the header leaves at once and
/// the entries follow a chunk at a time, so memory stays flat however long the ledger.
#[handler]
pub async fn csv(who: SignedIn, state: Data<&AppState>) -> Response {
    let header = stream::once(async { Ok(line(&CSV_HEADER.map(Cell::Text))) });
    let rows = activity::ledger_stream(state.store.clone(), who.account.account_id)
        .map_ok(|e| {
            line(&[
                Cell::Int(e.created_utc),
                Cell::Text(&e.product_slug),
                Cell::Text(&e.kind),
                Cell::Int(e.units),
                Cell::Int(e.balance_after),
                Cell::Text(e.reference.as_deref().unwrap_or_default()),
            ])
        })
        .map_err(|err| {
            // Headers are out: the download ends early instead, and the log says why.
            tracing::warn!(error = %err, "ledger CSV ended early");
            std::io::Error::other("the ledger could not be read")
        });
    Response::builder()
        .content_type("text/csv; charset=utf-8")
        .header(
            "content-disposition",
            "attachment; filename=\"partner-billing-ledger.csv\"",
        )
        .body(Body::from_bytes_stream(header.chain(rows)))
}
