//! The reseller web panel (docs/design.md): HTML pages under `/panel`, rendered on the server from
//! templates compiled into the binary, working without JavaScript. Each view reads like a JSON
//! handler: parse, authenticate (a [`session::SignedIn`] or [`session::SignedInForm`] argument: the
//! handler cannot forget it), call the core, render.
//!
//! The panel is not part of the OpenAPI document; the JSON panel API stays for the SDK and CLI.

mod activity;
mod api_keys;
mod assets;
mod cookies;
mod csrf;
mod flash;
mod layout;
mod ledger;
mod licenses;
mod login;
mod overview;
mod promo_batches;
mod session;
mod settings;
mod usage;
mod webhooks;

use std::collections::BTreeMap;

use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Endpoint, EndpointExt, IntoResponse, Response, Route, RouteMethod};

use partner_billing::accounts;
use partner_billing::domain::Secret;

use crate::AppState;

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

/// Who may use a panel route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelAccess {
    /// Anyone: the sign-in page and the assets.
    Public,
    /// A signed-in reseller: the handler takes `session::SignedIn` (a page) or
    /// `session::SignedInForm` (a form POST, which also checks the CSRF token and the origin).
    SignedIn,
}

/// One route of the panel. The router is built from [`panel_routes`] and nothing else, so a
/// test can walk every route (each `SignedIn` one must redirect without a session and refuse a
/// POST without its CSRF token).
pub struct PanelRoute {
    pub method: Method,
    /// As the router has it, under `/panel` (`:name` for a path parameter).
    pub path: &'static str,
    pub access: PanelAccess,
    endpoint: poem::endpoint::BoxEndpoint<'static>,
}

fn route<E>(method: Method, path: &'static str, access: PanelAccess, endpoint: E) -> PanelRoute
where
    E: Endpoint + 'static,
    E::Output: IntoResponse + 'static,
{
    PanelRoute {
        method,
        path,
        access,
        endpoint: endpoint.map_to_response().boxed(),
    }
}

/// Every route under `/panel`.
pub fn panel_routes() -> Vec<PanelRoute> {
    use PanelAccess::{Public, SignedIn};
    vec![
        route(Method::GET, "/", SignedIn, overview::page),
        route(Method::GET, "/login", Public, login::page),
        route(Method::POST, "/login", Public, login::submit),
        route(Method::POST, "/logout", SignedIn, login::logout),
        route(Method::GET, "/api-keys", SignedIn, api_keys::page),
        route(Method::POST, "/api-keys", SignedIn, api_keys::create),
        route(
            Method::POST,
            "/api-keys/:api_key_id/revoke",
            SignedIn,
            api_keys::revoke,
        ),
        route(
            Method::POST,
            "/api-keys/:api_key_id/roll",
            SignedIn,
            api_keys::roll,
        ),
        route(Method::GET, "/ledger", SignedIn, ledger::page),
        route(Method::GET, "/ledger.csv", SignedIn, ledger::csv),
        route(Method::GET, "/promo-batches", SignedIn, promo_batches::page),
        route(
            Method::GET,
            "/promo-batches/:batch_id/void",
            SignedIn,
            promo_batches::confirm_void,
        ),
        route(
            Method::POST,
            "/promo-batches/:batch_id/void",
            SignedIn,
            promo_batches::void,
        ),
        route(Method::GET, "/licenses", SignedIn, licenses::page),
        route(
            Method::POST,
            "/licenses/:license_id/revoke",
            SignedIn,
            licenses::revoke,
        ),
        route(Method::GET, "/webhooks", SignedIn, webhooks::page),
        route(Method::POST, "/webhooks", SignedIn, webhooks::create),
        route(
            Method::POST,
            "/webhooks/:webhook_endpoint_id/test",
            SignedIn,
            webhooks::test,
        ),
        route(
            Method::POST,
            "/webhooks/:webhook_endpoint_id/delete",
            SignedIn,
            webhooks::delete,
        ),
        route(Method::GET, "/activity", SignedIn, activity::page),
        route(Method::GET, "/settings", SignedIn, settings::page),
        route(
            Method::POST,
            "/settings/password",
            SignedIn,
            settings::change_password,
        ),
        route(
            Method::POST,
            "/settings/alerts",
            SignedIn,
            settings::save_alerts,
        ),
        route(Method::GET, "/assets/:file", Public, assets::file),
    ]
}

/// A path the panel does not have (`404`), or a form's address visited as a page (`405`, the
/// address bar after a refused form, say): a page of the panel's own (with its icon, so a
/// browser asks for no `/favicon.ico`), not the router's plain text; for a signed-in reseller
/// with the "Sign out" button every page has.
async fn no_page(session: Option<(Secret, AppState)>, status: StatusCode) -> Response {
    let (title, message) = if status == StatusCode::METHOD_NOT_ALLOWED {
        (
            "Not a page",
            "This address takes a form, not a visit. Start again from the overview.",
        )
    } else {
        (
            "Page not found",
            "There is no such page in the panel. Start again from the overview.",
        )
    };
    if let Some((token, state)) = session
        && accounts::authenticate_session(&state.store, &token)
            .await
            .is_ok()
    {
        return layout::message_with_sign_out(&csrf::token_for(&token), status, title, message);
    }
    layout::message_page(status, title, message)
}

/// An error answer as the panel shows it: the panel's pages keep theirs; poem's own plain text
/// (a form body that could not be read, say: it names the I/O error) becomes a page of the
/// panel with the same status.
fn own_page(response: Response) -> Response {
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|t| t.as_bytes().starts_with(b"text/plain"));
    let status = response.status();
    if !plain || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    if status.is_server_error() {
        let (title, message) = layout::status_text(status);
        return layout::message_page(status, title, message);
    }
    layout::message_page(
        status,
        "Not a valid request",
        "The request could not be read (a form sent only in part, say). Go back and try again.",
    )
}

