//! Sign-in and sign-out.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Form};
use poem::{Request, Response, handler};
use serde::Deserialize;
use serde::de::IgnoredAny;

use partner_billing::Error;
use partner_billing::accounts;
use partner_billing::domain::Password;
use partner_billing::limits::{PRESENTED_CLIENT_ID_MAX_CHARS, PRESENTED_PASSWORD_MAX_CHARS};

use super::session::{self, SignedInForm};
use super::{cookies, layout};
use crate::AppState;

/// The one answer to every failed sign-in, whatever the cause.
const SIGN_IN_FAILED: &str = "Client ID or password is incorrect.";

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    client_id: String,
    error: Option<&'static str>,
}

/// `GET /panel/login`.
#[handler]
pub fn page() -> Response {
    layout::render(
        StatusCode::OK,
        &LoginPage {
            client_id: String::new(),
            error: None,
        },
    )
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    password: String,
}

/// `POST /panel/login`: the same core sign-in as the JSON API (and its throttle).
#[handler]
pub async fn submit(
    req: &Request,
    state: Data<&AppState>,
    Form(form): Form<SignInForm>,
) -> Response {
    if crate::cross_site::is_cross_site(req, crate::cross_site::Sent::ByForm) {
        return session::forbidden();
    }
    let client_id: String = form
        .client_id
        .trim()
        .chars()
        .take(PRESENTED_CLIENT_ID_MAX_CHARS)
        .collect();
    let failed = |status: StatusCode, error: &'static str| {
        layout::render(
            status,
            &LoginPage {
                client_id: client_id.clone(),
                error: Some(error),
            },
        )
    };
    if form
        .password
        .chars()
        .nth(PRESENTED_PASSWORD_MAX_CHARS)
        .is_some()
    {
        return failed(StatusCode::UNAUTHORIZED, SIGN_IN_FAILED);
    }
    let password = Password::presented(form.password);
    let facts = crate::origin::RequestFacts::of(req);
    let result = accounts::create_session(
        &state.store,
        &client_id,
        password,
        facts.peer(),
        facts.request_id(),
    )
    .await;
    state
        .metrics
        .record_panel_login(crate::metrics::login_outcome(&result));
    match result {
        Ok(created) => {
            let token = partner_billing::domain::Secret::from_presented(created.session_token);
            let mut response = layout::see_other("/panel");
            layout::set_cookie(&mut response, &cookies::set_session(req, &token));
            response
        }
        Err(Error::Unauthorized) => failed(StatusCode::UNAUTHORIZED, SIGN_IN_FAILED),
        Err(Error::RateLimited {
            retry_after_seconds,
        }) => {
            let mut response = failed(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-in attempts. Wait a few minutes and try again.",
            );
            layout::set_retry_after(&mut response, retry_after_seconds);
            response
        }
        Err(err) => {
            let status = layout::failure(err).status();
            failed(
                status,
                "Signing in is not possible right now. Try again in a moment.",
            )
        }
    }
}

/// `POST /panel/logout`: the session ends at once.
#[handler]
pub async fn logout(
    req: &Request,
    SignedInForm { who, .. }: SignedInForm<IgnoredAny>,
    state: Data<&AppState>,
) -> Response {
    if let Err(err) = accounts::end_session(&state.store, &who.token).await {
        return layout::failure(err);
    }
    let mut response = layout::see_other("/panel/login");
    layout::set_cookie(&mut response, &cookies::clear_session(req));
    response
}
