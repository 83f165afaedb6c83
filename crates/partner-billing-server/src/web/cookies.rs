//! The `pb_session` cookie: `HttpOnly`, `SameSite=Strict`, `Path=/panel`, and `Secure` when the
//! panel is reached over HTTPS.

use poem::Request;
use poem::http::header;

use partner_billing::accounts::SESSION_LIFETIME_SECONDS;
use partner_billing::domain::Secret;

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

/// Whether the browser reached us over HTTPS (directly, or through a proxy that says so).
fn is_https(req: &Request) -> bool {
    req.uri().scheme_str() == Some("https")
        || req
            .header("x-forwarded-proto")
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
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
