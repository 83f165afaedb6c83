//! Prometheus metrics: one registry per app instance (no global), the middleware that counts
//! every request by its route template, and the `/metrics` endpoint served on its own listener
//! (`--metrics-listen`), never on the API's.
//!
//! Labels hold route templates, methods, statuses and small fixed sets of outcomes: never a
//! client id, a login, a key or a raw path.

use std::sync::Arc;
use std::time::Instant;

use poem::http::Method;
use poem::{Endpoint, EndpointExt, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use partner_billing::store::Store;

use crate::route;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

/// What a quota charge was for, as the ledger names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeKind {
    License,
    PromoBatch,
}

/// How one webhook delivery attempt ended (for the webhook worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// A 2xx answer.
    Delivered,
    /// Any other answer or a transport error; another attempt is scheduled.
    Retrying,
    /// The last attempt of the schedule failed.
    Failed,
    /// `410 Gone`: the endpoint was disabled.
    Disabled,
}

/// How a sign-in attempt ended, for `partner_billing_panel_logins_total`.
pub fn login_outcome<T>(result: &partner_billing::Result<T>) -> LoginOutcome {
    match result {
        Ok(_) => LoginOutcome::Success,
        Err(partner_billing::Error::RateLimited { .. }) => LoginOutcome::RateLimited,
        Err(_) => LoginOutcome::Failure,
    }
}

/// How one panel sign-in ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginOutcome {
    Success,
    Failure,
    RateLimited,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram>,
    units_charged: Family<KindLabel, Counter>,
    license_group_size: Histogram,
    pool_connections: Family<StateLabel, Gauge>,
    webhook_deliveries: Family<OutcomeLabel, Counter>,
    webhook_outbox_pending: Gauge,
    panel_logins: Family<OutcomeLabel, Counter>,
    audit_entries: Family<ActionLabel, Counter>,
}

