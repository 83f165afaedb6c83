//! The JSON shapes of the product API (`/v1/billing/product`): what the product's own backend
//! sends and receives with its operator token.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// `POST /v1/billing/product/users`: register an end user's login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct RegisterUserRequest {
    /// The login (1–254 characters, no control characters), compared exactly.
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))
    )]
    pub login: String,
}

/// A registered end user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct EndUser {
    /// The login.
    pub login: String,
    /// When the login was first registered (Unix seconds, UTC).
    pub created_utc: i64,
}

/// `POST /v1/billing/product/promo-redemptions`: redeem a promo code for an end user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct RedeemPromoCodeRequest {
    /// The code as the user typed it: case, spaces and hyphens do not matter, and `I`/`L` are
    /// read as `1`, `O` as `0`. Anything that is not a code is answered like an unknown code.
    pub code: String,
    /// The registered login that receives the license.
    #[cfg_attr(
        feature = "openapi",
        oai(validator(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))
    )]
    pub login: String,
    /// Chosen by the caller (8–128 visible ASCII characters); reuse it when retrying.
    #[cfg_attr(feature = "openapi", oai(validator(pattern = r"^[!-~]+$")))]
    pub idempotency_key: String,
}

redacted_debug!(RedeemPromoCodeRequest { login, idempotency_key; redacted: code });

/// The license a redemption granted. Redemption charges no quota: the code was paid for when
/// its batch was generated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct RedeemedLicense {
    /// Identifies the license (uuid).
    pub license_id: String,
    /// The product granted.
    pub plan_slug: String,
    /// The end user who holds it.
    pub login: String,
    /// Always `promo`.
    pub source: String,
    /// The reseller that bought the code (`rsc_…`).
    pub client_id: String,
    /// The batch the code came from (uuid).
    pub batch_id: String,
    /// When it was granted (Unix seconds, UTC).
    pub created_utc: i64,
    /// When its period begins (Unix seconds, UTC): the grant time, or the end of the login's
    /// latest unexpired license of the plan when it renews one early.
    pub starts_utc: i64,
    /// When its period ends (Unix seconds, UTC); null when the plan has no subscription length.
    pub expires_utc: Option<i64>,
    /// When it was revoked (Unix seconds, UTC); null unless revoked. It grants nothing from then on.
    pub revoked_utc: Option<i64>,
}

/// One license of an end user, issued directly or redeemed from a promo code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct UserLicense {
    /// Identifies the license (uuid).
    pub license_id: String,
    /// The product granted.
    pub plan_slug: String,
    /// `direct` (issued by a reseller) or `promo` (redeemed from a code).
    pub source: String,
    /// The reseller that paid for it (`rsc_…`).
    pub client_id: Option<String>,
    /// For `promo`: the batch the code came from (uuid); null for `direct`.
    pub batch_id: Option<String>,
    /// When it was granted (Unix seconds, UTC).
    pub created_utc: i64,
    /// When its period begins (Unix seconds, UTC): the grant time, or the end of the login's
    /// latest unexpired license of the plan when it renews one early.
    pub starts_utc: i64,
    /// When its period ends (Unix seconds, UTC); null when the plan has no subscription length.
    pub expires_utc: Option<i64>,
    /// When it was revoked (Unix seconds, UTC); null unless revoked. It grants nothing from then on.
    pub revoked_utc: Option<i64>,
}

/// `GET /v1/billing/product/users/{login}/licenses`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct UserLicenses {
    /// The login.
    pub login: String,
    /// Every license of the login, expired ones included, oldest first.
    pub licenses: Vec<UserLicense>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redemption_requests_never_print_the_code() {
        let request = RedeemPromoCodeRequest {
            code: "CANARY".into(),
            login: "alice".into(),
            idempotency_key: "key-12345".into(),
        };
        let shown = format!("{request:?}");
        assert!(!shown.contains("CANARY"), "{shown}");
        assert!(shown.contains("alice"));
    }
}
