//! `GET /panel`: the account and its balances.

use askama::Template;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{Request, Response, handler};

use partner_billing::wire::{Balance, ResellerAccount};
use partner_billing::{accounts, quota};

use super::{layout, session};
use crate::AppState;

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    csrf: String,
    current: &'static str,
    account: ResellerAccount,
    balances: Vec<Balance>,
}

#[handler]
pub async fn page(req: &Request, state: Data<&AppState>) -> Response {
    let who = match session::signed_in(&state.store, req).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let account = match accounts::account_profile(&state.store, who.account.account_id).await {
        Ok(account) => account,
        Err(err) => return layout::failure(err),
    };
    let balances = match quota::balances(&state.store, who.account.account_id).await {
        Ok(b) => b.balances,
        Err(err) => return layout::failure(err),
    };
    layout::render(
        StatusCode::OK,
        &OverviewPage {
            csrf: who.csrf,
            current: "overview",
            account,
            balances,
        },
    )
}
