//! The panel's cookies, `pb_session` (the session) and `pb_flash` (a message for the page after
//! a form): `HttpOnly`, `SameSite=Strict`, `Path=/panel`, and `Secure` when the server serves
//! TLS or its `--public-url` is `https://` (docs/operations.md).

use poem::Request;
use poem::http::header;

use partner_billing::domain::Secret;
use partner_billing::limits::SESSION_LIFETIME_SECONDS;

pub const SESSION_COOKIE: &str = "pb_session";

/// The cookie carrying a message for the page after a form (see `flash`).
pub const FLASH_COOKIE: &str = "pb_flash";

/// How long a flash cookie lives in the browser (the server opens it for as long).
const FLASH_MAX_AGE_SECONDS: i64 = super::flash::FLASH_LIFETIME_SECONDS;

/// The value of the request's cookie `name`, if any.
fn cookie<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.trim())
}

/// The session token from the request's cookie, if any. Nothing else (no `Authorization`
/// header) opens a page.
pub fn session_token(req: &Request) -> Option<Secret> {
    cookie(req, SESSION_COOKIE).map(Secret::from_presented)
}

/// The flash cookie's (sealed) value, if the request has one.
pub fn flash(req: &Request) -> Option<&str> {
    cookie(req, FLASH_COOKIE)
}

/// `Set-Cookie` value handing `sealed` to the next page.
pub fn set_flash(req: &Request, sealed: &str) -> String {
    format!(
        "{FLASH_COOKIE}={sealed}{}; Max-Age={FLASH_MAX_AGE_SECONDS}",
        attributes(req)
    )
}

/// `Set-Cookie` value dropping the flash cookie.
pub fn clear_flash(req: &Request) -> String {
    format!("{FLASH_COOKIE}={}; Max-Age=0", attributes(req))
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
