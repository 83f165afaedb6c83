//! Webhook endpoints, their deliveries, low-balance alerts, and the event body (docs/webhooks.md).

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// Every event type an endpoint can subscribe to.
pub const WEBHOOK_EVENT_TYPES: [&str; 13] = [
    "balance.low",
    "balance.credited",
    "license.issued",
    "license.revoked",
    "promo_batch.generated",
    "promo_code.redeemed",
    "promo_batch.voided",
    "api_key.created",
    "api_key.revoked",
    "api_key.expired",
    "account.suspended",
    "account.reinstated",
    "webhook.test",
];

/// `POST /v1/billing/resellers/me/webhook-endpoints`: where to send which events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct CreateWebhookEndpointRequest {
    /// `https://` URL on a public address (at most 2048 characters). Redirects are not
    /// followed.
    pub url: String,
    /// The event types to send, e.g. `["license.issued", "balance.low"]` (at least one).
    pub event_types: Vec<String>,
    /// A label for the endpoint (at most 256 characters, no control characters).
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))
    )]
    #[serde(default)]
    pub description: Option<String>,
}

/// A webhook endpoint as listed (never with its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct WebhookEndpoint {
    /// Identifies the endpoint (`rwe_…`).
    pub webhook_endpoint_id: String,
    pub url: String,
    pub event_types: Vec<String>,
    pub description: Option<String>,
    /// `enabled`, or `disabled` after the receiver answered `410 Gone`.
    pub status: String,
    pub created_utc: i64,
}

/// The endpoint just created, with its signing secret: shown here once and never again.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct CreatedWebhookEndpoint {
    pub webhook_endpoint_id: String,
    pub url: String,
    pub event_types: Vec<String>,
    pub description: Option<String>,
    pub status: String,
    /// The signing secret (`whsec_` + base64 of 24 random bytes), for verifying the
    /// `webhook-signature` header. Shown once.
    pub secret: String,
    pub created_utc: i64,
}

redacted_debug!(CreatedWebhookEndpoint {
    webhook_endpoint_id, url, event_types, description, status, created_utc;
    redacted: secret
});

/// The account's webhook endpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct WebhookEndpointList {
    pub webhook_endpoints: Vec<WebhookEndpoint>,
}

/// One delivery attempt of one event to the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct WebhookDelivery {
    /// The event (`evt_…`), also sent as the `webhook-id` header.
    pub event_id: String,
    pub event_type: String,
    /// 1 for the first attempt, then one more per retry.
    pub attempt: i64,
    /// The receiver's HTTP status; `null` when no answer came (refused, timed out).
    pub status_code: Option<i64>,
    /// Why the attempt failed without an HTTP status, or `null`.
    pub error: Option<String>,
    pub attempted_utc: i64,
    /// When the next attempt is due; `null` once delivered or given up.
    pub next_attempt_utc: Option<i64>,
}

/// The last 100 attempts to an endpoint, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct WebhookDeliveryList {
    pub deliveries: Vec<WebhookDelivery>,
}

/// `PUT /v1/billing/resellers/me/alerts/{productSlug}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct SetLowBalanceAlertRequest {
    /// A `balance.low` event is sent when a charge takes the balance from at least this value
    /// to below it. 0 turns the alert off.
    pub low_balance_threshold: i64,
}

/// A product's low-balance alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct LowBalanceAlert {
    pub product_slug: String,
    pub low_balance_threshold: i64,
}

/// The body of every webhook request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEvent {
    /// `evt_…`; the same on every retry (the `webhook-id` header). Receivers dedupe on it.
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_utc: i64,
    pub data: serde_json::Value,
}
