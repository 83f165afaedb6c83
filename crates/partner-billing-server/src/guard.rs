//! Checks that run before routing and credentials: browsers are kept out of the partner and
//! product APIs (and cross-site ones out of the panel), and an API key is told it cannot
//! manage keys.

use poem::http::{HeaderValue, StatusCode, header};
use poem::{Endpoint, IntoResponse, Request, Response};

use partner_billing::wire::ErrorCode;

use crate::cross_site::is_cross_site;
use crate::problem::{ApiError, Challenge};

const PARTNER_PREFIX: &str = "/v1/billing/partner";
const PRODUCT_PREFIX: &str = "/v1/billing/product";
const PANEL_PREFIX: &str = "/v1/billing/resellers";
const SESSIONS_PATH: &str = "/v1/billing/resellers/sessions";

/// Refuses what must never reach a handler, or passes the request on. Every 401 leaves here
/// with the challenge of its route (`Basic` for API keys, `Bearer` for sessions and tokens).
pub async fn guard<E: Endpoint>(ep: &E, req: Request) -> poem::Result<Response> {
    if let Some(refusal) = refusal(&req) {
        return Ok(refusal.into_response());
    }
    let challenge = Challenge::for_path(req.uri().path());
    let mut response = match ep.call(req).await {
        Ok(response) => response.into_response(),
        Err(err) => err.into_response(),
    };
    if response.status() == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge.header_value()),
        );
    }
    Ok(response)
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
        if is_cross_site(req) {
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
