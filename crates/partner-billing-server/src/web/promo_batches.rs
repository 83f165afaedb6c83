//! `GET /panel/promo-batches`: each batch with its code count, how many were redeemed and
//! whether it was voided, newest first, a keyset page at a time; never a code. "Void" asks for
//! confirmation (`GET …/{batchId}/void`) before it voids (`POST`, CSRF-checked).

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Path, Query};
use poem::{Request, Response, handler};
use serde::Deserialize;

use partner_billing::{Error, activity, reads, voids};

use super::flash::{self, Flash, FlashPage};
use super::layout::{self, Utc};
use super::session::{SignedIn, SignedInForm};
use crate::AppState;

struct BatchRow {
    batch_id: String,
    product_slug: String,
    codes: i64,
    redeemed: i64,
    created: Utc,
    recoverable_until: Utc,
    voided: Option<Utc>,
}

#[derive(Template)]
#[template(path = "promo_batches.html")]
struct PromoBatchesPage {
    csrf: String,
    current: &'static str,
    batches: Vec<BatchRow>,
    /// What the last form did, once ("Void batch").
    notice: Option<String>,
    /// This page's own cursor (none on the first page): a "Void" leads back to it.
    cursor: Option<String>,
    older: Option<String>,
    newer: Option<String>,
}

#[derive(Template)]
#[template(path = "promo_batch_void.html")]
struct ConfirmVoidPage {
    csrf: String,
    current: &'static str,
    batch_id: String,
    product_slug: String,
    codes: i64,
    redeemed: i64,
    /// The list's page the button was on (empty: the first), for the way back.
    cursor: String,
}

impl ConfirmVoidPage {
    /// "Cancel": the list's page the button was on.
    fn back(&self) -> String {
        list_at(&self.cursor)
    }
}

#[derive(Deserialize)]
pub struct BatchesQuery {
    #[serde(default, deserialize_with = "layout::page_cursor")]
    cursor: Option<String>,
}

/// The page of the list a "Void" button was on, carried through its confirmation.
#[derive(Deserialize)]
pub struct FromPage {
    #[serde(default)]
    cursor: String,
}

/// The list at the page whose cursor a form carried (the first page without one).
fn list_at(cursor: &str) -> String {
    match layout::way_back(cursor) {
        Some(cursor) => format!("{}?cursor={cursor}", FlashPage::PromoBatches.path()),
        None => FlashPage::PromoBatches.path().to_owned(),
    }
}

/// `GET /panel/promo-batches`; after "Void batch", with its notice, once.
#[handler]
pub async fn page(
    req: &Request,
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<BatchesQuery>,
) -> Response {
    let state: &AppState = &state;
    flash::showing(req, state, who, FlashPage::PromoBatches, |who, flash| {
        list_page(who, state, query, flash.as_ref().and_then(Flash::notice))
    })
    .await
}

/// The list, with `notice` above it.
async fn list_page(
    who: SignedIn,
    state: &AppState,
    query: BatchesQuery,
    notice: Option<String>,
) -> Response {
    let listed = match activity::promo_batches(
        &state.store,
        who.account.account_id,
        query.cursor.as_deref(),
    )
    .await
    {
        Ok(listed) => listed,
        Err(err) => return layout::failure_for(&who, err),
    };
    let batches = listed
        .items
        .into_iter()
        .map(|b| BatchRow {
            batch_id: b.batch_id,
            product_slug: b.product_slug,
            codes: b.code_count,
            redeemed: b.redeemed,
            created: Utc::new(b.created_utc),
            recoverable_until: Utc::new(b.recoverable_until_utc),
            voided: Utc::optional(b.voided_utc),
        })
        .collect();
    layout::render(
        StatusCode::OK,
        &PromoBatchesPage {
            csrf: who.csrf,
            current: "promo-batches",
            batches,
            notice,
            cursor: query.cursor,
            older: listed.older,
            newer: listed.newer,
        },
    )
}

fn not_found(who: &SignedIn) -> Response {
    layout::signed_in_message(
        who,
        StatusCode::NOT_FOUND,
        "No such batch",
        "None of your promo batches has this id.",
    )
}

/// `GET /panel/promo-batches/{batchId}/void`: what voiding does, and the button that does it.
#[handler]
pub async fn confirm_void(
    who: SignedIn,
    state: Data<&AppState>,
    Path(batch_id): Path<String>,
    Query(from): Query<FromPage>,
) -> Response {
    match reads::get_promo_batch(&state.store, who.account.account_id, &batch_id).await {
        Ok(batch) if batch.voided_utc.is_some() => layout::see_other(&list_at(&from.cursor)),
        Ok(batch) => layout::render(
            StatusCode::OK,
            &ConfirmVoidPage {
                csrf: who.csrf,
                current: "promo-batches",
                batch_id: batch.batch_id,
                product_slug: batch.plan_slug,
                codes: batch.count,
                redeemed: batch.redeemed,
                cursor: layout::way_back(&from.cursor)
                    .unwrap_or_default()
                    .to_owned(),
            },
        ),
        Err(Error::PromoBatchNotFound) => not_found(&who),
        Err(err) => layout::failure_for(&who, err),
    }
}

/// `POST /panel/promo-batches/{batchId}/void`: voids the batch (again: nothing changes);
/// answered by a `303` to the list, which says so once.
#[handler]
pub async fn void(
    req: &Request,
    SignedInForm { who, form }: SignedInForm<FromPage>,
    state: Data<&AppState>,
    Path(batch_id): Path<String>,
) -> Response {
    let voider = voids::Voider::Reseller {
        account_id: who.account.account_id,
    };
    match voids::void_batch(&state.store, voider, &batch_id, &who.origin).await {
        Ok(voided) => {
            let done = Flash::BatchVoided {
                batch_id: voided.batch_id,
            };
            flash::see_other_to(req, &state, &who, done, &list_at(&form.cursor)).await
        }
        Err(Error::PromoBatchNotFound) => not_found(&who),
        Err(err) => layout::failure_for(&who, err),
    }
}
