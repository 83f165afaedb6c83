//! Webhooks for resellers: manage endpoints and low-balance alerts through the panel, and
//! verify what the service sends ([`verify_webhook`]).

use std::time::{SystemTime, UNIX_EPOCH};

use partner_billing::webhook_signature::{self, DEFAULT_TOLERANCE_SECONDS};
use partner_billing::wire::{
    CreatedWebhookEndpoint, LowBalanceAlert, WebhookDeliveryList, WebhookEndpointList, WebhookEvent,
};
use reqwest::Method;
use reqwest::header::HeaderMap;

use crate::PanelClient;
use crate::error::Result;
use crate::http::Resend;

pub use partner_billing::webhook_signature::VerifyError as WebhookVerifyError;

impl PanelClient {
    /// `POST /v1/billing/resellers/me/webhook-endpoints`: registers an endpoint for the given
    /// event types. The result holds the signing secret, shown this once. At most five per
    /// account ([`crate::Error::WebhookEndpointLimitReached`]).
    ///
    /// This write has no idempotency key, so the SDK resends it only when the connection could
    /// not be opened.
    pub async fn create_webhook_endpoint(
        &self,
        url: &str,
        event_types: &[&str],
        description: Option<&str>,
    ) -> Result<CreatedWebhookEndpoint> {
        let mut body = serde_json::json!({ "url": url, "eventTypes": event_types });
        if let Some(description) = description {
            body["description"] = serde_json::Value::from(description);
        }
        let reply = self
            .send(
                Method::POST,
                &["webhook-endpoints"],
                Some(body.to_string().into_bytes()),
                Resend::OnlyIfUnsent,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// `GET /v1/billing/resellers/me/webhook-endpoints`: the account's endpoints (no secrets).
    pub async fn list_webhook_endpoints(&self) -> Result<WebhookEndpointList> {
        let reply = self
            .send(
                Method::GET,
                &["webhook-endpoints"],
                None,
                Resend::WhenRetryable,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// `DELETE /v1/billing/resellers/me/webhook-endpoints/{id}`: nothing more is sent to it.
    pub async fn delete_webhook_endpoint(&self, webhook_endpoint_id: &str) -> Result<()> {
        self.send(
            Method::DELETE,
            &["webhook-endpoints", webhook_endpoint_id],
            None,
            Resend::OnlyIfUnsent,
        )
        .await?;
        Ok(())
    }

    /// `POST /v1/billing/resellers/me/webhook-endpoints/{id}/test`: queues a `webhook.test`
    /// event for the endpoint.
    pub async fn test_webhook_endpoint(&self, webhook_endpoint_id: &str) -> Result<()> {
        self.send(
            Method::POST,
            &["webhook-endpoints", webhook_endpoint_id, "test"],
            None,
            Resend::OnlyIfUnsent,
        )
        .await?;
        Ok(())
    }

    /// `GET /v1/billing/resellers/me/webhook-endpoints/{id}/deliveries`: the last 100 attempts,
    /// newest first.
    pub async fn webhook_deliveries(
        &self,
        webhook_endpoint_id: &str,
    ) -> Result<WebhookDeliveryList> {
        let reply = self
            .send(
                Method::GET,
                &["webhook-endpoints", webhook_endpoint_id, "deliveries"],
                None,
                Resend::WhenRetryable,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// `PUT /v1/billing/resellers/me/alerts/{productSlug}`: a `balance.low` event when a charge
    /// takes the balance below `threshold` (0 turns the alert off).
    pub async fn set_low_balance_alert(
        &self,
        product_slug: &str,
        threshold: i64,
    ) -> Result<LowBalanceAlert> {
        let body = serde_json::json!({ "lowBalanceThreshold": threshold });
        let reply = self
            .send(
                Method::PUT,
                &["alerts", product_slug],
                Some(body.to_string().into_bytes()),
                Resend::WhenRetryable,
            )
            .await?;
        reply.json(&self.sensitive())
    }
}

/// Verifies a webhook request as received (its headers and raw body) against the endpoint's
/// signing secret (`whsec_…`): the `webhook-signature` must match and `webhook-timestamp` be
/// within five minutes of now. Returns the parsed event; dedupe on its `event_id`.
pub fn verify_webhook(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> std::result::Result<WebhookEvent, WebhookVerifyError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    verify_webhook_at(secret, headers, body, now, DEFAULT_TOLERANCE_SECONDS)
}

/// [`verify_webhook`] at a given time and tolerance (seconds either way).
pub fn verify_webhook_at(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now_utc: i64,
    tolerance_seconds: i64,
) -> std::result::Result<WebhookEvent, WebhookVerifyError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    webhook_signature::verify(
        secret,
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        body,
        now_utc,
        tolerance_seconds,
    )?;
    serde_json::from_slice(body).map_err(|_| WebhookVerifyError::SignatureMismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", id.parse().unwrap());
        headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
        headers.insert("webhook-signature", signature.parse().unwrap());
        headers
    }

    #[test]
    fn verifies_and_refuses() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let key = webhook_signature::secret_bytes(secret).unwrap();
        let body = br#"{"eventId":"evt_1","type":"webhook.test","createdUtc":1,"data":{}}"#;
        let signature = webhook_signature::sign(&key, "evt_1", 1000, body);
        let event = verify_webhook_at(secret, &headers("evt_1", 1000, &signature), body, 1100, 300)
            .unwrap();
        assert_eq!(event.event_type, "webhook.test");
        assert_eq!(
            verify_webhook_at(secret, &headers("evt_2", 1000, &signature), body, 1100, 300),
            Err(WebhookVerifyError::SignatureMismatch)
        );
        assert_eq!(
            verify_webhook_at(secret, &headers("evt_1", 1000, &signature), body, 2000, 300),
            Err(WebhookVerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify_webhook_at(secret, &HeaderMap::new(), body, 1000, 300),
            Err(WebhookVerifyError::MissingHeader)
        );
        let other = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(
            verify_webhook_at(other, &headers("evt_1", 1000, &signature), body, 1000, 300),
            Err(WebhookVerifyError::SignatureMismatch)
        );
    }
}
