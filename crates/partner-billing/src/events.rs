//! Events for webhooks: recorded in the caller's transaction (a transactional outbox), so an
//! event commits exactly when its cause does; a refused or rolled-back request leaves none.
//!
//! [`record`] writes the event and one outbox message per enabled endpoint of the account
//! subscribed to its type, and nothing at all when none is. The server's worker delivers them
//! (`partner_billing::webhooks::outbox`).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::db::Tx;
use crate::domain::{PlanId, random_base62};
use crate::error::Result;
use crate::store::Store;
use crate::wire::WebhookEvent;

/// What happened, with the `data` member of its event (docs/webhooks.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventData {
    BalanceLow {
        product_slug: String,
        remaining_balance: i64,
        threshold: i64,
    },
    BalanceCredited {
        product_slug: String,
        units: i64,
        remaining_balance: i64,
        reason: String,
    },
    LicenseIssued {
        license_id: String,
        product_slug: String,
        login: String,
        remaining_balance: i64,
    },
    LicenseRevoked {
        license_id: String,
        product_slug: String,
        login: String,
        revoked_utc: i64,
    },
    PromoBatchGenerated {
        order_public_id: String,
        batch_id: String,
        product_slug: String,
        count: i64,
        remaining_balance: i64,
    },
    PromoCodeRedeemed {
        batch_id: String,
        product_slug: String,
        login: String,
        license_id: String,
    },
    /// A reseller voided a whole promo batch: none of its codes redeems any more.
    PromoBatchVoided {
        batch_id: String,
        order_public_id: String,
        product_slug: String,
        voided_utc: i64,
    },
    ApiKeyCreated {
        api_key_id: String,
        name: Option<String>,
    },
    ApiKeyRevoked {
        api_key_id: String,
        name: Option<String>,
    },
    /// For the key roll's grace period: record it in the transaction that marks the key
    /// expired (`events::record(store, tx, account_id, EventData::ApiKeyExpired { .. })`).
    ApiKeyExpired {
        api_key_id: String,
        name: Option<String>,
    },
    AccountSuspended {
        client_id: String,
    },
    AccountReinstated {
        client_id: String,
    },
    WebhookTest,
}

impl EventData {
    /// The event's `type`.
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::BalanceLow { .. } => "balance.low",
            Self::BalanceCredited { .. } => "balance.credited",
            Self::LicenseIssued { .. } => "license.issued",
            Self::LicenseRevoked { .. } => "license.revoked",
            Self::PromoBatchGenerated { .. } => "promo_batch.generated",
            Self::PromoCodeRedeemed { .. } => "promo_code.redeemed",
            Self::PromoBatchVoided { .. } => "promo_batch.voided",
            Self::ApiKeyCreated { .. } => "api_key.created",
            Self::ApiKeyRevoked { .. } => "api_key.revoked",
            Self::ApiKeyExpired { .. } => "api_key.expired",
            Self::AccountSuspended { .. } => "account.suspended",
            Self::AccountReinstated { .. } => "account.reinstated",
            Self::WebhookTest => "webhook.test",
        }
    }

    /// The event's `data` member.
    pub fn data(&self) -> Value {
        match self {
            Self::BalanceLow {
                product_slug,
                remaining_balance,
                threshold,
            } => json!({
                "productSlug": product_slug,
                "remainingBalance": remaining_balance,
                "threshold": threshold,
            }),
            Self::BalanceCredited {
                product_slug,
                units,
                remaining_balance,
                reason,
            } => json!({
                "productSlug": product_slug,
                "units": units,
                "remainingBalance": remaining_balance,
                "reason": reason,
            }),
            Self::LicenseIssued {
                license_id,
                product_slug,
                login,
                remaining_balance,
            } => json!({
                "licenseId": license_id,
                "productSlug": product_slug,
                "login": login,
                "remainingBalance": remaining_balance,
            }),
            Self::LicenseRevoked {
                license_id,
                product_slug,
                login,
                revoked_utc,
            } => json!({
                "licenseId": license_id,
                "productSlug": product_slug,
                "login": login,
                "revokedUtc": revoked_utc,
            }),
            Self::PromoBatchVoided {
                batch_id,
                order_public_id,
                product_slug,
                voided_utc,
            } => json!({
                "batchId": batch_id,
                "orderPublicId": order_public_id,
                "productSlug": product_slug,
                "voidedUtc": voided_utc,
            }),
            Self::PromoBatchGenerated {
                order_public_id,
                batch_id,
                product_slug,
                count,
                remaining_balance,
            } => json!({
                "orderPublicId": order_public_id,
                "batchId": batch_id,
                "productSlug": product_slug,
                "count": count,
                "remainingBalance": remaining_balance,
            }),
            Self::PromoCodeRedeemed {
                batch_id,
                product_slug,
                login,
                license_id,
            } => json!({
                "batchId": batch_id,
                "productSlug": product_slug,
                "login": login,
                "licenseId": license_id,
            }),
            Self::ApiKeyCreated { api_key_id, name }
            | Self::ApiKeyRevoked { api_key_id, name }
            | Self::ApiKeyExpired { api_key_id, name } => {
                json!({ "apiKeyId": api_key_id, "name": name })
            }
            Self::AccountSuspended { client_id } | Self::AccountReinstated { client_id } => {
                json!({ "clientId": client_id })
            }
            Self::WebhookTest => json!({}),
        }
    }
}

