//! `GET /panel/settings`: change the password (the same core function as the JSON API) and
//! set the low-balance alert of each product the account has a balance for. A form that
//! succeeds answers `303` to the page, which says so once (`flash`): a reload sends nothing
//! again (a second password change would now present the wrong current password, and count
//! as a failed sign-in). A refused form is answered with the page and its message.

use askama::Template;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{Request, Response, handler};
use serde::Deserialize;

use partner_billing::Error;
use partner_billing::domain::Password;
use partner_billing::limits::{
    LOW_BALANCE_THRESHOLD_MAX, PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS, PRESENTED_PASSWORD_MAX_CHARS,
};
use partner_billing::{accounts, quota, webhooks};

use super::flash::{self, Flash, FlashPage};
use super::layout;
use super::session::{SignedIn, SignedInForm};
use crate::AppState;

/// The name prefix of a threshold input: `alert:<productSlug>`.
const ALERT_FIELD: &str = "alert:";

/// One product's low-balance alert input.
struct AlertRow {
    product_slug: String,
    value: String,
}

#[derive(Template)]
#[template(path = "settings.html")]
struct SettingsPage {
    csrf: String,
    current: &'static str,
    notice: Option<String>,
    error: Option<String>,
    alerts: Vec<AlertRow>,
    alerts_notice: Option<String>,
    alerts_error: Option<String>,
}

/// The messages of the two forms; the alert inputs as submitted when they were refused.
#[derive(Default)]
struct Outcome {
    notice: Option<String>,
    error: Option<String>,
    alerts_notice: Option<String>,
    alerts_error: Option<String>,
    submitted: Vec<(String, String)>,
}

/// Each product the account has a balance for, with its threshold (0 = off), or the value
/// just submitted when the alerts form was refused.
async fn alert_rows(
    state: &AppState,
    account_id: i64,
    submitted: &[(String, String)],
) -> partner_billing::Result<Vec<AlertRow>> {
    let balances = quota::balances(&state.store, account_id).await?.balances;
    let alerts = webhooks::low_balance_alerts(&state.store, account_id).await?;
    Ok(balances
        .into_iter()
        .map(|b| {
            let value = submitted
                .iter()
                .find(|(slug, _)| *slug == b.product_slug)
                .map(|(_, v)| v.clone())
                .or_else(|| {
                    alerts
                        .iter()
                        .find(|a| a.product_slug == b.product_slug)
                        .map(|a| a.low_balance_threshold.to_string())
                })
                .unwrap_or_else(|| "0".to_owned());
            AlertRow {
                product_slug: b.product_slug,
                value,
            }
        })
        .collect())
}

async fn render_page(
    state: &AppState,
    who: SignedIn,
    status: StatusCode,
    outcome: Outcome,
) -> Response {
    let alerts = match alert_rows(state, who.account.account_id, &outcome.submitted).await {
        Ok(rows) => rows,
        Err(err) => return layout::failure_for(&who, err),
    };
    layout::render(
        status,
        &SettingsPage {
            csrf: who.csrf,
            current: "settings",
            notice: outcome.notice,
            error: outcome.error,
            alerts,
            alerts_notice: outcome.alerts_notice,
            alerts_error: outcome.alerts_error,
        },
    )
}

/// The messages shown after a form that succeeded, once.

#[handler]
pub async fn page(req: &Request, who: SignedIn, state: Data<&AppState>) -> Response {
    let state: &AppState = &state;
    flash::showing(req, state, who, FlashPage::Settings, |who, flash| {
        // Each notice beside its own form.
        let outcome = match flash {
            Some(done @ Flash::PasswordChanged) => Outcome {
                notice: done.notice(),
                ..Outcome::default()
            },
            Some(done @ Flash::AlertsSaved) => Outcome {
                alerts_notice: done.notice(),
                ..Outcome::default()
            },
            _ => Outcome::default(),
        };
        render_page(state, who, StatusCode::OK, outcome)
    })
    .await
}

