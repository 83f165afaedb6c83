//! What the page after a form shows once: a new API key's secret, a new webhook endpoint's
//! signing secret, the notice that a test event is on its way, that a password was changed, the
//! alerts saved, a key or a license revoked, a batch voided.
//!
//! A form that makes or changes something answers `303 See Other` to its page when it succeeds
//! (Post/Redirect/Get), with
//! the message in the cookie `pb_flash`: sealed under the master key and bound to the session
//! (`accounts::seal_for_session`), with the time it was made; it opens for
//! [`FLASH_LIFETIME_SECONDS`] only, on its own page only. The page shows it and drops the
//! cookie in the same answer (a page that fails keeps it, for the reload). So a reload (of a
//! page reached by GET) never sends the form again, never makes a second key, and never shows
//! the secret again; the back button neither (every panel page is `no-store`, so it is fetched
//! again, without the cookie). A cookie rather than the server's memory: the page may be served
//! by another replica than the form.
//!
//! A secret opens once: the session records the nonce of the message that holds it (a newer
//! secret's replacing it), the page that shows it claims the nonce, and a page that fails gives
//! it back for the reload. So a copy of the cookie sent again, even within its minute, shows
//! nothing. A copy that does not open leaves the browser's cookie alone (it may be a newer
//! one's), and a prefetch takes nothing. A notice may show again from a copy; it tells nothing
//! new. The cookie is `HttpOnly` and `SameSite=Strict`, like the session's.

use poem::{Request, Response};
use serde::{Deserialize, Serialize};

use partner_billing::accounts;

use super::session::SignedIn;
use super::{cookies, layout};
use crate::AppState;

/// How long after its form a flash opens: the browser follows the `303` at once.
pub const FLASH_LIFETIME_SECONDS: i64 = 60;

/// A flash as sealed: the message, when it was made, and for a message with a secret the
/// nonce its session records until the secret is shown (`accounts::expect_secret_message`).
#[derive(Serialize, Deserialize)]
struct Sealed {
    made_utc: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    once: Option<String>,
    flash: Flash,
}

/// A message for the page after a form. No `Debug`: it holds secrets.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Flash {
    /// "Create key" or "Roll": the new key, its secret shown once.
    NewApiKey(NewApiKey),
    /// "Add endpoint": the new endpoint, its signing secret shown once.
    NewWebhookEndpoint(NewWebhookEndpoint),
    /// "Send test event": the event is queued.
    WebhookTestSent,
    /// "Change password": done, every other session signed out.
    PasswordChanged,
    /// "Save alerts": saved.
    AlertsSaved,
    /// "Revoke" on the API keys page: done.
    KeyRevoked { api_key_id: String },
    /// "Void batch" on the confirmation page: done.
    BatchVoided { batch_id: String },
    /// "Revoke license" on the confirmation page: done.
    LicenseRevoked { license_id: String },
}

/// A key just made, as the page after its form shows it (beside the page's own client id).
/// No `Debug`: it holds the secret.
#[derive(Serialize, Deserialize)]
pub struct NewApiKey {
    pub api_key_id: String,
    pub secret: String,
    /// After "Roll": the key it replaces, which its page names with the time it stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// An endpoint just added, as the page after its form shows it. No `Debug`.
#[derive(Serialize, Deserialize)]
pub struct NewWebhookEndpoint {
    pub webhook_endpoint_id: String,
    pub secret: String,
}

/// A page that shows a flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashPage {
    /// `/panel/api-keys`.
    ApiKeys,
    /// `/panel/webhooks`.
    Webhooks,
    /// `/panel/settings`.
    Settings,
    /// `/panel/promo-batches`.
    PromoBatches,
    /// `/panel/licenses`, whatever its filter.
    Licenses,
}

impl FlashPage {
    /// Its path, where the form's `303` leads.
    pub fn path(self) -> &'static str {
        match self {
            Self::ApiKeys => "/panel/api-keys",
            Self::Webhooks => "/panel/webhooks",
            Self::Settings => "/panel/settings",
            Self::PromoBatches => "/panel/promo-batches",
            Self::Licenses => "/panel/licenses",
        }
    }
}

impl Flash {
    /// The page that shows it.
    fn page(&self) -> FlashPage {
        match self {
            Self::NewApiKey(_) | Self::KeyRevoked { .. } => FlashPage::ApiKeys,
            Self::NewWebhookEndpoint(_) | Self::WebhookTestSent => FlashPage::Webhooks,
            Self::PasswordChanged | Self::AlertsSaved => FlashPage::Settings,
            Self::BatchVoided { .. } => FlashPage::PromoBatches,
            Self::LicenseRevoked { .. } => FlashPage::Licenses,
        }
    }