/// The enabled endpoints of one account and the types each subscribes to, read once in a
/// transaction that may record several events.
#[derive(Debug, Clone)]
pub struct Subscribers {
    account_id: i64,
    endpoints: Vec<(i64, Vec<String>)>,
}

impl Subscribers {
    /// The account's enabled endpoints (one indexed read; at most five rows).
    pub async fn load(tx: &mut Tx, account_id: i64) -> Result<Self> {
        #[derive(sqlx::FromRow)]
        struct Endpoint {
            id: i64,
            event_types: String,
        }
        let rows: Vec<Endpoint> = sqlx::query_as(
            "SELECT id, event_types FROM webhook_endpoints WHERE account_id = $1 AND status = 'enabled'",
        )
        .bind(account_id)
        .fetch_all(&mut **tx)
        .await?;
        Ok(Self {
            account_id,
            endpoints: rows
                .into_iter()
                .map(|e| (e.id, e.event_types.split(',').map(str::to_owned).collect()))
                .collect(),
        })
    }

    /// Whether any endpoint subscribes to `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.endpoints
            .iter()
            .any(|(_, types)| types.iter().any(|t| t == event_type))
    }

    /// Records `data` for every subscribed endpoint; nothing when none is.
    pub async fn record(&self, store: &Store, tx: &mut Tx, data: EventData) -> Result<()> {
        let endpoints = self.endpoints_for(&data);
        insert_event(store, tx, self.account_id, &data, &endpoints).await
    }

    /// After a debit of `units` that left `remaining`: a `balance.low` event when the balance
    /// went from at least the plan's threshold to below it (threshold > 0). Once per crossing:
    /// the next debit starts below the threshold; a credit back above it re-arms the alert.
    pub async fn after_debit(
        &self,
        store: &Store,
        tx: &mut Tx,
        plan_id: PlanId,
        product_slug: &str,
        units: i64,
        remaining: i64,
    ) -> Result<()> {
        if !self.wants("balance.low") {
            return Ok(());
        }
        let threshold: Option<i64> = sqlx::query_scalar(
            "SELECT low_balance_threshold FROM balance_alerts WHERE account_id = $1 AND plan_id = $2",
        )
        .bind(self.account_id)
        .bind(plan_id)
        .fetch_optional(&mut **tx)
        .await?;
        let threshold = threshold.unwrap_or(0);
        if crosses_low_balance(threshold, units, remaining) {
            self.record(
                store,
                tx,
                EventData::BalanceLow {
                    product_slug: product_slug.to_owned(),
                    remaining_balance: remaining,
                    threshold,
                },
            )
            .await?;
        }
        Ok(())
    }
}

