//! What is done around every request, in one step: its id, which every log line of it carries
//! (`partner_billing::request_scope`), the access log, the metrics, the guard (before routing and
//! credentials), and the headers every answer carries (docs/operations.md, docs/security.md).
//!
//! One endpoint rather than a layer each: a layer's future holds the next layer's, so six of
//! them made every request's future 20 KiB, moved to the heap whole on every request.

use std::time::Instant;

use poem::http::{HeaderValue, StatusCode, header};
use poem::{Endpoint, IntoResponse, Request, Response};

use partner_billing::request_scope;
use partner_billing::store::Store;

use crate::headers::{self, Https};
use crate::metrics::{self, Metrics};
use crate::request_id;
use crate::{access_log, guard, path_text, route};

/// The app's routes, with what is done around each of their requests.
pub struct Around<E> {
    inner: E,
    metrics: Metrics,
    store: Store,
    /// The Content-Security-Policy of `/docs`.
    docs_csp: HeaderValue,
    /// Browsers reach the app over HTTPS.
    https: bool,
}

impl<E: Endpoint> Around<E> {
    pub fn new(
        inner: E,
        metrics: Metrics,
        store: Store,
        docs_csp: HeaderValue,
        https: bool,
    ) -> Self {
        Self {
            inner,
            metrics,
            store,
            docs_csp,
            https,
        }
    }

    /// The answer of the routes, or of the guard, with the headers of its path.
    async fn answer(&self, mut req: Request) -> Response {
        let uri = req.uri().clone();
        let mut response = match guard::check(&req) {
            Err(refusal) => refusal.into_response(),
            Ok(passed) => {
                if self.https {
                    req.extensions_mut().insert(Https);
                }
                // Before routing: a path segment that is not text reaches its handler as a
                // malformed value, not as poem's bare 400.
                path_text::text_segments(&mut req);
                let response = match self.inner.call(req).await {
                    Ok(response) => response.into_response(),
                    Err(err) => err.into_response(),
                };
                passed.finish(response, &self.store).await
            }
        };
        headers::add(
            response.headers_mut(),
            uri.path(),
            &self.docs_csp,
            self.https,
        );
        if response.status() == StatusCode::METHOD_NOT_ALLOWED
            && let Some(allow) =
                route::allowed_methods(uri.path()).and_then(|a| HeaderValue::from_str(a).ok())
        {
            // RFC 9110: a 405 names the methods the path has.
            response.headers_mut().insert(header::ALLOW, allow);
        }
        response
    }
}

impl<E: Endpoint> Endpoint for Around<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let id = request_id::of(&req);
        let method = req.method().clone();
        let route = route::template(req.uri().path());
        let response = request_scope::serve(id.clone(), async {
            let started = Instant::now();
            access_log::started(&method, route);
            let response = self.answer(req).await;
            access_log::finished(&method, route, response.status(), started);
            metrics::count(&self.metrics, &method, route, started, response).await
        })
        .await;
        Ok(request_id::finish(response, &id).await)
    }
}