    /// The notice it shows above its page's content; `None` for a new secret, which its page
    /// shows in a block of its own. Every notice's text is here.
    pub fn notice(&self) -> Option<String> {
        Some(match self {
            Self::NewApiKey(_) | Self::NewWebhookEndpoint(_) => return None,
            Self::WebhookTestSent => "A webhook.test event is on its way.".to_owned(),
            Self::PasswordChanged => {
                "Password changed. Every other session of this account has been signed out."
                    .to_owned()
            }
            Self::AlertsSaved => "Low-balance alerts saved.".to_owned(),
            Self::KeyRevoked { api_key_id } => {
                format!("Key {api_key_id} revoked: a request with it is refused from now on.")
            }
            Self::BatchVoided { batch_id } => {
                format!("Batch {batch_id} voided: none of its remaining codes can be redeemed.")
            }
            Self::LicenseRevoked { license_id } => format!("License {license_id} revoked."),
        })
    }

    /// Whether it carries a secret shown once: lost if it cannot be sealed.
    fn holds_secret(&self) -> bool {
        matches!(self, Self::NewApiKey(_) | Self::NewWebhookEndpoint(_))
    }
}

/// The `303` to the page of `flash`, carrying it there.
pub async fn see_other(req: &Request, state: &AppState, who: &SignedIn, flash: Flash) -> Response {
    let location = flash.page().path();
    see_other_to(req, state, who, flash, location).await
}

/// The `303` to `location`, the page of `flash` (with a query: a list's filter), carrying it
/// there. A secret is shown once: its session records the message's nonce, which the page
/// clears when it shows it. Should sealing or that record fail, a secret's page shows the
/// failure (the key exists, and the reseller rolls it to get a secret); a notice is left out,
/// since what the form did is done.
pub async fn see_other_to(
    req: &Request,
    state: &AppState,
    who: &SignedIn,
    flash: Flash,
    location: &str,
) -> Response {
    let holds_secret = flash.holds_secret();
    let once = holds_secret.then(|| uuid::Uuid::new_v4().simple().to_string());
    let sealed = Sealed {
        made_utc: state.store.now_utc(),
        once,
        flash,
    };
    let sealed = match &sealed.once {
        Some(nonce) => accounts::expect_secret_message(&state.store, &who.token, nonce).await,
        None => Ok(()),
    }
    .and_then(|()| {
        serde_json::to_vec(&sealed)
            .map_err(|e| partner_billing::Error::Internal(format!("a panel message: {e}")))
    })
    .and_then(|message| accounts::seal_for_session(&state.store, &who.token, &message));
    match sealed {
        Ok(sealed) => {
            let mut response = layout::see_other(location);
            layout::set_cookie(&mut response, &cookies::set_flash(req, &sealed));
            response
        }
        Err(err) if holds_secret => layout::failure_for(who, err),
        Err(err) => {
            tracing::error!(error = %err, "a panel notice could not be sealed; sent without it");
            layout::see_other(location)
        }
    }
}

/// A page that shows `page`'s messages: `render` answers with the message the request's flash
/// cookie holds for it in this session, if any; then the cookie is dropped in the browser when
/// the page showed its message, or when it holds nothing usable. Every answer `render` gives,
/// a failure included, goes through here, so no page can forget the cookie.
pub async fn showing<F, Fut>(
    req: &Request,
    state: &AppState,
    who: SignedIn,
    page: FlashPage,
    render: F,
) -> Response
where
    F: FnOnce(SignedIn, Option<Flash>) -> Fut,
    Fut: Future<Output = Response>,
{
    let (flash, taken) = take(req, state, &who, page).await;
    // Kept only when a secret was claimed: the page may have to give it back.
    let claimed_by = matches!(taken, Taken::ShownSecret(_)).then(|| who.token.clone());
    let response = render(who, flash).await;
    if let (Taken::ShownSecret(nonce), Some(token)) = (&taken, claimed_by)
        && !response.status().is_success()
    {
        // The page failed: the secret waits for the reload, unless a newer one replaced it.
        if let Err(err) = accounts::give_back_secret_message(&state.store, &token, nonce).await {
            tracing::error!(error = %err, "a panel secret could not be given back");
        }
    }
    taken.finish(req, response)
}

/// Whether the browser is fetching the page ahead of its use (a prefetch or prerender): such a
/// request takes no message, which the person may never see.
fn is_prefetch(req: &Request) -> bool {
    ["sec-purpose", "purpose", "x-purpose", "x-moz"]
        .iter()
        .any(|name| {
            req.header(name).is_some_and(|value| {
                let value = value.to_ascii_lowercase();
                value.contains("prefetch") || value.contains("preview")
            })
        })
}

/// What the page does with the request's flash cookie once it has answered: pass the answer
/// through [`Taken::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Taken {
    /// No cookie, another page's message, a secret's copy already shown or replaced (the
    /// browser's cookie may be the newer one's), or a prefetch: left as it is.
    Keep,
    /// This page's notice: dropped once the page is shown (a page that fails keeps it, for
    /// the reload).
    Shown,
    /// This page's secret, its nonce claimed from the session: as `Shown`, and a page that
    /// fails gives the nonce back ([`showing`]).
    ShownSecret(String),
    /// A cookie that no longer opens (another session's, altered, past its minute): dropped.
    Unusable,
}