impl Subscribers {
    /// The subscribers of each of `account_ids` from rows of their enabled endpoints
    /// (account, endpoint row, event types), as a group transaction reads them for several
    /// accounts at once ([`load`] reads one). Every account asked for has an entry.
    ///
    /// [`load`]: Subscribers::load
    pub(crate) fn from_rows(
        account_ids: impl IntoIterator<Item = i64>,
        rows: impl IntoIterator<Item = (i64, i64, String)>,
    ) -> HashMap<i64, Self> {
        let mut all: HashMap<i64, Self> = account_ids
            .into_iter()
            .map(|account_id| {
                (
                    account_id,
                    Self {
                        account_id,
                        endpoints: Vec::new(),
                    },
                )
            })
            .collect();
        for (account_id, id, types) in rows {
            if let Some(subscribers) = all.get_mut(&account_id) {
                subscribers
                    .endpoints
                    .push((id, types.split(',').map(str::to_owned).collect()));
            }
        }
        for subscribers in all.values_mut() {
            subscribers.endpoints.sort_by_key(|(id, _)| *id);
        }
        all
    }

    /// The endpoints subscribed to `data`'s type (a group transaction's events).
    pub(crate) fn endpoints_for(&self, data: &EventData) -> Vec<i64> {
        let event_type = data.event_type();
        self.endpoints
            .iter()
            .filter(|(_, types)| types.iter().any(|t| t == event_type))
            .map(|(id, _)| *id)
            .collect()
    }
}

/// Whether a debit of `units` that left `remaining` crossed `threshold` downwards: the rule of
/// [`Subscribers::after_debit`].
pub(crate) fn crosses_low_balance(threshold: i64, units: i64, remaining: i64) -> bool {
    threshold > 0 && remaining + units >= threshold && remaining < threshold
}

/// An event row as [`insert_event`] and the license group write it, by column name.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct EventRow {
    pub event_id: String,
    pub account_id: i64,
    pub event_type: String,
    pub body: String,
}

/// The row of an event of `data` for the account, created `now`, with a fresh event id.
pub(crate) fn event_row(account_id: i64, data: &EventData, now: i64) -> Result<EventRow> {
    let event = WebhookEvent {
        event_id: format!("evt_{}", random_base62(crate::limits::ID_RANDOM_CHARS)),
        event_type: data.event_type().to_owned(),
        created_utc: now,
        data: data.data(),
    };
    let body = serde_json::to_string(&event)
        .map_err(|e| crate::Error::Internal(format!("event body: {e}")))?;
    Ok(EventRow {
        event_id: event.event_id,
        account_id,
        event_type: event.event_type,
        body,
    })
}

/// Records `data` in `tx` for every enabled endpoint of the account subscribed to its type.
pub async fn record(store: &Store, tx: &mut Tx, account_id: i64, data: EventData) -> Result<()> {
    Subscribers::load(tx, account_id)
        .await?
        .record(store, tx, data)
        .await
}

/// Writes the event and one outbox message per endpoint, due now; nothing for no endpoint.
pub(crate) async fn insert_event(
    store: &Store,
    tx: &mut Tx,
    account_id: i64,
    data: &EventData,
    endpoint_rows: &[i64],
) -> Result<()> {
    if endpoint_rows.is_empty() {
        return Ok(());
    }
    let now = store.now_utc();
    let event = event_row(account_id, data, now)?;
    let event_row: i64 = sqlx::query_scalar(
        "INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(event.event_id.as_str())
    .bind(account_id)
    .bind(event.event_type.as_str())
    .bind(event.body.as_str())
    .bind(now)
    .fetch_one(&mut **tx)
    .await?;
    for endpoint in endpoint_rows {
        sqlx::query(
            "INSERT INTO webhook_messages (event_row_id, endpoint_row_id, status, attempts, next_attempt_utc) \
             VALUES ($1, $2, 'pending', 0, $3)",
        )
        .bind(event_row)
        .bind(endpoint)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    }
    store.wake_webhook_worker();
    Ok(())
}
