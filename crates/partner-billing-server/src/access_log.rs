//! The access log: one line per request, written inside the request's span (so it carries the
//! request id): method, route template, status and time. Never headers, bodies or the raw
//! path, which may hold a login.

use std::time::Instant;

use poem::{Endpoint, IntoResponse, Request, Response};

use crate::route;

/// Middleware: serves the request and logs its outcome.
pub async fn log_request<E: Endpoint>(ep: &E, req: Request) -> Response {
    let method = req.method().clone();
    let route = route::template(req.uri().path());
    let started = Instant::now();
    tracing::debug!(%method, route, "request started");
    let response = match ep.call(req).await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    };
    tracing::info!(
        %method,
        route,
        status = response.status().as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request"
    );
    response
}