/// The metrics of one app instance. Cheap to clone; clones share the registry. The webhook
/// worker and the panel call [`record_webhook_delivery`](Self::record_webhook_delivery),
/// [`set_webhook_outbox_pending`](Self::set_webhook_outbox_pending) and
/// [`record_panel_login`](Self::record_panel_login); requests and charges are counted by the
/// middleware of this module.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric docs/operations.md lists registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_server_requests",
            "HTTP requests answered, by method, route template and status",
            requests.clone(),
        );
        let durations = Family::<RouteLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.001, 2.0, 15))) as fn() -> Histogram,
        );
        registry.register(
            "http_server_request_duration_seconds",
            "Time from request to response head, by method and route template",
            durations.clone(),
        );
        let units_charged = Family::<KindLabel, Counter>::default();
        registry.register(
            "partner_billing_units_charged",
            "Quota units charged, by kind (license, promo_batch); replays charge nothing",
            units_charged.clone(),
        );
        let license_group_size = Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]);
        registry.register(
            "partner_billing_license_group_size",
            "License requests committed together in one group transaction",
            license_group_size.clone(),
        );
        let pool_connections = Family::<StateLabel, Gauge>::default();
        registry.register(
            "partner_billing_db_pool_connections",
            "Database pool connections, by state (idle, in_use, max)",
            pool_connections.clone(),
        );
        let webhook_deliveries = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "partner_billing_webhook_deliveries",
            "Webhook delivery attempts, by outcome (delivered, retrying, failed, disabled)",
            webhook_deliveries.clone(),
        );
        let webhook_outbox_pending = Gauge::default();
        registry.register(
            "partner_billing_webhook_outbox_pending",
            "Webhook deliveries waiting to be sent",
            webhook_outbox_pending.clone(),
        );
        let panel_logins = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "partner_billing_panel_logins",
            "Panel sign-ins, by outcome (success, failure, rate_limited)",
            panel_logins.clone(),
        );
        let audit_entries = Family::<ActionLabel, Counter>::default();
        registry.register(
            "partner_billing_audit_entries",
            "Audit trail entries written by this process, by action (api_key.revoked, …)",
            audit_entries.clone(),
        );
        // A gauge set to 1 rather than OpenMetrics' `info` type: `promtool check metrics`
        // rejects `info`.
        let build_info = Family::<VersionLabel, Gauge>::default();
        registry.register(
            "partner_billing_build_info",
            "Always 1; the label names the running version",
            build_info.clone(),
        );
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        Self {
            inner: Arc::new(Inner {
                registry,
                requests,
                durations,
                units_charged,
                license_group_size,
                pool_connections,
                webhook_deliveries,
                webhook_outbox_pending,
                panel_logins,
                audit_entries,
            }),
        }
    }

    /// Counts one answered request.
    fn record_request(&self, method: &str, route: &'static str, status: u16, seconds: f64) {
        let inner = &self.inner;
        inner
            .requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                route,
                status,
            })
            .inc();
        inner
            .durations
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route,
            })
            .observe(seconds);
    }

    /// Counts one committed audit trail entry (a fixed set of action names: no id in a label).
    pub fn record_audit_entry(&self, action: &'static str) {
        self.inner
            .audit_entries
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    /// Counts quota units charged.
    pub fn record_units_charged(&self, kind: ChargeKind, units: u64) {
        let kind = match kind {
            ChargeKind::License => "license",
            ChargeKind::PromoBatch => "promo_batch",
        };
        self.inner
            .units_charged
            .get_or_create(&KindLabel { kind })
            .inc_by(units);
    }

    /// Records the size of one committed license group transaction.
    pub fn observe_license_group_size(&self, size: usize) {
        self.inner.license_group_size.observe(size as f64);
    }

    /// Counts one webhook delivery attempt.
    pub fn record_webhook_delivery(&self, outcome: DeliveryOutcome) {
        let outcome = match outcome {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retrying => "retrying",
            DeliveryOutcome::Failed => "failed",
            DeliveryOutcome::Disabled => "disabled",
        };
        self.inner
            .webhook_deliveries
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Sets the number of webhook deliveries waiting.
    pub fn set_webhook_outbox_pending(&self, pending: i64) {
        self.inner.webhook_outbox_pending.set(pending);
    }

    /// Counts one panel sign-in.
    pub fn record_panel_login(&self, outcome: LoginOutcome) {
        let outcome = match outcome {
            LoginOutcome::Success => "success",
            LoginOutcome::Failure => "failure",
            LoginOutcome::RateLimited => "rate_limited",
        };
        self.inner
            .panel_logins
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// The registry in the Prometheus text format, with the pool's state read now.
    pub fn render(&self, store: &Store) -> String {
        let pool = store.pool();
        let size = i64::from(pool.size());
        let idle = i64::try_from(pool.num_idle()).unwrap_or(i64::MAX);
        let max = i64::from(pool.options().get_max_connections());
        let gauges = &self.inner.pool_connections;
        gauges
            .get_or_create(&StateLabel { state: "idle" })
            .set(idle);
        gauges
            .get_or_create(&StateLabel { state: "in_use" })
            .set((size - idle).max(0));
        gauges.get_or_create(&StateLabel { state: "max" }).set(max);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.inner.registry)
            .expect("writing to a String cannot fail");
        to_prometheus_text(&text)
    }
}

/// Turns the OpenMetrics text of `prometheus-client` into the classic Prometheus text format
/// (version 0.0.4) that `promtool check metrics` and every scraper read: a counter's `HELP`
/// and `TYPE` name its `_total` samples, and the `# EOF` / `# UNIT` lines go.
fn to_prometheus_text(open_metrics: &str) -> String {
    let counters: Vec<&str> = open_metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(open_metrics.len() + 16 * counters.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| line.strip_prefix(prefix).map(|rest| (prefix, rest)));
        match descriptor {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(&name) {
                    "_total"
                } else {
                    ""
                };
                text.push_str(&format!("{prefix}{name}{suffix} {tail}\n"));
            }
            None => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// A method as a label: one of HTTP's own, else `other`. A client may send any token as its
/// method; as a label each would make new series without bound (and could carry an id).
fn method_label(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}

/// Counts an answered request by method, route template and status, times it from `started`,
/// and counts the units a fresh license or promo batch charged (a replay, marked
/// `Idempotent-Replayed`, charged nothing). Handlers never touch a counter.
pub async fn count(
    metrics: &Metrics,
    method: &Method,
    route: &'static str,
    started: Instant,
    response: Response,
) -> Response {
    let status = response.status().as_u16();
    metrics.record_request(
        method_label(method),
        route,
        status,
        started.elapsed().as_secs_f64(),
    );
    let fresh =
        status == 200 && method == Method::POST && !response.headers().contains_key(REPLAYED);
    match route {
        route::LICENSES if fresh => {
            metrics.record_units_charged(ChargeKind::License, 1);
            response
        }
        route::PROMO_BATCHES if fresh => count_promo_codes(metrics, response).await,
        _ => response,
    }
}

const REPLAYED: &str = "idempotent-replayed";

/// Counts the codes of a fresh batch answer (one unit each) and passes the answer on.
async fn count_promo_codes(metrics: &Metrics, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = match body.into_bytes().await {
        Ok(bytes) => bytes,
        Err(_) => return Response::from_parts(parts, poem::Body::empty()),
    };
    let codes = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("codes").and_then(|c| c.as_array()).map(Vec::len))
        .unwrap_or(0);
    metrics.record_units_charged(ChargeKind::PromoBatch, codes as u64);
    Response::from_parts(parts, poem::Body::from(bytes))
}

/// The app of the metrics listener: `GET /metrics` and nothing else; every answer carries its
/// request id (`X-Request-Id`), as the API's do.
pub fn endpoint(metrics: Metrics, store: Store) -> impl Endpoint {
    let scrape = poem::Route::new().at(
        "/metrics",
        poem::get(poem::endpoint::make(move |_| {
            let (metrics, store) = (metrics.clone(), store.clone());
            async move {
                // The backlog is read at scrape time, so every replica reports the shared outbox.
                if let Ok(pending) = partner_billing::webhooks::outbox::pending_count(&store).await
                {
                    metrics.set_webhook_outbox_pending(pending);
                }
                Response::builder()
                    .content_type("text/plain; version=0.0.4; charset=utf-8")
                    .body(metrics.render(&store))
            }
        })),
    );
    scrape.around(|scrape, request| async move {
        let id = crate::request_id::of(&request);
        let response = scrape.get_response(request).await;
        Ok(crate::request_id::finish(response, &id).await)
    })
}
