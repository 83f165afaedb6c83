//! The panel's cookies, `pb_session` (the session), `pb_flash` (a message for the page after
//! a form) and `pb_shown` (a secret was just shown: see [`set_secret_shown`]): `HttpOnly`,
//! `SameSite=Strict`, `Path=/panel`, and `Secure` when the server serves TLS or its
//! `--public-url` is `https://` (docs/operations.md).

use poem::Request;
use poem::http::header;

use partner_billing::domain::Secret;
use partner_billing::limits::SESSION_LIFETIME_SECONDS;

pub const SESSION_COOKIE: &str = "pb_session";

/// The cookie carrying a message for the page after a form (see `flash`).
pub const FLASH_COOKIE: &str = "pb_flash";

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

/// `Set-Cookie` value handing `sealed` to the next page, for as long as the server opens it.
pub fn set_flash(req: &Request, sealed: &str) -> String {
    set_cookie(
        req,
        FLASH_COOKIE,
        sealed,
        super::flash::FLASH_LIFETIME_SECONDS,
    )
}

/// `Set-Cookie` value dropping the flash cookie.
pub fn clear_flash(req: &Request) -> String {
    set_cookie(req, FLASH_COOKIE, "", 0)
}

/// The cookie a page that showed a secret leaves for the next page to drop.
pub const SECRET_SHOWN_COOKIE: &str = "pb_shown";

/// `Set-Cookie` value marking that this page shows a secret. Chromium keeps even a `no-store`
/// page in its back/forward cache, and restores it on "Back" unless an `HttpOnly` cookie
/// changed meanwhile; so the next page of the panel drops this cookie ([`clear_secret_shown`]),
/// and "Back" fetches the page again, which shows the secret no more.
pub fn set_secret_shown(req: &Request) -> String {
    set_cookie(req, SECRET_SHOWN_COOKIE, "1", SESSION_LIFETIME_SECONDS)
}

/// `Set-Cookie` value dropping the mark of a secret shown, when the request carries it.
pub fn clear_secret_shown(req: &Request) -> Option<String> {
    cookie(req, SECRET_SHOWN_COOKIE).map(|_| set_cookie(req, SECRET_SHOWN_COOKIE, "", 0))
}

/// Whether browsers reach the app over HTTPS, as configured (never guessed from a header a
/// client can send).
fn is_https(req: &Request) -> bool {
    req.extensions().get::<crate::headers::Https>().is_some()
}

/// `Set-Cookie` value for the panel's cookie `name`: every panel cookie has the same
/// attributes; a `max_age` of 0 drops it.
fn set_cookie(req: &Request, name: &str, value: &str, max_age: i64) -> String {
    let secure = if is_https(req) { "; Secure" } else { "" };
    format!("{name}={value}; HttpOnly; SameSite=Strict; Path=/panel{secure}; Max-Age={max_age}")
}

/// `Set-Cookie` value starting a session.
pub fn set_session(req: &Request, token: &Secret) -> String {
    set_cookie(
        req,
        SESSION_COOKIE,
        token.expose(),
        SESSION_LIFETIME_SECONDS,
    )
}

/// `Set-Cookie` value ending the session in the browser.
pub fn clear_session(req: &Request) -> String {
    set_cookie(req, SESSION_COOKIE, "", 0)
}
