//! `GET /panel`: the account, its balances, and its usage over the last 30 days.

use askama::Template;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{Response, handler};

use partner_billing::wire::ResellerAccount;
use partner_billing::{accounts, activity, quota, webhooks};

use super::layout;
use super::session::SignedIn;
use super::usage::{UsageLine, usage};
use crate::AppState;

/// A balance with its low-balance alert (`None` when off).
struct BalanceRow {
    product_slug: String,
    remaining_balance: i64,
    low_balance_alert: Option<i64>,
}

impl BalanceRow {
    /// Under its alert: the balance a `balance.low` event is sent for.
    fn below_alert(&self) -> bool {
        self.low_balance_alert
            .is_some_and(|threshold| self.remaining_balance < threshold)
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    csrf: String,
    current: &'static str,
    account: ResellerAccount,
    balances: Vec<BalanceRow>,
    /// `svg#usage-chart`, built from numbers and slugs only.
    usage_chart: String,
    usage: Vec<UsageLine>,
}

impl OverviewPage {
    /// The balances under their alert, as the line above the table names them ("basic (3
    /// left, alert below 4), …"); empty when none is.
    fn below_alert(&self) -> String {
        self.balances
            .iter()
            .filter(|b| b.below_alert())
            .map(|b| {
                format!(
                    "{} ({} left, alert below {})",
                    b.product_slug,
                    b.remaining_balance,
                    b.low_balance_alert.unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[handler]
pub async fn page(who: SignedIn, state: Data<&AppState>) -> Response {
    let account = match accounts::account_profile(&state.store, who.account.account_id).await {
        Ok(account) => account,
        Err(err) => return layout::failure_for(&who, err),
    };
    let balances = match quota::balances(&state.store, who.account.account_id).await {
        Ok(b) => b.balances,
        Err(err) => return layout::failure_for(&who, err),
    };
    let alerts = match webhooks::low_balance_alerts(&state.store, who.account.account_id).await {
        Ok(alerts) => alerts,
        Err(err) => return layout::failure_for(&who, err),
    };
    let spent = match activity::usage_by_day(&state.store, who.account.account_id).await {
        Ok(rows) => rows,
        Err(err) => return layout::failure_for(&who, err),
    };
    let (usage_chart, usage) = usage(&spent, state.store.now_utc());
    let balances = balances
        .into_iter()
        .map(|b| BalanceRow {
            low_balance_alert: alerts
                .iter()
                .find(|a| a.product_slug == b.product_slug)
                .map(|a| a.low_balance_threshold)
                .filter(|threshold| *threshold > 0),
            product_slug: b.product_slug,
            remaining_balance: b.remaining_balance,
        })
        .collect();
    layout::render(
        StatusCode::OK,
        &OverviewPage {
            csrf: who.csrf,
            current: "overview",
            account,
            balances,
            usage_chart,
            usage,
        },
    )
}
