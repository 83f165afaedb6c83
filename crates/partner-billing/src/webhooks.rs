//! Webhook endpoints and low-balance alerts (docs/webhooks.md): registration, listing, deletion,
//! test events, the deliveries list, and the settings the worker runs by.
//!
//! Events are recorded by [`crate::events`]; the outbox is leased and settled through
//! [`outbox`]; the one URL rule for registration and delivery is [`ssrf`].

use base64::Engine;
use rand::RngCore;
use rand::rngs::OsRng;

use crate::audit::{Action, Entry, Origin, url_for_trail};
use crate::db::dialect::{self, PerBackend};
use crate::domain::{InvalidField, PlanSlug, WebhookEndpointId};
use crate::error::{Error, Result};
use crate::events::{EventData, insert_event};
use crate::plans::find_plan;
use crate::store::Store;
use crate::webhook_signature::SECRET_PREFIX;
use crate::wire::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, LowBalanceAlert, WEBHOOK_EVENT_TYPES,
    WebhookDeliveryList, WebhookEndpoint, WebhookEndpointList,
};

pub mod outbox;
pub mod ssrf;

/// At most this many endpoints per account.
pub const MAX_ENDPOINTS: i64 = crate::limits::MAX_WEBHOOK_ENDPOINTS as i64;

/// The deliveries list shows this many attempts.
pub const DELIVERIES_SHOWN: i64 = crate::limits::WEBHOOK_DELIVERIES_LISTED as i64;

pub use crate::runtime::{DEFAULT_BACKOFF, WebhookSettings, parse_backoff};

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

/// The AEAD context that binds a sealed secret to its endpoint: the one definition, used where
/// a secret is sealed (here) and where it is opened (the outbox). Changing it would make every
/// stored secret unreadable.
pub(crate) fn secret_context(endpoint_id: &str) -> Vec<u8> {
    format!("webhook-secret:{endpoint_id}").into_bytes()
}