/// Whether `response` sets the cookie `name` (a page showing another secret renews its mark).
fn sets_cookie(response: &Response, name: &str) -> bool {
    response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split_once('=').is_some_and(|(found, _)| found == name))
}

/// The routes under `/panel`, with the security headers on every answer.
pub fn routes() -> impl Endpoint<Output = Response> {
    let mut paths: BTreeMap<&str, RouteMethod> = BTreeMap::new();
    for r in panel_routes() {
        let methods = paths.remove(r.path).unwrap_or_default();
        paths.insert(r.path, methods.method(r.method, r.endpoint));
    }
    paths
        .into_iter()
        .fold(Route::new(), |router, (path, methods)| {
            router.at(path, methods)
        })
        .around(|ep, req| async move {
            // Kept for the page of a path the panel does not have; only a request with a
            // session cookie pays for the state's clone.
            let session = cookies::session_token(&req)
                .and_then(|token| Some((token, req.data::<AppState>()?.clone())));
            // The page after one that showed a secret drops its mark (`cookies`); an asset the
            // secret's own page loads does not.
            let drop_mark = (!req.uri().path().starts_with("/panel/assets/"))
                .then(|| cookies::clear_secret_shown(&req))
                .flatten();
            let mut response = match ep.call(req).await {
                Ok(r) => r.into_response(),
                Err(e) if e.is::<poem::error::NotFoundError>() => {
                    no_page(session, StatusCode::NOT_FOUND).await
                }
                Err(e) if e.is::<poem::error::MethodNotAllowedError>() => {
                    no_page(session, StatusCode::METHOD_NOT_ALLOWED).await
                }
                Err(e) => own_page(e.into_response()),
            };
            if let Some(drop_mark) = drop_mark
                && !sets_cookie(&response, cookies::SECRET_SHOWN_COOKIE)
            {
                layout::set_cookie(&mut response, &drop_mark);
            }
            let headers = response.headers_mut();
            for (name, value) in SECURITY_HEADERS {
                headers.insert(name, HeaderValue::from_static(value));
            }
            headers.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
            Ok(response)
        })
}