/// `POST /panel/settings/alerts`: "Save alerts". Every value is checked before any is saved,
/// so a refused form changes nothing.
#[handler]
pub async fn save_alerts(
    req: &Request,
    SignedInForm { who, form: fields }: SignedInForm<Vec<(String, String)>>,
    state: Data<&AppState>,
) -> Response {
    let submitted: Vec<(String, String)> = fields
        .iter()
        .filter_map(|(name, value)| {
            let slug = name.strip_prefix(ALERT_FIELD)?;
            Some((slug.to_owned(), value.trim().to_owned()))
        })
        .collect();
    let mut thresholds = Vec::with_capacity(submitted.len());
    for (slug, value) in &submitted {
        let parsed = if value.is_empty() {
            Some(0)
        } else {
            value
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=LOW_BALANCE_THRESHOLD_MAX).contains(n))
        };
        let Some(threshold) = parsed else {
            let outcome = Outcome {
                alerts_error: Some(format!(
                    "The alert for {slug} must be a whole number from 0 (off) to {LOW_BALANCE_THRESHOLD_MAX}."
                )),
                submitted: submitted.clone(),
                ..Outcome::default()
            };
            return render_page(&state, who, StatusCode::BAD_REQUEST, outcome).await;
        };
        thresholds.push((slug.as_str(), threshold));
    }
    for (slug, threshold) in thresholds {
        match webhooks::set_low_balance_alert(
            &state.store,
            who.account.account_id,
            slug,
            threshold,
            &who.origin,
        )
        .await
        {
            Ok(_) => {}
            Err(Error::UnknownPlan | Error::Validation(_)) => {
                let outcome = Outcome {
                    alerts_error: Some(format!("There is no product {slug}.")),
                    ..Outcome::default()
                };
                return render_page(&state, who, StatusCode::BAD_REQUEST, outcome).await;
            }
            Err(err) => return layout::failure_for(&who, err),
        }
    }
    flash::see_other(req, &state, &who, Flash::AlertsSaved).await
}

#[derive(Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
}

/// `POST /panel/settings/password`: every other session of the account ends.
#[handler]
pub async fn change_password(
    req: &Request,
    SignedInForm { who, form }: SignedInForm<PasswordForm>,
    state: Data<&AppState>,
) -> Response {
    let outcome = if form
        .current_password
        .chars()
        .nth(PRESENTED_PASSWORD_MAX_CHARS)
        .is_some()
    {
        Err(Error::Validation(
            partner_billing::domain::InvalidField::new("currentPassword", "is incorrect"),
        ))
    } else {
        accounts::change_password(
            &state.store,
            who.account.account_id,
            &who.token,
            Password::presented(form.current_password),
            &form.new_password,
            &who.origin,
        )
        .await
    };
    let mut retry_after = None;
    let (status, error) = match outcome {
        Ok(()) => return flash::see_other(req, &state, &who, Flash::PasswordChanged).await,
        Err(Error::Validation(invalid)) if invalid.field == "currentPassword" => (
            StatusCode::BAD_REQUEST,
            "The current password is incorrect.".to_owned(),
        ),
        Err(Error::Validation(_)) => (
            StatusCode::BAD_REQUEST,
            format!(
                "The new password must be {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters."
            ),
        ),
        // Wrong current passwords count as failed sign-ins of the account.
        Err(Error::RateLimited {
            retry_after_seconds,
        }) => {
            retry_after = Some(retry_after_seconds);
            (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many wrong passwords. Wait a few minutes and try again.".to_owned(),
            )
        }
        Err(err) => return layout::failure_for(&who, err),
    };
    let outcome = Outcome {
        error: Some(error),
        ..Outcome::default()
    };
    let mut response = render_page(&state, who, status, outcome).await;
    if let Some(seconds) = retry_after {
        layout::set_retry_after(&mut response, seconds);
    }
    response
}
