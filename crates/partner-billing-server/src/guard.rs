//! Checks that run before routing and credentials: browsers are kept out of the partner and
//! product APIs (and cross-site ones out of the panel), and an API key is told it cannot
//! manage keys.

use base64::Engine as _;
use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Request, Response};

use partner_billing::domain::Secret;
use partner_billing::error::Error;
use partner_billing::store::Store;
use partner_billing::wire::ErrorCode;
use partner_billing::{accounts, keys, operators};

use crate::cross_site::{Sent, is_cross_site};
use crate::problem::{ApiError, Challenge};

const PARTNER_PREFIX: &str = "/v1/billing/partner";
const PRODUCT_PREFIX: &str = "/v1/billing/product";
const PANEL_PREFIX: &str = "/v1/billing/resellers";
const SESSIONS_PATH: &str = "/v1/billing/resellers/sessions";

/// What the guard keeps of a request it let through, to finish its answer.
pub struct Passed {
    challenge: Challenge,
    presented: Option<Presented>,
}

/// Refuses what must never reach a handler (`Err`, the problem answered), or lets the request
/// through.
pub fn check(req: &Request) -> Result<Passed, ApiError> {
    if let Some(refusal) = refusal(req) {
        return Err(refusal);
    }
    Ok(Passed {
        challenge: Challenge::for_path(req.uri().path()),
        presented: Presented::of(req),
    })
}

impl Passed {
    /// The answer to a request let through. Every 401 leaves here with the challenge of its
    /// route (`Basic` for API keys, `Bearer` for sessions and tokens).
    pub async fn finish(self, mut response: Response, store: &Store) -> Response {
        // Credentials are checked against the database in the handler, after the request has
        // parsed: a request that did not parse is answered before they are. Refused
        // credentials are the empty 401 whatever else is wrong with the request, so such an
        // answer is given only once they are known to be good.
        if matches!(response.status().as_u16(), 400 | 413 | 415)
            && let Some(presented) = self.presented
            && presented.refused(store).await
        {
            response = ApiError::from(Error::Unauthorized).into_response();
        }
        if response.status() == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(self.challenge.header_value()),
            );
        }
        response
    }
}

fn refusal(req: &Request) -> Option<ApiError> {
    let path = req.uri().path();
    let server_to_server = if path.starts_with(PARTNER_PREFIX) {
        Some("The partner API is server-to-server only; browser requests are refused.")
    } else if path.starts_with(PRODUCT_PREFIX) {
        Some("The product API is server-to-server only; browser requests are refused.")
    } else {
        None
    };
    if let Some(detail) = server_to_server {
        // These APIs are server-to-server: a browser's marks (`Origin`, `Sec-Fetch-Site`) are
        // refused before credentials are looked at, so a leaked secret or token in a web page
        // does nothing. `Sec-Fetch-Mode` alone is no browser: Node.js's `fetch` sends
        // `Sec-Fetch-Mode: cors` on every request, and server-side Node clients must work.
        let browser = [header::ORIGIN.as_str(), "sec-fetch-site"]
            .iter()
            .any(|name| req.headers().contains_key(*name));
        if browser {
            return Some(ApiError::new(ErrorCode::BrowserOriginForbidden, detail));
        }
    } else if path.starts_with(PANEL_PREFIX) {
        if is_cross_site(req, Sent::ByApiCall) {
            return Some(ApiError::new(
                ErrorCode::BrowserOriginForbidden,
                "Cross-site browser requests to the panel are refused.",
            ));
        }
        if path != SESSIONS_PATH && carries_api_key(req) {
            return Some(ApiError::new(
                ErrorCode::PanelSessionRequired,
                "API keys cannot manage keys or the account; log in to the panel and use its session.",
            ));
        }
    }
    None
}

fn carries_api_key(req: &Request) -> bool {
    let basic = req
        .header(header::AUTHORIZATION)
        .and_then(|v| v.get(..6))
        .is_some_and(|p| p.eq_ignore_ascii_case("basic "));
    let bearer_secret = req
        .header(header::AUTHORIZATION)
        .and_then(|v| v.get(7..))
        .is_some_and(|rest| rest.trim_start().starts_with("rss_"));
    basic
        || bearer_secret
        || req.headers().contains_key("x-client-id")
        || req.headers().contains_key("x-client-secret")
}

/// The credential headers of a request to an authenticated API, kept while it is served:
/// copies of the header values (shared buffers, no allocation), read only when the answer
/// needs them.
struct Presented {
    api: Api,
    client_id: Option<HeaderValue>,
    secret: Option<HeaderValue>,
    authorization: Option<HeaderValue>,
}

/// The authenticated APIs and their credential.
#[derive(Clone, Copy)]
enum Api {
    /// API key: the dedicated headers, else HTTP Basic (the order the API reads them).
    Partner,
    /// Operator token.
    Product,
    /// Panel session (but signing in).
    Panel,
}

impl Presented {
    fn of(req: &Request) -> Option<Self> {
        let path = req.uri().path();
        let api = if path.starts_with(PARTNER_PREFIX) {
            Api::Partner
        } else if path.starts_with(PRODUCT_PREFIX) {
            Api::Product
        } else if path.starts_with(PANEL_PREFIX) && path != SESSIONS_PATH {
            Api::Panel
        } else {
            return None;
        };
        let headers = req.headers();
        Some(Self {
            api,
            client_id: headers.get("x-client-id").cloned(),
            secret: headers.get(crate::auth::CLIENT_SECRET_HEADER).cloned(),
            authorization: headers.get(header::AUTHORIZATION).cloned(),
        })
    }

    /// Whether the database refuses these credentials (an outage is no refusal; a request
    /// without them was refused before its handler).
    async fn refused(self, store: &Store) -> bool {
        let outcome = match self.api {
            Api::Partner => {
                let key = match (text(&self.client_id), text(&self.secret)) {
                    (Some(id), Some(secret)) => Some((id.to_owned(), secret.to_owned())),
                    _ => basic(text(&self.authorization)),
                };
                let Some((client_id, secret)) = key else {
                    return false;
                };
                let secret = Secret::from_presented(secret);
                keys::authenticate_api_key(store, &client_id, &secret)
                    .await
                    .map(drop)
            }
            Api::Product | Api::Panel => {
                let Some(token) = scheme_value(text(&self.authorization), "bearer ") else {
                    return false;
                };
                let token = Secret::from_presented(token);
                if let Api::Product = self.api {
                    operators::authenticate_operator(store, &token)
                        .await
                        .map(drop)
                } else {
                    accounts::authenticate_session(store, &token)
                        .await
                        .map(drop)
                }
            }
        };
        matches!(outcome, Err(Error::Unauthorized))
    }
}

/// A header's value as text, if it is.
fn text(value: &Option<HeaderValue>) -> Option<&str> {
    value.as_ref().and_then(|v| v.to_str().ok())
}

/// The client id and secret of an `Authorization: Basic` value.
fn basic(authorization: Option<&str>) -> Option<(String, String)> {
    let encoded = scheme_value(authorization, "basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let (client_id, secret) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((client_id.to_owned(), secret.to_owned()))
}

/// The value of an `Authorization` header of `scheme` (lower case, with its space).
fn scheme_value<'v>(authorization: Option<&'v str>, scheme: &str) -> Option<&'v str> {
    let value = authorization?;
    let prefix = value.get(..scheme.len())?;
    prefix
        .eq_ignore_ascii_case(scheme)
        .then(|| value[scheme.len()..].trim())
}
