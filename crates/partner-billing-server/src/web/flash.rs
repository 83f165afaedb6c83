//! What the page after a form shows once: a new API key's secret, a new webhook endpoint's
//! signing secret, the notice that a test event is on its way.
//!
//! A form that makes something answers `303 See Other` to its page (Post/Redirect/Get), with
//! the message in the cookie `pb_flash`: sealed under the master key and bound to the session
//! (`accounts::seal_for_session`), for 60 seconds. The page shows it and drops the cookie in
//! the same answer. So a reload (of a page reached by GET) never sends the form again, never
//! makes a second key, and never shows the secret again; the back button neither (every panel
//! page is `no-store`, so it is fetched again, without the cookie). A cookie rather than the
//! server's memory: the page may be served by another replica than the form.

use poem::{Request, Response};
use serde::{Deserialize, Serialize};

use partner_billing::accounts;

use super::session::SignedIn;
use super::{cookies, layout};
use crate::AppState;

/// A message for the page after a form. No `Debug`: it holds secrets.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Flash {
    /// "Create key" or "Roll": the new key, its secret shown once.
    NewApiKey {
        client_id: String,
        api_key_id: String,
        secret: String,
    },
    /// "Add endpoint": the new endpoint, its signing secret shown once.
    NewWebhookEndpoint {
        webhook_endpoint_id: String,
        secret: String,
    },
    /// "Send test event": the event is queued.
    WebhookTestSent,
}

/// The `303` to `location` carrying `flash` to that page. Should sealing fail (no master key,
/// which a server always has), the page shows the failure: the key exists, and the reseller
/// rolls it to get a secret.
pub fn see_other(
    req: &Request,
    state: &AppState,
    who: &SignedIn,
    location: &'static str,
    flash: &Flash,
) -> Response {
    let sealed = serde_json::to_vec(flash)
        .map_err(|e| partner_billing::Error::Internal(format!("a panel message: {e}")))
        .and_then(|message| accounts::seal_for_session(&state.store, &who.token, &message));
    match sealed {
        Ok(sealed) => {
            let mut response = layout::see_other(location);
            layout::set_cookie(&mut response, &cookies::set_flash(req, &sealed));
            response
        }
        Err(err) => layout::failure_for(who, err),
    }
}

/// The flash the request carries for this session, if any, and whether there was a cookie to
/// drop: pass the page's answer through [`Taken::finish`].
pub struct Taken {
    pub flash: Option<Flash>,
    present: bool,
}

impl Taken {
    /// Reads (and opens) the request's flash cookie; one of another session, altered or expired
    /// opens to nothing.
    pub fn from(req: &Request, state: &AppState, who: &SignedIn) -> Self {
        let sealed = cookies::flash(req);
        let flash = sealed
            .and_then(|sealed| accounts::open_for_session(&state.store, &who.token, sealed))
            .and_then(|message| serde_json::from_slice(&message).ok());
        Self {
            flash,
            present: sealed.is_some(),
        }
    }

    /// The page's answer, dropping the cookie in the browser when there was one: the message is
    /// shown once.
    pub fn finish(self, req: &Request, mut response: Response) -> Response {
        if self.present {
            layout::set_cookie(&mut response, &cookies::clear_flash(req));
        }
        response
    }
}
