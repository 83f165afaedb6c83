//! Who is signed in, as extractors a page declares in its handler's signature (so it cannot
//! forget to ask): [`SignedIn`] for a page, [`SignedInForm`] for a form POST. A request
//! without a live `pb_session` (12 h absolute, 1 h idle) never reaches the handler: the
//! extractor answers the 303 to `/panel/login` itself; a form from another site or without the
//! session's CSRF token is answered 403 and changes nothing.

use poem::http::StatusCode;
use poem::web::Form;
use poem::{Body, FromRequest, Request, RequestBody, Response};
use serde::de::DeserializeOwned;

use partner_billing::Error;
use partner_billing::accounts::{self, PanelAccount};
use partner_billing::audit::{Actor, Origin};
use partner_billing::domain::Secret;

use super::{cookies, csrf, layout};
use crate::AppState;
use crate::cross_site::{Sent, is_cross_site};
use crate::origin::RequestFacts;

/// A signed-in person: the account, the session token, its CSRF token, and the origin the
/// audit trail records for a change this person makes (`panel:<clientId>`, address, request id).
pub struct SignedIn {
    pub account: PanelAccount,
    pub token: Secret,
    pub csrf: String,
    pub origin: Origin,
}

/// The answer sent instead of the handler's.
fn refuse(response: Response) -> poem::Error {
    poem::Error::from_response(response)
}

impl<'a> FromRequest<'a> for SignedIn {
    async fn from_request(req: &'a Request, _body: &mut RequestBody) -> poem::Result<Self> {
        let Some(token) = cookies::session_token(req) else {
            return Err(refuse(layout::see_other("/panel/login")));
        };
        let Some(state) = req.data::<AppState>() else {
            return Err(refuse(layout::failure(Error::Internal(
                "the panel has no app state".to_owned(),
            ))));
        };
        match accounts::authenticate_session(&state.store, &token).await {
            Ok(account) => Ok(SignedIn {
                origin: RequestFacts::of(req).origin(Actor::Panel(account.client_id.clone())),
                account,
                csrf: csrf::token_for(&token),
                token,
            }),
            Err(Error::Unauthorized) => {
                let mut response = layout::see_other("/panel/login");
                layout::set_cookie(&mut response, &cookies::clear_session(req));
                Err(refuse(response))
            }
            Err(err) => Err(refuse(layout::failure(err))),
        }
    }
}

/// A state-changing form of a signed-in person: refused (403, nothing changed) when it comes
/// from another site or lacks the session's CSRF token (the `csrf` field); the rest of the
/// form is `T` (which may ignore `csrf`).
pub struct SignedInForm<T> {
    pub who: SignedIn,
    pub form: T,
}

impl<'a, T: DeserializeOwned + Send> FromRequest<'a> for SignedInForm<T> {
    async fn from_request(req: &'a Request, body: &mut RequestBody) -> poem::Result<Self> {
        if is_cross_site(req, Sent::ByForm) {
            return Err(refuse(forbidden()));
        }
        let who = SignedIn::from_request(req, body).await?;
        // The body is read once and parsed twice: for the token, then as the page's form.
        let bytes = body.take()?.into_vec().await?;
        let mut copy = RequestBody::new(Body::from_vec(bytes.clone()));
        let presented = match Form::<Vec<(String, String)>>::from_request(req, &mut copy).await {
            Ok(Form(fields)) => fields.into_iter().find(|(name, _)| name == "csrf"),
            Err(_) => None,
        };
        let valid = presented.is_some_and(|(_, token)| csrf::token_matches(&who.token, &token));
        if !valid {
            // Signed in: the page keeps its "Sign out" button.
            return Err(refuse(layout::signed_in_message(
                &who,
                StatusCode::FORBIDDEN,
                REFUSED_TITLE,
                REFUSED_MESSAGE,
            )));
        }
        let Form(form) =
            Form::<T>::from_request(req, &mut RequestBody::new(Body::from_vec(bytes))).await?;
        Ok(SignedInForm { who, form })
    }
}

const REFUSED_TITLE: &str = "Request refused";
const REFUSED_MESSAGE: &str = "This form did not come from the panel, or its page is too old. \
     Nothing was changed. Go back, reload the page and try again.";

/// The 403 for a forged or cross-site form.
pub fn forbidden() -> Response {
    layout::message_page(StatusCode::FORBIDDEN, REFUSED_TITLE, REFUSED_MESSAGE)
}
