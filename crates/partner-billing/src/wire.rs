//! The JSON shapes of the HTTP API, shared by the server and the SDK.
//!
//! These types compile without the database stack (feature `db`), so the client never links
//! sqlx. With feature `openapi` they also derive poem-openapi's `Object`, which is how the
//! server publishes them; serde and poem-openapi agree on camelCase names.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

mod product;
mod roll;
mod webhooks;

pub use roll::RollApiKeyRequest;

pub use product::{
    EndUser, RedeemPromoCodeRequest, RedeemedLicense, RegisterUserRequest, UserLicense,
    UserLicenses,
};
pub use webhooks::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, LowBalanceAlert,
    SetLowBalanceAlertRequest, WEBHOOK_EVENT_TYPES, WebhookDelivery, WebhookDeliveryList,
    WebhookEndpoint, WebhookEndpointList, WebhookEvent,
};

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
    /// When it ends (Unix seconds, UTC); null when the plan has no subscription length.
    pub expires_utc: Option<i64>,
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

/// `POST /v1/billing/resellers/sessions`: log in to the reseller panel.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct SessionRequest {
    /// The account's client id (`rsc_…`).
    pub client_id: String,
    /// The panel password.
    pub password: String,
}

impl std::fmt::Debug for SessionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRequest")
            .field("client_id", &self.client_id)
            .field("password", &"[redacted]")
            .finish()
    }
}

/// `PUT /v1/billing/resellers/me/password`: change the panel password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct ChangePasswordRequest {
    /// The password in use now.
    pub current_password: String,
    /// The new password: 12-128 characters.
    pub new_password: String,
}

impl std::fmt::Debug for ChangePasswordRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangePasswordRequest")
            .field("current_password", &"[redacted]")
            .field("new_password", &"[redacted]")
            .finish()
    }
}

/// A panel session: send the token as `Authorization: Bearer <sessionToken>`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct Session {
    /// The bearer token (`rps_…`), valid for 12 hours.
    pub session_token: String,
    /// When the session ends (Unix seconds, UTC).
    pub expires_utc: i64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session_token", &"[redacted]")
            .field("expires_utc", &self.expires_utc)
            .finish()
    }
}

/// `POST /v1/billing/resellers/me/api-keys`: an optional label for the new key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct CreateApiKeyRequest {
    /// A label to tell keys apart in the panel (at most 64 characters).
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))
    )]
    #[serde(default)]
    pub name: Option<String>,
}

/// A new API key. The secret is shown here once and never again.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct CreatedApiKey {
    /// Identifies the key in the revoke path (`rsk_…`).
    pub api_key_id: String,
    /// The account's client id (`rsc_…`); send it with the secret.
    pub client_id: String,
    /// The secret (`rss_…`). Store it server-side only; it cannot be recovered.
    pub secret: String,
    /// The label given at creation.
    pub name: Option<String>,
    /// When the key was created (Unix seconds, UTC).
    pub created_utc: i64,
}

impl std::fmt::Debug for CreatedApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedApiKey")
            .field("api_key_id", &self.api_key_id)
            .field("client_id", &self.client_id)
            .field("secret", &"[redacted]")
            .field("name", &self.name)
            .field("created_utc", &self.created_utc)
            .finish()
    }
}

/// One API key as listed in the panel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct ApiKeyInfo {
    /// Identifies the key (`rsk_…`).
    pub api_key_id: String,
    /// The label given at creation.
    pub name: Option<String>,
    /// `active`, `revoked`, or `expired` (rolled, and its grace period is over).
    pub status: String,
    /// When the key was created (Unix seconds, UTC).
    pub created_utc: i64,
    /// When the key last authenticated a request, to the minute; null if never.
    pub last_used_utc: Option<i64>,
    /// When the key was revoked; null while active.
    pub revoked_utc: Option<i64>,
    /// When a rolled key stops working (Unix seconds, UTC); null for a key never rolled.
    pub expires_utc: Option<i64>,
}