/// The message the request's flash cookie holds for `page` in this session, if any, and what
/// to do with the cookie. A secret opens once: its nonce is claimed from the session here, so
/// a copy of the cookie sent again shows nothing.
async fn take(
    req: &Request,
    state: &AppState,
    who: &SignedIn,
    page: FlashPage,
) -> (Option<Flash>, Taken) {
    let Some(cookie) = cookies::flash(req) else {
        return (None, Taken::Keep);
    };
    if is_prefetch(req) {
        return (None, Taken::Keep);
    }
    let opened = accounts::open_for_session(&state.store, &who.token, cookie)
        .and_then(|message| serde_json::from_slice::<Sealed>(&message).ok())
        .filter(|sealed| {
            let age = state.store.now_utc() - sealed.made_utc;
            (0..=FLASH_LIFETIME_SECONDS).contains(&age)
        });
    match opened {
        Some(sealed) if sealed.flash.page() != page => (None, Taken::Keep),
        Some(sealed) if sealed.flash.holds_secret() => {
            // Sealed by a release that recorded no nonce: left to run out.
            let Some(nonce) = sealed.once else {
                return (None, Taken::Keep);
            };
            match accounts::show_secret_message_once(&state.store, &who.token, &nonce).await {
                Ok(true) => (Some(sealed.flash), Taken::ShownSecret(nonce)),
                Ok(false) => (None, Taken::Keep),
                Err(err) => {
                    // Left for the reload: the secret is still waiting.
                    tracing::error!(error = %err, "a panel secret could not be taken");
                    (None, Taken::Keep)
                }
            }
        }
        Some(sealed) => (Some(sealed.flash), Taken::Shown),
        None => (None, Taken::Unusable),
    }
}

impl Taken {
    /// The page's answer, dropping the cookie in the browser when the page showed its message,
    /// or when the cookie held nothing usable.
    fn finish(self, req: &Request, mut response: Response) -> Response {
        let shown = response.status().is_success();
        let drop_cookie = match self {
            Self::Keep => false,
            Self::Shown | Self::ShownSecret(_) => shown,
            Self::Unusable => true,
        };
        if drop_cookie {
            layout::set_cookie(&mut response, &cookies::clear_flash(req));
        }
        if shown && matches!(self, Self::ShownSecret(_)) {
            layout::set_cookie(&mut response, &cookies::set_secret_shown(req));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use poem::http::StatusCode;
    use poem::http::header::SET_COOKIE;

    use super::*;

    fn drops_cookie(taken: Taken, status: StatusCode) -> bool {
        let req = Request::builder().finish();
        let response = taken.finish(&req, Response::builder().status(status).finish());
        response
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.starts_with("pb_flash=;")))
    }

    fn sets_cookie(response: &Response, prefix: &str) -> bool {
        response
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.starts_with(prefix)))
    }

    #[test]
    fn a_page_that_shows_a_secret_leaves_its_mark_for_the_next_page() {
        let req = Request::builder().finish();
        let ok = || Response::builder().status(StatusCode::OK).finish();
        let shown = Taken::ShownSecret("n".into()).finish(&req, ok());
        assert!(sets_cookie(&shown, "pb_shown=1;"));
        let failed = Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .finish();
        let failed = Taken::ShownSecret("n".into()).finish(&req, failed);
        assert!(!sets_cookie(&failed, "pb_shown="));
        for taken in [Taken::Shown, Taken::Keep, Taken::Unusable] {
            assert!(!sets_cookie(&taken.finish(&req, ok()), "pb_shown="));
        }
    }

    #[test]
    fn a_shown_message_is_dropped_and_a_failed_page_keeps_it_for_the_reload() {
        assert!(drops_cookie(Taken::Shown, StatusCode::OK));
        assert!(!drops_cookie(Taken::Shown, StatusCode::SERVICE_UNAVAILABLE));
        assert!(drops_cookie(Taken::ShownSecret("n".into()), StatusCode::OK));
        assert!(!drops_cookie(
            Taken::ShownSecret("n".into()),
            StatusCode::SERVICE_UNAVAILABLE
        ));
        assert!(!drops_cookie(
            Taken::Shown,
            StatusCode::INTERNAL_SERVER_ERROR
        ));
    }

    #[test]
    fn a_prefetch_is_told_apart() {
        for (name, value, prefetch) in [
            ("sec-purpose", "prefetch", true),
            ("sec-purpose", "prefetch;prerender", true),
            ("purpose", "prefetch", true),
            ("x-moz", "prefetch", true),
            ("x-purpose", "preview", true),
            ("sec-fetch-mode", "navigate", false),
        ] {
            let req = Request::builder().header(name, value).finish();
            assert_eq!(is_prefetch(&req), prefetch, "{name}: {value}");
        }
        assert!(!is_prefetch(&Request::builder().finish()));
    }

    #[test]
    fn an_unusable_cookie_is_dropped_and_another_pages_message_kept() {
        assert!(drops_cookie(Taken::Unusable, StatusCode::OK));
        assert!(drops_cookie(
            Taken::Unusable,
            StatusCode::SERVICE_UNAVAILABLE
        ));
        assert!(!drops_cookie(Taken::Keep, StatusCode::OK));
    }
}
