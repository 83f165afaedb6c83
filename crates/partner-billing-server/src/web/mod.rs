//! The reseller web panel (docs/design.md): HTML pages under `/panel`, rendered on the server from
//! templates compiled into the binary, working without JavaScript. Each view reads like a JSON
//! handler: parse, authenticate (the `pb_session` cookie), call the core, render.
//!
//! The panel is not part of the OpenAPI document; the JSON panel API stays for the SDK and CLI.

mod api_keys;
mod assets;
mod cookies;
mod csrf;
mod layout;
mod ledger;
mod licenses;
mod login;
mod overview;
mod promo_batches;
mod session;
mod settings;
mod webhooks;

use poem::http::{HeaderValue, header};
use poem::{Endpoint, EndpointExt, IntoResponse, Response, Route, get, post};

/// Every panel response carries these (docs/design.md).
const SECURITY_HEADERS: [(&str, &str); 4] = [
    (
        "content-security-policy",
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// The routes under `/panel`, with the security headers on every answer.
pub fn routes() -> impl Endpoint<Output = Response> {
    Route::new()
        .at("/", get(overview::page))
        .at("/login", get(login::page).post(login::submit))
        .at("/logout", post(login::logout))
        .at("/api-keys", get(api_keys::page).post(api_keys::create))
        .at("/api-keys/:api_key_id/revoke", post(api_keys::revoke))
        .at("/api-keys/:api_key_id/roll", post(api_keys::roll))
        .at("/ledger", get(ledger::page))
        .at("/ledger.csv", get(ledger::csv))
        .at("/promo-batches", get(promo_batches::page))
        .at("/licenses", get(licenses::page))
        .at("/webhooks", get(webhooks::page).post(webhooks::create))
        .at("/webhooks/:webhook_endpoint_id/test", post(webhooks::test))
        .at(
            "/webhooks/:webhook_endpoint_id/delete",
            post(webhooks::delete),
        )
        .at("/settings", get(settings::page))
        .at("/settings/password", post(settings::change_password))
        .at("/settings/alerts", post(settings::save_alerts))
        .at("/assets/:file", get(assets::file))
        .around(|ep, req| async move {
            let mut response = match ep.call(req).await {
                Ok(r) => r.into_response(),
                Err(e) => e.into_response(),
            };
            let headers = response.headers_mut();
            for (name, value) in SECURITY_HEADERS {
                headers.insert(name, HeaderValue::from_static(value));
            }
            headers.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
            Ok(response)
        })
}
