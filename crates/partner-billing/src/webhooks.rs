//! Webhook endpoints and low-balance alerts (DESIGN §16): registration, listing, deletion,
//! test events, the deliveries list, and the settings the worker runs by.
//!
//! Events are recorded by [`crate::events`]; the outbox is leased and settled through
//! [`outbox`]; the one URL rule for registration and delivery is [`ssrf`].

use std::time::Duration;

use base64::Engine;
use rand::RngCore;
use rand::rngs::OsRng;
use sqlx::Row;

use crate::domain::{InvalidField, PlanSlug, random_base62};
use crate::error::{Error, Result};
use crate::events::{EventData, insert_event};
use crate::plans::find_plan;
use crate::store::{Backend, Store};
use crate::webhook_signature::SECRET_PREFIX;
use crate::wire::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, LowBalanceAlert, WEBHOOK_EVENT_TYPES,
    WebhookDelivery, WebhookDeliveryList, WebhookEndpoint, WebhookEndpointList,
};

pub mod outbox;
pub mod ssrf;

/// At most this many endpoints per account.
pub const MAX_ENDPOINTS: i64 = crate::limits::MAX_WEBHOOK_ENDPOINTS as i64;

/// The deliveries list shows this many attempts.
pub const DELIVERIES_SHOWN: i64 = crate::limits::WEBHOOK_DELIVERIES_LISTED as i64;

/// The default retry schedule (`--webhook-backoff`).
pub const DEFAULT_BACKOFF: &str = "5s,5m,30m,2h,5h,10h,10h";

/// How deliveries are retried and where they may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Delays between attempts: one attempt, then one after each delay, then failed.
    pub backoff: Vec<Duration>,
    /// `--webhook-allow-insecure`: `http://` and loopback addresses allowed too.
    pub allow_insecure: bool,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            backoff: parse_backoff(DEFAULT_BACKOFF).expect("the default schedule parses"),
            allow_insecure: false,
        }
    }
}

/// Parses a schedule such as `5s,5m,30m,2h` (units `s`, `m`, `h`, `d`).
pub fn parse_backoff(text: &str) -> std::result::Result<Vec<Duration>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let split = item
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| format!("`{item}` needs a unit (s, m, h or d)"))?;
            let (number, unit) = item.split_at(split);
            let number: u64 = number
                .parse()
                .map_err(|_| format!("`{item}` is not a duration"))?;
            let seconds = match unit {
                "s" => number,
                "m" => number * 60,
                "h" => number * 3600,
                "d" => number * 86_400,
                _ => return Err(format!("`{item}` has an unknown unit (s, m, h or d)")),
            };
            Ok(Duration::from_secs(seconds))
        })
        .collect()
}

fn validation(field: &'static str, message: impl Into<String>) -> Error {
    InvalidField::new(field, message).into()
}

/// The event types of a request: at least one, each known, no duplicates kept.
fn parse_event_types(types: &[String]) -> Result<Vec<String>> {
    if types.is_empty() {
        return Err(validation(
            "eventTypes",
            "must name at least one event type",
        ));
    }
    let mut parsed: Vec<String> = Vec::new();
    for t in types {
        if !WEBHOOK_EVENT_TYPES.contains(&t.as_str()) {
            return Err(validation(
                "eventTypes",
                format!("must be among {}", WEBHOOK_EVENT_TYPES.join(", ")),
            ));
        }
        if !parsed.contains(t) {
            parsed.push(t.clone());
        }
    }
    Ok(parsed)
}

fn parse_description(description: Option<&str>) -> Result<Option<String>> {
    match description {
        None => Ok(None),
        Some(d)
            if d.chars().count() > crate::limits::WEBHOOK_DESCRIPTION_MAX_CHARS
                || d.chars().any(char::is_control) =>
        {
            Err(validation(
                "description",
                "must be at most 256 characters without control characters",
            ))
        }
        Some(d) => Ok(Some(d.to_owned())),
    }
}

/// The AEAD context that binds a sealed secret to its endpoint.
fn secret_context(endpoint_id: &str) -> Vec<u8> {
    format!("webhook-secret:{endpoint_id}").into_bytes()
}