/// `GET /v1/billing/resellers/me/api-keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct ApiKeyList {
    /// Every key of the account, oldest first, revoked ones included.
    pub api_keys: Vec<ApiKeyInfo>,
}

/// `GET /v1/billing/resellers/me`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct ResellerAccount {
    /// The stable client id (`rsc_…`).
    pub client_id: String,
    /// The account's name.
    pub name: String,
    /// `good` or `suspended`.
    pub standing: String,
}

/// Every value of `ApiKeyInfo.status`.
pub const API_KEY_STATUSES: [&str; 3] = ["active", "revoked", "expired"];
/// Every value of `ResellerAccount.standing`.
pub const ACCOUNT_STANDINGS: [&str; 2] = ["good", "suspended"];
/// Every value of a license's `source`: issued by a reseller, or redeemed from a promo code.
pub const LICENSE_SOURCES: [&str; 2] = ["direct", "promo"];
/// Every value of a webhook endpoint's `status`.
pub const WEBHOOK_ENDPOINT_STATUSES: [&str; 2] = ["enabled", "disabled"];

/// An RFC 9457 problem: every error but the empty 401.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct Problem {
    /// A URI naming the problem type.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", oai(rename = "type"))]
    pub problem_type: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong in this occurrence; never holds a secret or a code.
    pub detail: String,
    /// The stable error code, e.g. `Reseller.InsufficientQuota`.
    pub code: String,
    /// For `Request.ValidationFailed`: the offending field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", oai(skip_serializing_if_is_none))]
    pub field: Option<String>,
    /// For `Reseller.PromoCodesExpired`: the batch purchase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", oai(skip_serializing_if_is_none))]
    pub order_public_id: Option<String>,
    /// For `Reseller.PromoCodesExpired`: the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", oai(skip_serializing_if_is_none))]
    pub batch_id: Option<String>,
}

/// The stable error codes of the API (DESIGN §7), each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    ValidationFailed,
    PayloadTooLarge,
    RouteNotFound,
    MethodNotAllowed,
    BrowserOriginForbidden,
    PanelSessionRequired,
    InsufficientQuota,
    UnknownPlan,
    UnknownLogin,
    IdempotencyKeyReused,
    RequestInProgress,
    ApiKeyLimitReached,
    ApiKeyNotFound,
    WebhookEndpointNotFound,
    WebhookEndpointLimitReached,
    PromoCodesExpired,
    PromoGenerationFailed,
    CodeNotFound,
    CodeExpired,
    CodeExhausted,
    AlreadyRedeemed,
    TooManyAttempts,
    RateLimited,
    ServiceUnavailable,
    InternalError,
}

impl ErrorCode {
    /// Every code, for tables and round-trip tests.
    pub const ALL: [ErrorCode; 25] = [
        Self::ValidationFailed,
        Self::PayloadTooLarge,
        Self::RouteNotFound,
        Self::MethodNotAllowed,
        Self::BrowserOriginForbidden,
        Self::PanelSessionRequired,
        Self::InsufficientQuota,
        Self::UnknownPlan,
        Self::UnknownLogin,
        Self::IdempotencyKeyReused,
        Self::RequestInProgress,
        Self::ApiKeyLimitReached,
        Self::ApiKeyNotFound,
        Self::WebhookEndpointNotFound,
        Self::WebhookEndpointLimitReached,
        Self::PromoCodesExpired,
        Self::PromoGenerationFailed,
        Self::CodeNotFound,
        Self::CodeExpired,
        Self::CodeExhausted,
        Self::AlreadyRedeemed,
        Self::TooManyAttempts,
        Self::RateLimited,
        Self::ServiceUnavailable,
        Self::InternalError,
    ];

