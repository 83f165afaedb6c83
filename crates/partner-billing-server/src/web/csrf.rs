//! Forms that change state carry a per-session CSRF token (and must come from the panel itself:
//! [`crate::cross_site`]).

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