/// Registers an endpoint. The URL must pass [`ssrf::check_url`] (400, field `url`); at most
/// [`MAX_ENDPOINTS`] per account (checked under the account's lock). The signing secret is in
/// the result and, sealed under the master key, in the database; nowhere else.
pub async fn create_endpoint(
    store: &Store,
    account_id: i64,
    request: &CreateWebhookEndpointRequest,
) -> Result<CreatedWebhookEndpoint> {
    if request.url.chars().count() > crate::limits::WEBHOOK_URL_MAX_CHARS {
        return Err(validation("url", "must be at most 2048 characters"));
    }
    let event_types = parse_event_types(&request.event_types)?;
    let description = parse_description(request.description.as_deref())?;
    ssrf::check_url(&request.url, store.webhook_settings().allow_insecure)
        .await
        .map_err(|refused| validation("url", refused.to_string()))?;
    let mut key = [0u8; 24];
    OsRng.fill_bytes(&mut key);
    let secret = format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let endpoint_id = format!("rwe_{}", random_base62(crate::limits::ID_RANDOM_CHARS));
    let sealed = store
        .master_key()?
        .seal(&key, &secret_context(&endpoint_id))
        .map_err(|_| Error::Internal("could not seal the webhook secret".to_owned()))?;
    let now = store.now_utc();

    let mut tx = store.begin_write().await?;
    if store.backend() == Backend::Postgres {
        sqlx::query("SELECT id FROM accounts WHERE id = $1 FOR UPDATE")
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
    }
    let existing: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM webhook_endpoints WHERE account_id = $1 AND status <> 'deleted'",
    )
    .bind(account_id)
    .fetch_one(&mut *tx)
    .await?;
    if existing >= MAX_ENDPOINTS {
        return Err(Error::WebhookEndpointLimitReached);
    }
    sqlx::query(
        "INSERT INTO webhook_endpoints (endpoint_id, account_id, url, event_types, description, status, sealed_secret, created_utc) \
         VALUES ($1, $2, $3, $4, $5, 'enabled', $6, $7)",
    )
    .bind(endpoint_id.as_str())
    .bind(account_id)
    .bind(request.url.as_str())
    .bind(event_types.join(","))
    .bind(description.as_deref())
    .bind(hex::encode(sealed))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(webhook_endpoint_id = %endpoint_id, "webhook endpoint created");
    Ok(CreatedWebhookEndpoint {
        webhook_endpoint_id: endpoint_id,
        url: request.url.clone(),
        event_types,
        description,
        status: "enabled".to_owned(),
        secret,
        created_utc: now,
    })
}

