//! The `pb_session` cookie: `HttpOnly`, `SameSite=Strict`, `Path=/panel`, and `Secure` when the
//! server serves TLS or its `--public-url` is `https://` (docs/operations.md).

use poem::Request;
use poem::http::header;

use partner_billing::domain::Secret;
use partner_billing::limits::SESSION_LIFETIME_SECONDS;

pub const SESSION_COOKIE: &str = "pb_session";

/// The session token from the request's cookie, if any. Nothing else (no `Authorization`
/// header) opens a page.
pub fn session_token(req: &Request) -> Option<Secret> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| Secret::from_presented(value.trim()))
}

/// Whether browsers reach the app over HTTPS, as configured (never guessed from a header a
/// client can send).
fn is_https(req: &Request) -> bool {
    req.extensions().get::<crate::headers::Https>().is_some()
}

fn attributes(req: &Request) -> &'static str {
    if is_https(req) {
        "; HttpOnly; SameSite=Strict; Path=/panel; Secure"
    } else {
        "; HttpOnly; SameSite=Strict; Path=/panel"
    }
}

/// `Set-Cookie` value starting a session.
pub fn set_session(req: &Request, token: &Secret) -> String {
    format!(
        "{SESSION_COOKIE}={}{}; Max-Age={SESSION_LIFETIME_SECONDS}",
        token.expose(),
        attributes(req)
    )
}

/// `Set-Cookie` value ending the session in the browser.
pub fn clear_session(req: &Request) -> String {
    format!("{SESSION_COOKIE}={}; Max-Age=0", attributes(req))
}