    /// The code as it appears in the `code` member.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ValidationFailed => "Request.ValidationFailed",
            Self::PayloadTooLarge => "Request.PayloadTooLarge",
            Self::RouteNotFound => "Request.NotFound",
            Self::MethodNotAllowed => "Request.MethodNotAllowed",
            Self::BrowserOriginForbidden => "Request.BrowserOriginForbidden",
            Self::PanelSessionRequired => "Reseller.PanelSessionRequired",
            Self::InsufficientQuota => "Reseller.InsufficientQuota",
            Self::UnknownPlan => "Reseller.UnknownPlan",
            Self::UnknownLogin => "Reseller.UnknownLogin",
            Self::IdempotencyKeyReused => "Reseller.IdempotencyKeyReused",
            Self::RequestInProgress => "Reseller.RequestInProgress",
            Self::ApiKeyLimitReached => "Reseller.ApiKeyLimitReached",
            Self::ApiKeyNotFound => "Reseller.ApiKeyNotFound",
            Self::WebhookEndpointNotFound => "Reseller.WebhookEndpointNotFound",
            Self::WebhookEndpointLimitReached => "Reseller.WebhookEndpointLimitReached",
            Self::PromoCodesExpired => "Reseller.PromoCodesExpired",
            Self::PromoGenerationFailed => "Reseller.PromoGenerationFailed",
            Self::CodeNotFound => "Promo.CodeNotFound",
            Self::CodeExpired => "Promo.CodeExpired",
            Self::CodeExhausted => "Promo.CodeExhausted",
            Self::AlreadyRedeemed => "Promo.AlreadyRedeemed",
            Self::TooManyAttempts => "Promo.TooManyAttempts",
            Self::RateLimited => "Request.RateLimited",
            Self::ServiceUnavailable => "Service.Unavailable",
            Self::InternalError => "Internal.Error",
        }
    }

    /// Parses the `code` member of a problem body.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The HTTP status the API answers with.
    pub fn status(self) -> u16 {
        match self {
            Self::ValidationFailed => 400,
            Self::PayloadTooLarge => 413,
            Self::RouteNotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::BrowserOriginForbidden | Self::PanelSessionRequired => 403,
            Self::InsufficientQuota => 402,
            Self::UnknownPlan | Self::UnknownLogin | Self::IdempotencyKeyReused => 422,
            Self::RequestInProgress
            | Self::ApiKeyLimitReached
            | Self::WebhookEndpointLimitReached
            | Self::CodeExhausted
            | Self::AlreadyRedeemed => 409,
            Self::ApiKeyNotFound | Self::WebhookEndpointNotFound | Self::CodeNotFound => 404,
            Self::PromoCodesExpired | Self::CodeExpired => 410,
            Self::PromoGenerationFailed | Self::InternalError => 500,
            Self::TooManyAttempts | Self::RateLimited => 429,
            Self::ServiceUnavailable => 503,
        }
    }

    /// A short human title for the problem type.
    pub fn title(self) -> &'static str {
        match self {
            Self::ValidationFailed => "The request is malformed",
            Self::PayloadTooLarge => "The request body is too large",
            Self::RouteNotFound => "No such resource",
            Self::MethodNotAllowed => "Method not allowed",
            Self::BrowserOriginForbidden => "Browser requests are not accepted",
            Self::PanelSessionRequired => "A panel session is required",
            Self::InsufficientQuota => "Not enough quota",
            Self::UnknownPlan => "Unknown plan",
            Self::UnknownLogin => "Unknown login",
            Self::IdempotencyKeyReused => "Idempotency key reused for another request",
            Self::RequestInProgress => "A request with this idempotency key is in progress",
            Self::ApiKeyLimitReached => "Active API key limit reached",
            Self::ApiKeyNotFound => "API key not found",
            Self::WebhookEndpointNotFound => "Webhook endpoint not found",
            Self::WebhookEndpointLimitReached => "Webhook endpoint limit reached",
            Self::PromoCodesExpired => "Promo codes are no longer recoverable",
            Self::PromoGenerationFailed => "Promo codes could not be generated",
            Self::CodeNotFound => "Promo code not found",
            Self::CodeExpired => "Promo code expired",
            Self::CodeExhausted => "Promo code used up",
            Self::AlreadyRedeemed => "Promo code already redeemed by this login",
            Self::TooManyAttempts => "Too many failed redemption attempts",
            Self::RateLimited => "Too many attempts",
            Self::ServiceUnavailable => "Service unavailable",
            Self::InternalError => "Internal error",
        }
    }

    /// What the code means for a caller, as the published document describes it.
    pub fn meaning(self) -> &'static str {
        match self {
            Self::ValidationFailed => {
                "A malformed body or parameter; `field` names it (its value is never echoed)."
            }
            Self::PayloadTooLarge => "The body is over 16 KiB.",
            Self::RouteNotFound => "No such route.",
            Self::MethodNotAllowed => "The path exists, not with this method (see `Allow`).",
            Self::BrowserOriginForbidden => {
                "The request carries a browser's marks (`Origin`, `Sec-Fetch-Site`) on a \
                 server-to-server API, or is a cross-site request to the panel."
            }
            Self::PanelSessionRequired => {
                "An API key was sent to a panel endpoint: keys cannot manage keys or the account."
            }
            Self::InsufficientQuota => {
                "The balance of the plan is below the cost; the request was refused whole and \
                 nothing was consumed."
            }
            Self::UnknownPlan => "No plan has this slug.",
            Self::UnknownLogin => "No end user is registered with this login.",
            Self::IdempotencyKeyReused => {
                "The idempotency key was used for a different request; choose a new key."
            }
            Self::RequestInProgress => {
                "A request with this idempotency key is still running; retry with the same key \
                 after `Retry-After`."
            }
            Self::ApiKeyLimitReached => "Five API keys are already active; revoke one first.",
            Self::ApiKeyNotFound => {
                "No active API key of this account has this id (unknown, another account's, \
                 revoked or expired)."
            }
            Self::WebhookEndpointNotFound => "No webhook endpoint of this account has this id.",
            Self::WebhookEndpointLimitReached => {
                "Five webhook endpoints already exist; delete one first."
            }
            Self::PromoCodesExpired => {
                "The batch is past its 72-hour recovery window: its codes are gone for good; \
                 `orderPublicId` and `batchId` name it; nothing was charged again."
            }
            Self::PromoGenerationFailed => {
                "The codes could not be produced: nothing charged, nothing issued; retry with \
                 the same idempotency key. A definite outcome, unlike other 5xx answers."
            }
            Self::CodeNotFound => "No promo code matches (unknown and malformed input alike).",
            Self::CodeExpired => "The promo code is past its batch's validity.",
            Self::CodeExhausted => "The promo code's redemptions are used up.",
            Self::AlreadyRedeemed => "This login has redeemed this promo code before.",
            Self::TooManyAttempts => {
                "Too many failed redemptions for this login; retry after `Retry-After`."
            }
            Self::RateLimited => {
                "Too many failed attempts (sign-ins for this client id or address, or unknown \
                 logins for this account); nothing changed; retry after `Retry-After`."
            }
            Self::ServiceUnavailable => {
                "The database is unreachable or the service is overloaded; the outcome is \
                 unknown: retry (with the same idempotency key) after `Retry-After`."
            }
            Self::InternalError => {
                "An unexpected error; the outcome is unknown: retry with the same idempotency key."
            }
        }
    }

    /// The problem `type` URI.
    pub fn type_uri(self) -> String {
        format!("https://partner-billing.dev/problems/{}", self.as_str())
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_trip() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("Nope"), None);
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let key = CreatedApiKey {
            api_key_id: "rsk_1".into(),
            client_id: "rsc_1".into(),
            secret: "rss_canary".into(),
            name: None,
            created_utc: 0,
        };
        assert!(!format!("{key:?}").contains("canary"));
        let session = Session {
            session_token: "rps_canary".into(),
            expires_utc: 0,
        };
        assert!(!format!("{session:?}").contains("canary"));
        let login = SessionRequest {
            client_id: "rsc_1".into(),
            password: "canary".into(),
        };
        assert!(!format!("{login:?}").contains("canary"));
    }
}
