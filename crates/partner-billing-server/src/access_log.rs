//! The access log: one line per request, written inside the request's span (so it carries the
//! request id): method, route template, status and time. Never headers, bodies or the raw
//! path, which may hold a login.

use std::time::Instant;

use poem::http::{Method, StatusCode};

/// Logs that a request is being served (at debug level).
pub fn started(method: &Method, route: &str) {
    tracing::debug!(%method, route, "request started");
}

/// Logs the outcome of a request served since `started`.
pub fn finished(method: &Method, route: &str, status: StatusCode, started: Instant) {
    tracing::info!(
        %method,
        route,
        status = status.as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request"
    );
}
