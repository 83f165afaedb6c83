//! The JSON shapes of subscriptions: the license object a reseller sees (and gets back from a
//! revocation), and the entitlements the product reads on its sign-in path.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// A license as shown to the reseller that issued it, or whose promo code it was redeemed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct ResellerLicense {
    /// Identifies the license (uuid).
    pub license_id: String,
    /// The product granted.
    pub plan_slug: String,
    /// The end user who holds it.
    pub login: String,
    /// `direct` (issued with an API key) or `promo` (redeemed from one of the account's codes).
    pub source: String,
    /// For `promo`: the batch the code came from (uuid); null for `direct`.
    pub batch_id: Option<String>,
    /// When it was granted (Unix seconds, UTC).
    pub created_utc: i64,
    /// When its period begins (Unix seconds, UTC), as granted.
    pub starts_utc: i64,
    /// When its period ends (Unix seconds, UTC), as granted; null for a perpetual plan.
    pub expires_utc: Option<i64>,
    /// When it was revoked (Unix seconds, UTC); null unless revoked.
    pub revoked_utc: Option<i64>,
}

/// What a login may use of one plan, folded from its licenses of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct Entitlement {
    /// The plan.
    pub plan_slug: String,
    /// Whether the login may use the plan now (`activeFromUtc <= now`).
    pub active_now: bool,
    /// The start of the earliest unrevoked license of the plan that has not ended (Unix
    /// seconds, UTC); in the future when the login's subscription has not begun yet.
    pub active_from_utc: i64,
    /// The end of the latest such license (Unix seconds, UTC); null for a perpetual plan.
    pub active_until_utc: Option<i64>,
}

/// `GET /v1/billing/product/users/{login}/entitlements`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct Entitlements {
    /// The login.
    pub login: String,
    /// One entry per plan the login holds an unrevoked license of that has not ended, sorted
    /// by slug; empty when it holds none.
    pub entitlements: Vec<Entitlement>,
}
