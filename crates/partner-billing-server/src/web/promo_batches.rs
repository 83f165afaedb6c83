//! `GET /panel/promo-batches`: each batch with its code count and how many were redeemed;
//! never a code.

use askama::Template;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{Response, handler};

use partner_billing::activity;

use super::layout::{self, Utc};
use super::session::SignedIn;
use crate::AppState;

struct BatchRow {
    batch_id: String,
    product_slug: String,
    codes: i64,
    redeemed: i64,
    created: Utc,
    recoverable_until: Utc,
}

#[derive(Template)]
#[template(path = "promo_batches.html")]
struct PromoBatchesPage {
    csrf: String,
    current: &'static str,
    batches: Vec<BatchRow>,
}

#[handler]
pub async fn page(who: SignedIn, state: Data<&AppState>) -> Response {
    let batches = match activity::promo_batches(&state.store, who.account.account_id).await {
        Ok(rows) => rows
            .into_iter()
            .map(|b| BatchRow {
                batch_id: b.batch_id,
                product_slug: b.product_slug,
                codes: b.code_count,
                redeemed: b.redeemed,
                created: Utc::new(b.created_utc),
                recoverable_until: Utc::new(b.recoverable_until_utc),
            })
            .collect(),
        Err(err) => return layout::failure(err),
    };
    layout::render(
        StatusCode::OK,
        &PromoBatchesPage {
            csrf: who.csrf,
            current: "promo-batches",
            batches,
        },
    )
}
