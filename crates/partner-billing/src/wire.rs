//! The JSON shapes of the HTTP API, shared by the server and the SDK.
//!
//! These types compile without the database stack (feature `db`), so the client never links
//! sqlx. With feature `openapi` they also derive poem-openapi's `Object`, which is how the
//! server publishes them; serde and poem-openapi agree on camelCase names.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// `Debug` for a wire shape that carries secrets: the fields before `redacted:` as they are,
/// the ones after it as `[redacted]`, so neither logs nor panics ever show them.
macro_rules! redacted_debug {
    ($type:ident { $($field:ident),* ; redacted: $($secret:ident),+ $(,)? }) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    $(.field(stringify!($field), &self.$field))*
                    $(.field(stringify!($secret), &"[redacted]"))+
                    .finish()
            }
        }
    };
}

mod audit;
mod panel;
mod problem;
mod product;
mod reads;
mod roll;
mod subscriptions;
mod webhooks;

pub use audit::{AuditEntry, AuditEntryList};
pub use panel::{
    ApiKeyInfo, ApiKeyList, ChangePasswordRequest, CreateApiKeyRequest, CreatedApiKey,
    ResellerAccount, Session, SessionRequest,
};
pub use problem::{ErrorCode, Problem};
pub use reads::{
    LedgerEntryRecord, LedgerPage, LicenseList, LicenseRecord, PromoBatchList, PromoBatchSummary,
    REQUEST_OPERATIONS, REQUEST_STATUSES, RequestStatus, VoidPromoCodesRequest,
    VoidPromoCodesResult,
};
pub use roll::RollApiKeyRequest;
pub use subscriptions::{Entitlement, Entitlements};

pub use product::{
    EndUser, RedeemPromoCodeRequest, RedeemedLicense, RegisterUserRequest, UserLicense,
    UserLicenses,
};
pub use webhooks::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, LowBalanceAlert,
    SetLowBalanceAlertRequest, WEBHOOK_EVENT_TYPES, WebhookDelivery, WebhookDeliveryList,
    WebhookEndpoint, WebhookEndpointList, WebhookEvent,
};

/// Every value of `ApiKeyInfo.status`.
pub const API_KEY_STATUSES: [&str; 3] = ["active", "revoked", "expired"];
/// Every value of `ResellerAccount.standing`.
pub const ACCOUNT_STANDINGS: [&str; 2] = ["good", "suspended"];
/// Every value of a license's `source`: issued by a reseller, or redeemed from a promo code.
pub const LICENSE_SOURCES: [&str; 2] = ["direct", "promo"];
/// Every value of a ledger entry's `kind`.
pub const LEDGER_KINDS: [&str; 4] = ["credit", "license", "promo_batch", "adjustment"];
/// Every value of a webhook endpoint's `status`.
pub const WEBHOOK_ENDPOINT_STATUSES: [&str; 2] = ["enabled", "disabled"];

/// `POST /v1/billing/partner/licenses`: grant one subscription to a registered login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct IssueLicenseRequest {
    /// The product to grant: a `productSlug` from the balances response.
    #[cfg_attr(feature = "openapi", oai(validator(pattern = r"^[a-z0-9._-]+$")))]
    pub plan_slug: String,
    /// Login of the end user who receives the subscription; must be registered.
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))
    )]
    pub login: String,
    /// Chosen by the caller (8–128 visible ASCII characters); reuse it when retrying.
    #[cfg_attr(feature = "openapi", oai(validator(pattern = r"^[!-~]+$")))]
    pub idempotency_key: String,
}

/// A subscription granted to an end user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct License {
    /// Identifies the license (uuid).
    pub license_id: String,
    /// The product granted.
    pub plan_slug: String,
    /// The end user who holds it.
    pub login: String,
    /// Quota left for this product after the charge.
    pub remaining_balance: i64,
    /// When it was issued (Unix seconds, UTC).
    pub created_utc: i64,
    /// When its period begins (Unix seconds, UTC): the issue time, or the end of the login's
    /// latest unexpired license of the plan when it renews one early.
    pub starts_utc: i64,
    /// When its period ends (Unix seconds, UTC); null when the plan has no subscription length.
    pub expires_utc: Option<i64>,
    /// When it was revoked (Unix seconds, UTC); null unless revoked. It grants nothing from then on.
    pub revoked_utc: Option<i64>,
}

/// `POST /v1/billing/partner/promo-batches`: buy a batch of promo codes, one unit each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct GeneratePromoBatchRequest {
    /// The product the codes unlock: a `productSlug` from the balances response.
    #[cfg_attr(feature = "openapi", oai(validator(pattern = r"^[a-z0-9._-]+$")))]
    pub plan_slug: String,
    /// How many codes (1–1000); each costs one unit, charged now.
    pub count: i64,
    /// Chosen by the caller (8–128 visible ASCII characters); reuse it when retrying the same
    /// batch, to get the same codes back for 72 hours.
    #[cfg_attr(feature = "openapi", oai(validator(pattern = r"^[!-~]+$")))]
    pub idempotency_key: String,
}

/// One promo code, redeemable for one subscription.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct PromoCode {
    /// The plaintext code, `XXXX-XXXX-XXXX-XXXX` (Crockford base32). Only its hash is stored.
    pub code: String,
}

impl std::fmt::Debug for PromoCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PromoCode([redacted])")
    }
}

/// A generated batch. This response is the only place plaintext codes appear; a retry with the
/// same idempotency key returns it again for about 72 hours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct PromoBatch {
    /// Identifies this batch purchase (uuid).
    pub order_public_id: String,
    /// Groups the codes (uuid).
    pub batch_id: String,
    /// The product the codes unlock.
    pub plan_slug: String,
    /// The codes, each object holding only `code`.
    pub codes: Vec<PromoCode>,
    /// Quota for this product after the charge.
    pub remaining_balance: i64,
    /// When the batch was generated (Unix seconds, UTC).
    pub created_utc: i64,
}

/// The remaining quota of one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct Balance {
    /// The product; valid as `planSlug` in requests.
    pub product_slug: String,
    /// Units left: one unit buys one license or one promo code.
    pub remaining_balance: i64,
}

/// `GET /v1/billing/partner/balances`: every product ever credited, sorted by slug.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct Balances {
    /// One entry per product, zero balances included.
    pub balances: Vec<Balance>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_secret() {
        const SECRET: &str = "s3cret-value-that-must-not-show";
        let shown = [
            format!(
                "{:?}",
                SessionRequest {
                    client_id: "rsc_x".into(),
                    password: SECRET.into(),
                }
            ),
            format!(
                "{:?}",
                ChangePasswordRequest {
                    current_password: SECRET.into(),
                    new_password: SECRET.into(),
                }
            ),
            format!(
                "{:?}",
                Session {
                    session_token: SECRET.into(),
                    expires_utc: 1,
                }
            ),
            format!(
                "{:?}",
                CreatedApiKey {
                    api_key_id: "key_x".into(),
                    client_id: "rsc_x".into(),
                    secret: SECRET.into(),
                    name: None,
                    created_utc: 1,
                }
            ),
            format!(
                "{:?}",
                RedeemPromoCodeRequest {
                    code: SECRET.into(),
                    login: "alice".into(),
                    idempotency_key: "redeem-001".into(),
                }
            ),
        ];
        for text in &shown {
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.contains("[redacted]"), "{text}");
        }
        assert!(
            shown[0].contains("rsc_x"),
            "other fields still show: {}",
            shown[0]
        );
    }
}
