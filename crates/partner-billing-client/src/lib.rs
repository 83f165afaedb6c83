//! Rust SDK for Partner Billing: spend a reseller's prepaid quota on licenses and promo codes,
//! read balances, and manage API keys through the reseller panel.
//!
//! - [`PartnerClient`]: the partner endpoints (balances, licenses, promo batches), authenticated
//!   with an API key ([`Credentials`]: client id + secret, sent as `X-Client-Id` /
//!   `X-Client-Secret`).
//! - [`PanelClient`]: the panel endpoints, authenticated with a session opened by the account's
//!   password; creates, lists and revokes API keys.
//! - [`ProductClient`]: the product endpoints, for the product's own backend, authenticated with
//!   an operator token (`rso_…`): registers end-user logins, redeems promo codes and lists a
//!   login's licenses.
//! - [`Error`]: one variant per API error code, plus [`Error::Unauthorized`] (the empty 401),
//!   transport failures and timeouts. [`Error::is_definite`] says whether the outcome is known.
//!
//! # Retries and idempotency
//!
//! Every write carries an idempotency key, yours or one the SDK generates, and the SDK keeps it
//! across its own retries, so a retried request can never be charged twice. It retries only
//! what may not have happened yet (transport failures, timeouts, `503 Service.Unavailable`,
//! `409 Reseller.RequestInProgress`), with exponential backoff and jitter, honouring
//! `Retry-After`, within a [`RetryPolicy`] (5 attempts and 30 s per attempt by default).
//! Definite outcomes come back at once.
//!
//! # Example
//!
//! ```no_run
//! use partner_billing_client::{Credentials, Error, PartnerClient};
//!
//! # async fn run() -> Result<(), Error> {
//! let credentials = Credentials::new(
//!     std::env::var("PARTNER_BILLING_CLIENT_ID").unwrap_or_default(),
//!     std::env::var("PARTNER_BILLING_SECRET").unwrap_or_default(),
//! );
//! let client = PartnerClient::new("https://billing.example.com", credentials)?;
//!
//! for balance in client.balances().await?.balances {
//!     println!("{}: {}", balance.product_slug, balance.remaining_balance);
//! }
//!
//! // Persist the key before sending if you may have to retry after a crash.
//! let key = "order-4711-license";
//! let issued = client.issue_license("pro", "alice@example.com", Some(key)).await?;
//! println!("license {} expires {:?}", issued.value.license_id, issued.value.expires_utc);
//!
//! // 100 promo codes, charged now. The same key returns the same codes for about 72 hours.
//! match client.generate_promo_batch("pro", 100, Some("campaign-2024-05")).await {
//!     Ok(issued) => {
//!         for code in &issued.value.codes {
//!             println!("{}", code.code);
//!         }
//!     }
//!     Err(Error::PromoCodesExpired { problem }) => {
//!         println!("order {:?}: codes no longer recoverable", problem.order_public_id);
//!     }
//!     Err(error) => return Err(error),
//! }
//! # Ok(()) }
//! ```
//!
//! The secret must stay on your servers: never ship it to a browser or a mobile app. It never
//! appears in this crate's `Debug` output or error messages.
#![forbid(unsafe_code)]

mod credentials;
mod error;
mod http;
mod panel;
mod partner;
mod product;
mod reads;
mod response;
mod retry;
mod webhooks;

pub use credentials::Credentials;
pub use error::{Error, Result};
pub use panel::PanelClient;
pub use partner::{Issued, MAX_PROMO_BATCH_COUNT, PartnerClient};
pub use product::{ProductClient, Registration};
pub use reads::{LedgerQuery, LicenseQuery, PageQuery};
pub use retry::RetryPolicy;
pub use webhooks::{WebhookVerifyError, verify_webhook, verify_webhook_at};

pub use partner_billing::domain::{IdempotencyKey, Secret};
pub use partner_billing::wire::{
    ApiKeyInfo, ApiKeyList, Balance, Balances, CreatedApiKey, EndUser, Entitlement, Entitlements,
    ErrorCode, License, Problem, PromoBatch, PromoCode, RedeemedLicense, ResellerAccount, Session,
    UserLicense, UserLicenses,
};
pub use partner_billing::wire::{
    CreatedWebhookEndpoint, LowBalanceAlert, WEBHOOK_EVENT_TYPES, WebhookDelivery,
    WebhookDeliveryList, WebhookEndpoint, WebhookEndpointList, WebhookEvent,
};
pub use partner_billing::wire::{
    LedgerEntryRecord, LedgerPage, LicenseList, LicenseRecord, PromoBatchList, PromoBatchSummary,
    RequestStatus, VoidPromoCodesResult,
};