/// The account's endpoints (deleted ones aside), oldest first, without secrets.
pub async fn list_endpoints(store: &Store, account_id: i64) -> Result<WebhookEndpointList> {
    let rows = sqlx::query(
        "SELECT endpoint_id, url, event_types, description, status, created_utc FROM webhook_endpoints \
         WHERE account_id = $1 AND status <> 'deleted' ORDER BY created_utc, id",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?;
    let webhook_endpoints = rows
        .iter()
        .map(|row| {
            let types: String = row.try_get("event_types")?;
            Ok(WebhookEndpoint {
                webhook_endpoint_id: row.try_get("endpoint_id")?,
                url: row.try_get("url")?,
                event_types: types.split(',').map(str::to_owned).collect(),
                description: row.try_get("description")?,
                status: row.try_get("status")?,
                created_utc: row.try_get("created_utc")?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(WebhookEndpointList { webhook_endpoints })
}

/// The row id of an endpoint of this account; unknown, deleted or another account's is
/// [`Error::WebhookEndpointNotFound`].
async fn endpoint_row(
    conn: &mut sqlx::AnyConnection,
    account_id: i64,
    endpoint_id: &str,
) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT id FROM webhook_endpoints WHERE endpoint_id = $1 AND account_id = $2 AND status <> 'deleted'",
    )
    .bind(endpoint_id)
    .bind(account_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::WebhookEndpointNotFound)
}

/// Deletes an endpoint: it is no longer listed and nothing more is sent to it.
pub async fn delete_endpoint(store: &Store, account_id: i64, endpoint_id: &str) -> Result<()> {
    let result = sqlx::query(
        "UPDATE webhook_endpoints SET status = 'deleted' \
         WHERE endpoint_id = $1 AND account_id = $2 AND status <> 'deleted'",
    )
    .bind(endpoint_id)
    .bind(account_id)
    .execute(store.pool())
    .await?;
    if result.rows_affected() == 0 {
        return Err(Error::WebhookEndpointNotFound);
    }
    tracing::info!(webhook_endpoint_id = %endpoint_id, "webhook endpoint deleted");
    Ok(())
}

/// Queues a `webhook.test` event for this one endpoint, whatever types it subscribes to.
pub async fn send_test_event(store: &Store, account_id: i64, endpoint_id: &str) -> Result<()> {
    let mut tx = store.begin_write().await?;
    let row = endpoint_row(&mut tx, account_id, endpoint_id).await?;
    insert_event(store, &mut tx, account_id, &EventData::WebhookTest, &[row]).await?;
    tx.commit().await?;
    Ok(())
}

/// The last [`DELIVERIES_SHOWN`] attempts to an endpoint, newest first.
pub async fn list_deliveries(
    store: &Store,
    account_id: i64,
    endpoint_id: &str,
) -> Result<WebhookDeliveryList> {
    let mut conn = store.pool().acquire().await?;
    let row = endpoint_row(&mut conn, account_id, endpoint_id).await?;
    let rows = sqlx::query(
        "SELECT ev.event_id, ev.event_type, a.attempt, a.status_code, a.error, a.attempted_utc, a.next_attempt_utc \
         FROM webhook_attempts a JOIN webhook_messages m ON m.id = a.message_row_id \
         JOIN webhook_events ev ON ev.id = m.event_row_id \
         WHERE a.endpoint_row_id = $1 ORDER BY a.id DESC LIMIT $2",
    )
    .bind(row)
    .bind(DELIVERIES_SHOWN)
    .fetch_all(&mut *conn)
    .await?;
    let deliveries = rows
        .iter()
        .map(|row| {
            Ok(WebhookDelivery {
                event_id: row.try_get("event_id")?,
                event_type: row.try_get("event_type")?,
                attempt: row.try_get("attempt")?,
                status_code: row.try_get("status_code")?,
                error: row.try_get("error")?,
                attempted_utc: row.try_get("attempted_utc")?,
                next_attempt_utc: row.try_get("next_attempt_utc")?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(WebhookDeliveryList { deliveries })
}

/// The account's low-balance thresholds that were ever set (0 = off), by product slug.
pub async fn low_balance_alerts(store: &Store, account_id: i64) -> Result<Vec<LowBalanceAlert>> {
    let rows = sqlx::query(
        "SELECT p.slug, a.low_balance_threshold FROM balance_alerts a JOIN plans p ON p.id = a.plan_id \
         WHERE a.account_id = $1 ORDER BY p.slug",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(LowBalanceAlert {
                product_slug: row.try_get("slug")?,
                low_balance_threshold: row.try_get("low_balance_threshold")?,
            })
        })
        .collect()
}

/// Sets a product's low-balance threshold (0 turns it off). An unknown plan is
/// [`Error::UnknownPlan`].
pub async fn set_low_balance_alert(
    store: &Store,
    account_id: i64,
    product_slug: &str,
    threshold: i64,
) -> Result<LowBalanceAlert> {
    let plan = PlanSlug::parse("productSlug", product_slug)?;
    if !(0..=crate::limits::LOW_BALANCE_THRESHOLD_MAX).contains(&threshold) {
        return Err(validation(
            "lowBalanceThreshold",
            "must be between 0 and 1000000000",
        ));
    }
    let mut tx = store.begin_write().await?;
    let plan_row = find_plan(&mut tx, &plan).await?;
    sqlx::query(
        "INSERT INTO balance_alerts (account_id, plan_id, low_balance_threshold) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id, plan_id) DO UPDATE SET low_balance_threshold = excluded.low_balance_threshold",
    )
    .bind(account_id)
    .bind(plan_row.id)
    .bind(threshold)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(LowBalanceAlert {
        product_slug: plan.to_string(),
        low_balance_threshold: threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_schedules_parse() {
        assert_eq!(
            parse_backoff("5s,5m, 2h,1d").unwrap(),
            [5, 300, 7200, 86_400].map(Duration::from_secs)
        );
        assert_eq!(WebhookSettings::default().backoff.len(), 7);
        for bad in ["", "5", "s", "5x", "5s,,5s", "-1s"] {
            assert!(parse_backoff(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn event_types_are_checked_and_deduplicated() {
        let types = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            parse_event_types(&types(&["balance.low", "balance.low", "webhook.test"])).unwrap(),
            types(&["balance.low", "webhook.test"])
        );
        assert!(parse_event_types(&[]).is_err());
        assert!(parse_event_types(&types(&["balance.*"])).is_err());
    }
}
