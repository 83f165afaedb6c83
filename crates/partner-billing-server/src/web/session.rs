//! Who is signed in: the `pb_session` cookie checked through the core, or a 303 to the sign-in
//! page. State-changing forms are also checked for their CSRF token and their origin here.

use poem::http::StatusCode;
use poem::{Request, Response};

use partner_billing::Error;
use partner_billing::accounts::{self, PanelAccount};
use partner_billing::domain::Secret;
use partner_billing::store::Store;

use super::{cookies, csrf, layout};

/// A signed-in person: the account, the session token and its CSRF token.
pub struct SignedIn {
    pub account: PanelAccount,
    pub token: Secret,
    pub csrf: String,
}

/// The session of the request, or the response to send instead (303 to `/panel/login` for a
/// missing, ended or unknown session; an error page when the database fails).
pub async fn signed_in(store: &Store, req: &Request) -> Result<SignedIn, Response> {
    let Some(token) = cookies::session_token(req) else {
        return Err(layout::see_other("/panel/login"));
    };
    match accounts::authenticate_session(store, &token).await {
        Ok(account) => Ok(SignedIn {
            account,
            csrf: csrf::token_for(&token),
            token,
        }),
        Err(Error::Unauthorized) => {
            let mut response = layout::see_other("/panel/login");
            layout::set_cookie(&mut response, &cookies::clear_session(req));
            Err(response)
        }
        Err(err) => Err(layout::failure(err)),
    }
}

/// As [`signed_in`], for a form POST: refuses (403, nothing changed) a request from another
/// site or without the session's CSRF token.
pub async fn signed_in_form(
    store: &Store,
    req: &Request,
    presented_csrf: &str,
) -> Result<SignedIn, Response> {
    if csrf::is_cross_site(req) {
        return Err(forbidden());
    }
    let who = signed_in(store, req).await?;
    if !csrf::token_matches(&who.token, presented_csrf) {
        return Err(forbidden());
    }
    Ok(who)
}

/// The 403 for a forged or cross-site form.
pub fn forbidden() -> Response {
    layout::message_page(
        StatusCode::FORBIDDEN,
        "Request refused",
        "This form did not come from the panel, or its page is too old. Nothing was changed. \
         Go back, reload the page and try again.",
    )
}
