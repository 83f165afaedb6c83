//! Errors on the wire: the RFC 9457 problem body and the stable error codes clients match.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

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

/// The stable error codes of the API (docs/design.md), each with its HTTP status.
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
    LicenseNotFound,
    LicenseAlreadyActive,
    RequestNotFound,
    PromoBatchNotFound,
    CodeVoided,
}

impl ErrorCode {
    /// Every code, for tables and round-trip tests.
    pub const ALL: [ErrorCode; 30] = [
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
        Self::LicenseNotFound,
        Self::LicenseAlreadyActive,
        Self::RequestNotFound,
        Self::PromoBatchNotFound,
        Self::CodeVoided,
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
            Self::LicenseNotFound => "License.NotFound",
            Self::LicenseAlreadyActive => "License.AlreadyActive",
            Self::RequestNotFound => "Reseller.RequestNotFound",
            Self::PromoBatchNotFound => "Reseller.PromoBatchNotFound",
            Self::CodeVoided => "Promo.CodeVoided",
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
            | Self::AlreadyRedeemed
            | Self::LicenseAlreadyActive => 409,
            Self::ApiKeyNotFound
            | Self::WebhookEndpointNotFound
            | Self::CodeNotFound
            | Self::LicenseNotFound
            | Self::RequestNotFound
            | Self::PromoBatchNotFound => 404,
            Self::PromoCodesExpired | Self::CodeExpired | Self::CodeVoided => 410,
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
            Self::LicenseNotFound => "License not found",
            Self::LicenseAlreadyActive => "The login already holds this perpetual plan",
            Self::RequestNotFound => "No request with this idempotency key",
            Self::PromoBatchNotFound => "Promo batch not found",
            Self::CodeVoided => "Promo code voided",
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
            Self::LicenseNotFound => {
                "No license of this account has this id (unknown, malformed or another \
                 reseller's)."
            }
            Self::LicenseAlreadyActive => {
                "The login already holds an unrevoked license of this perpetual plan; nothing \
                 was charged or redeemed, and nothing was stored under the idempotency key."
            }
            Self::RequestNotFound => {
                "This account has no record of a request with this idempotency key: it never \
                 arrived, or it changed nothing (refusals are not recorded)."
            }
            Self::PromoBatchNotFound => {
                "No promo batch of this account has this id (unknown or another account's)."
            }
            Self::CodeVoided => {
                "The promo code, or its whole batch, was voided by the reseller that bought it."
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
}