/// Registers an endpoint. The URL must pass [`ssrf::check_url`] (400, field `url`); at most
/// [`MAX_ENDPOINTS`] per account (checked under the account's lock). The signing secret is in
/// the result and, sealed under the master key, in the database; nowhere else.
pub async fn create_endpoint(
    store: &Store,
    account_id: i64,
    request: &CreateWebhookEndpointRequest,
    origin: &Origin,
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
    let endpoint_id = WebhookEndpointId::generate();
    let sealed = store
        .master_key()?
        .seal(&key, &secret_context(endpoint_id.as_str()))
        .map_err(|_| Error::Internal("could not seal the webhook secret".to_owned()))?;
    let now = store.now_utc();

    let mut tx = store.begin_write().await?;
    dialect::lock_account(store.backend(), &mut tx, account_id).await?;
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
    let written = Entry::new(Action::WebhookEndpointCreated, Some(account_id))
        .id("webhookEndpointId", endpoint_id.as_str())
        .text("url", Some(&url_for_trail(&request.url)))
        .value("eventTypes", event_types.clone())
        .text("description", description.as_deref())
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(webhook_endpoint_id = %endpoint_id, "webhook endpoint created");
    Ok(CreatedWebhookEndpoint {
        webhook_endpoint_id: endpoint_id.to_string(),
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
    let rows: Vec<EndpointRow> = sqlx::query_as(
        "SELECT endpoint_id, url, event_types, description, status, created_utc FROM webhook_endpoints \
         WHERE account_id = $1 AND status <> 'deleted' ORDER BY created_utc, id",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?;
    let webhook_endpoints = rows
        .into_iter()
        .map(|row| WebhookEndpoint {
            webhook_endpoint_id: row.endpoint_id,
            url: row.url,
            event_types: row.event_types.split(',').map(str::to_owned).collect(),
            description: row.description,
            status: row.status,
            created_utc: row.created_utc,
        })
        .collect();
    Ok(WebhookEndpointList { webhook_endpoints })
}

/// An endpoint as stored: its event types as one comma-separated column.
#[derive(sqlx::FromRow)]
struct EndpointRow {
    endpoint_id: String,
    url: String,
    event_types: String,
    description: Option<String>,
    status: String,
    created_utc: i64,
}

/// The row id of an endpoint of this account; unknown, deleted or another account's is
/// [`Error::WebhookEndpointNotFound`].
async fn endpoint_row(
    conn: &mut sqlx::AnyConnection,
    account_id: i64,
    endpoint_id: &str,
) -> Result<i64> {
    let endpoint_id = parse_endpoint_id(endpoint_id)?;
    sqlx::query_scalar(
        "SELECT id FROM webhook_endpoints WHERE endpoint_id = $1 AND account_id = $2 AND status <> 'deleted'",
    )
    .bind(endpoint_id.as_str())
    .bind(account_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::WebhookEndpointNotFound)
}

/// The endpoint a `webhookEndpointId` names; any other text, malformed or not, names none: it
/// is answered [`Error::WebhookEndpointNotFound`] like an unknown id, and never sent to the
/// database.
fn parse_endpoint_id(endpoint_id: &str) -> Result<WebhookEndpointId> {
    WebhookEndpointId::parse("webhookEndpointId", endpoint_id)
        .map_err(|_| Error::WebhookEndpointNotFound)
}

/// Deletes an endpoint: it is no longer listed and nothing more is sent to it.
pub async fn delete_endpoint(
    store: &Store,
    account_id: i64,
    endpoint_id: &str,
    origin: &Origin,
) -> Result<()> {
    let endpoint_id = parse_endpoint_id(endpoint_id)?;
    let mut tx = store.begin_write().await?;
    let deleted: Option<i64> = sqlx::query_scalar(
        "UPDATE webhook_endpoints SET status = 'deleted' \
         WHERE endpoint_id = $1 AND account_id = $2 AND status <> 'deleted' RETURNING id",
    )
    .bind(endpoint_id.as_str())
    .bind(account_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(endpoint_row_id) = deleted else {
        return Err(Error::WebhookEndpointNotFound);
    };
    outbox::drop_pending(&mut tx, endpoint_row_id).await?;
    let written = Entry::new(Action::WebhookEndpointDeleted, Some(account_id))
        .id("webhookEndpointId", endpoint_id.as_str())
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
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

/// An endpoint's last attempts, newest first by when each was made (an attempt is recorded when
/// it ends, so ids may be in another order), ordered by the endpoint first so that only its own
/// index serves them, whatever share of all attempts it holds (`dialect::owned_by`).
pub(crate) static DELIVERIES_SQL: PerBackend = PerBackend::new(|backend| {
    format!(
        "SELECT ev.event_id, ev.event_type, a.attempt, a.status_code, a.error, a.attempted_utc, \
         a.next_attempt_utc \
         FROM webhook_attempts a JOIN webhook_messages m ON m.id = a.message_row_id \
         JOIN webhook_events ev ON ev.id = m.event_row_id \
         WHERE {} ORDER BY a.endpoint_row_id DESC, a.attempted_utc DESC, a.id DESC LIMIT $2",
        dialect::owned_by(backend, "a.endpoint_row_id", "$1")
    )
});

/// The last [`DELIVERIES_SHOWN`] attempts to an endpoint, newest first.
pub async fn list_deliveries(
    store: &Store,
    account_id: i64,
    endpoint_id: &str,
) -> Result<WebhookDeliveryList> {
    let row = endpoint_row(&mut *store.pool().acquire().await?, account_id, endpoint_id).await?;
    let deliveries = store
        .db()
        .page(
            sqlx::query_as(DELIVERIES_SQL.get(store.backend()))
                .bind(row)
                .bind(DELIVERIES_SHOWN),
        )
        .await?;
    Ok(WebhookDeliveryList { deliveries })
}

/// The account's low-balance thresholds that were ever set (0 = off), by product slug.
pub async fn low_balance_alerts(store: &Store, account_id: i64) -> Result<Vec<LowBalanceAlert>> {
    Ok(sqlx::query_as(
        "SELECT p.slug AS product_slug, a.low_balance_threshold \
         FROM balance_alerts a JOIN plans p ON p.id = a.plan_id \
         WHERE a.account_id = $1 ORDER BY p.slug",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?)
}

/// Sets a product's low-balance threshold (0 turns it off). An unknown plan is
/// [`Error::UnknownPlan`]. Only a change is written and recorded (`alert.set`): the value it
/// already has (an alert never set is off) changes nothing.
pub async fn set_low_balance_alert(
    store: &Store,
    account_id: i64,
    product_slug: &str,
    threshold: i64,
    origin: &Origin,
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
    // One conditional statement, so that concurrent requests setting the same value make one
    // change between them. Off needs no row: only an alert that is on is turned off.
    let statement = if threshold == 0 {
        "UPDATE balance_alerts SET low_balance_threshold = $3 \
         WHERE account_id = $1 AND plan_id = $2 AND low_balance_threshold <> $3"
    } else {
        "INSERT INTO balance_alerts (account_id, plan_id, low_balance_threshold) VALUES ($1, $2, $3) \
         ON CONFLICT (account_id, plan_id) DO UPDATE SET low_balance_threshold = excluded.low_balance_threshold \
         WHERE balance_alerts.low_balance_threshold <> excluded.low_balance_threshold"
    };
    let changed = sqlx::query(statement)
        .bind(account_id)
        .bind(plan_row.id)
        .bind(threshold)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        > 0;
    if changed {
        let written = Entry::new(Action::AlertSet, Some(account_id))
            .id("productSlug", plan.to_string())
            .value("lowBalanceThreshold", threshold)
            .write(store, &mut tx, origin)
            .await?;
        tx.commit().await?;
        written.committed(store);
    } else {
        tx.rollback().await?;
    }
    Ok(LowBalanceAlert {
        product_slug: plan.to_string(),
        low_balance_threshold: threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_secret_context_is_the_one_stored_secrets_were_sealed_with() {
        // Secrets already in databases were sealed with exactly these bytes.
        assert_eq!(secret_context("rwe_abc"), b"webhook-secret:rwe_abc");
        let key = crate::crypto::MasterKey::generate();
        let sealed = key
            .seal(b"signing key", &secret_context("rwe_abc"))
            .unwrap();
        assert!(key.open(&sealed, &secret_context("rwe_abd")).is_err());
        assert_eq!(
            key.open(&sealed, &secret_context("rwe_abc")).unwrap(),
            b"signing key"
        );
    }
}
