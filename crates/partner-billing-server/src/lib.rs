//! The Partner Billing HTTP server: thin handlers over the core library.
//!
//! [`app`] builds the whole service for a [`Store`]; [`serve`] runs it on a listener the caller
//! bound (tests bind port 0); [`openapi_document`] is the published contract.
#![forbid(unsafe_code)]

mod access_log;
mod answer;
mod around;
mod auth;
mod body;
pub mod command;
mod connection_loop;
pub mod connections;
mod cross_site;
mod document;
pub mod errors;
mod guard;
mod headers;
mod health;
mod log_writer;
pub mod logging;
pub mod metrics;
mod origin;
mod panel;
mod partner;
mod path_text;
mod problem;
mod product;
mod reads;
pub mod request_id;
mod route;
mod serve;
mod text_rule;
pub mod tls;
mod web;
mod webhook_worker;
mod webhooks;

/// The panel's routes, for a test that walks every one of them.
pub use web::{PanelAccess, PanelRoute, panel_routes};

use std::time::Duration;

use poem::endpoint::BoxEndpoint;
use poem::{EndpointExt, IntoResponse, Response, Route};
use poem_openapi::{OpenApiService, Tags};

use partner_billing::store::Store;
use partner_billing::wire::ErrorCode;

pub use metrics::Metrics;
pub use problem::{
    ApiError, Challenge, PROBLEM_JSON, WWW_AUTHENTICATE, WWW_AUTHENTICATE_BEARER,
    unauthorized_response,
};
pub use serve::{ServeOptions, serve, serve_with};

/// What every handler shares: the store and the app's metrics. Passed as poem `Data`, so the
/// API structs stay free of state and the document can be built without a database.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The app's own registry (one per app instance): for workers that count what no request
    /// answer shows (webhook deliveries, the outbox, panel sign-ins).
    pub metrics: Metrics,
}

#[derive(Tags)]
pub enum ApiTags {
    /// For resellers' backends, with an API key: balances, licenses, promo batches.
    Partner,
    /// For the reseller panel, with a panel session: the account and its API keys.
    Panel,
    /// For the product's own backend, with an operator token: logins, redemptions, licenses.
    Product,
    /// Operations: health.
    Operations,
}

type Apis = (
    partner::PartnerApi,
    reads::ReadsApi,
    panel::PanelApi,
    product::ProductApi,
    health::HealthApi,
    webhooks::WebhooksApi,
);

const DESCRIPTION: &str = "Partner Billing lets a reseller grant subscriptions to its own users \
without a checkout. Resellers hold a prepaid quota per product and spend it with an API key, \
server to server only.\n\nAuthenticate partner calls with `X-Client-Id` and `X-Client-Secret` \
(checked first) or HTTP Basic (client id as user name, secret as password). Every credential \
failure is a 401 with an empty body. Errors are RFC 9457 `application/problem+json` with a stable \
`code`. Every write takes an `idempotencyKey`: retry with the same key and you are never charged \
twice.\n\nThe product API (`/v1/billing/product`) is for the product's own backend: it registers \
end-user logins, redeems promo codes and lists a login's licenses, with an operator token sent as \
`Authorization: Bearer rso_…`; no other credential is accepted there.\n\n\
**Trying it out from this page:** the partner and product APIs are server-to-server only and \
refuse every request a browser sends (`403 Request.BrowserOriginForbidden`, before credentials \
are read), so \"Try it out\" on them cannot succeed here: use it to see the `curl` command, \
and run that from a terminal or a server. The panel API answers requests from this page's own \
origin.";

fn service() -> OpenApiService<Apis, ()> {
    OpenApiService::new(
        (
            partner::PartnerApi,
            reads::ReadsApi,
            panel::PanelApi,
            product::ProductApi,
            health::HealthApi,
            webhooks::WebhooksApi,
        ),
        "Partner Billing",
        env!("CARGO_PKG_VERSION"),
    )
    .description(DESCRIPTION)
}

/// The published OpenAPI document, as committed in `openapi/partner-billing.json`.
pub fn openapi_document() -> String {
    document::complete(&service().spec())
}

