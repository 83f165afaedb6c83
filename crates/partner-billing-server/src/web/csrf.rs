//! Forms that change state carry a per-session CSRF token, and must come from the panel itself.

use poem::Request;
use poem::http::header;
use subtle::ConstantTimeEq;

use partner_billing::domain::{Secret, sha256_hex};

/// The session's CSRF token: derived from the session token, so it lives and dies with it and
/// needs no storage; the session token cannot be recovered from it.
pub fn token_for(session: &Secret) -> String {
    sha256_hex(format!("partner-billing panel csrf\0{}", session.expose()).as_bytes())
}

/// Whether a form's token is the session's.
pub fn token_matches(session: &Secret, presented: &str) -> bool {
    bool::from(token_for(session).as_bytes().ct_eq(presented.as_bytes()))
}

/// "Another site" (docs/design.md): `Sec-Fetch-Site` present and not `same-origin`; or, without it,
/// an `Origin` that is not the panel's own. Chromium sends `Origin: null` with
/// `Sec-Fetch-Site: same-origin` under `Referrer-Policy: no-referrer`: that is same-origin.
pub fn is_cross_site(req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        return site != "same-origin";
    }
    let Some(origin) = req.header(header::ORIGIN) else {
        return false;
    };
    let host = req.header(header::HOST).unwrap_or_default();
    host.is_empty() || (origin != format!("http://{host}") && origin != format!("https://{host}"))
}
