//! The JSON shapes of subscriptions: the entitlements the product reads on its sign-in path.
//! (A revocation answers the license object of `reads.rs`.)

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

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