/// How the app is reached, for what only the transport decides (docs/operations.md).
#[derive(Clone, Copy, Debug, Default)]
pub struct AppOptions {
    /// Browsers reach the app over HTTPS (`--tls-cert`, or an `https://` `--public-url`):
    /// panel cookies are `Secure` and every answer has `Strict-Transport-Security`.
    pub https: bool,
}

/// The whole service for one store, reached over plain HTTP.
pub fn app(state: AppState) -> BoxEndpoint<'static> {
    app_with(state, AppOptions::default())
}

/// As [`app`], with the transport settings.
pub fn app_with(state: AppState, options: AppOptions) -> BoxEndpoint<'static> {
    let metrics = state.metrics.clone();
    let guard_store = state.store.clone();
    let service = service();
    let raw_spec = service.spec();
    let document = openapi_document();
    let swagger = service
        .swagger_ui_html()
        .replace(&raw_spec, document.trim_end());
    let openapi_json = document.clone();
    let docs_csp = headers::docs_csp(&swagger);
    let routes = Route::new()
        .nest("/", service)
        .nest("/panel", web::routes())
        .at(
            "/openapi.json",
            poem::get(poem::endpoint::make_sync(move |_| {
                Response::builder()
                    .content_type("application/json")
                    .body(openapi_json.clone())
            })),
        )
        .at(
            "/docs",
            poem::get(poem::endpoint::make_sync(move |_| {
                poem::web::Html(swagger.clone()).into_response()
            })),
        )
        .data(state)
        .catch_all_error(|err: poem::Error| async move { error_response(err) })
        // A panic answers 500 like any internal error; its message is never sent (the panic
        // hook of `command` logs where it happened, not what it said).
        .with(poem::middleware::CatchPanic::new().with_handler(panic_response));
    around::Around::new(routes, metrics, guard_store, docs_csp, options.https).boxed()
}

/// The answer to a request whose handler panicked: the plain internal error.
fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> problem::ApiError {
    problem::ApiError::new(
        ErrorCode::InternalError,
        "An unexpected error occurred; the outcome is unknown. Retry with the same idempotency key.",
    )
}

/// Maps framework errors (no route, unparsable parameters, missing credentials) to the
/// service's responses.
fn error_response(err: poem::Error) -> Response {
    use poem_openapi::error::{
        AuthorizationError, ContentTypeError, ParseParamError, ParsePathError,
        ParseRequestPayloadError,
    };
    if err.is::<AuthorizationError>() {
        return unauthorized_response();
    }
    if err.is::<ParseParamError>()
        || err.is::<ParsePathError>()
        || err.is::<ParseRequestPayloadError>()
        || err.is::<ContentTypeError>()
    {
        let field = err
            .downcast_ref::<ParseParamError>()
            .map(|e| e.name)
            .or_else(|| err.downcast_ref::<ParsePathError>().map(|e| e.name))
            .map(str::to_owned);
        return ApiError::validation(
            field.unwrap_or_else(|| "body".to_owned()),
            "The request is malformed.",
        )
        .into_response();
    }
    if err.is::<poem::error::NotFoundError>() {
        return ApiError::new(ErrorCode::RouteNotFound, "No such resource.").into_response();
    }
    if err.is::<poem::error::MethodNotAllowedError>() {
        return ApiError::new(
            ErrorCode::MethodNotAllowed,
            "Method not allowed on this path.",
        )
        .into_response();
    }
    err.into_response()
}

/// How often expired promo recovery payloads are deleted.
const PURGE_INTERVAL: Duration = Duration::from_secs(300);

/// Deletes expired recovery payloads at start and every few minutes.
pub(crate) async fn purge_periodically(store: Store) {
    let mut ticks = tokio::time::interval(PURGE_INTERVAL);
    loop {
        ticks.tick().await;
        if let Err(err) = partner_billing::promo::purge_expired(&store).await {
            tracing::warn!(error = %err, "purge of expired recovery payloads failed");
        }
        if let Err(err) = partner_billing::throttle::purge_expired(&store).await {
            tracing::warn!(error = %err, "purge of expired attempt counters failed");
        }
        if let Err(err) = store.checkpoint().await {
            tracing::warn!(error = %err, "WAL checkpoint failed");
        }
        if let Err(err) = partner_billing::accounts::purge_expired_sessions(&store).await {
            tracing::warn!(error = %err, "purge of expired panel sessions failed");
        }
    }
}
