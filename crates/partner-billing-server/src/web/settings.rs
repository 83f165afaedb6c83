//! `GET /panel/settings`: change the password (the same core function as the JSON API).

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Form};
use poem::{Request, Response, handler};
use serde::Deserialize;

use partner_billing::Error;
use partner_billing::accounts;
use partner_billing::domain::Password;

use super::layout;
use super::session;
use crate::AppState;

#[derive(Template)]
#[template(path = "settings.html")]
struct SettingsPage {
    csrf: String,
    current: &'static str,
    notice: Option<&'static str>,
    error: Option<&'static str>,
}

#[handler]
pub async fn page(req: &Request, state: Data<&AppState>) -> Response {
    match session::signed_in(&state.store, req).await {
        Ok(who) => layout::render(
            StatusCode::OK,
            &SettingsPage {
                csrf: who.csrf,
                current: "settings",
                notice: None,
                error: None,
            },
        ),
        Err(response) => response,
    }
}

#[derive(Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
}

/// `POST /panel/settings/password`: every other session of the account ends.
#[handler]
pub async fn change_password(
    req: &Request,
    state: Data<&AppState>,
    Form(form): Form<PasswordForm>,
) -> Response {
    let who = match session::signed_in_form(&state.store, req, &form.csrf).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let outcome = if form.current_password.chars().nth(1024).is_some() {
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
        )
        .await
    };
    let (status, notice, error) = match outcome {
        Ok(()) => (
            StatusCode::OK,
            Some("Password changed. Every other session of this account has been signed out."),
            None,
        ),
        Err(Error::Validation(invalid)) if invalid.field == "currentPassword" => (
            StatusCode::BAD_REQUEST,
            None,
            Some("The current password is incorrect."),
        ),
        Err(Error::Validation(_)) => (
            StatusCode::BAD_REQUEST,
            None,
            Some("The new password must be 12 to 128 characters."),
        ),
        Err(err) => return layout::failure(err),
    };
    layout::render(
        status,
        &SettingsPage {
            csrf: who.csrf,
            current: "settings",
            notice,
            error,
        },
    )
}
