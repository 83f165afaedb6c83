//! The audit trail as a reseller reads it (`GET /v1/billing/resellers/me/activity`) and as the
//! operator's `admin audit log --json` prints it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// One change made to the account by a person or an operator's tool. Never holds a secret,
/// token, password or promo code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct AuditEntry {
    /// When the change committed (Unix seconds, UTC).
    pub created_utc: i64,
    /// What was done, e.g. `api_key.revoked` or `quota.credited`.
    pub action: String,
    /// Who did it: `panel:<clientId>`, `api_key:<apiKeyId>`, `operator_token:<name>` or
    /// `cli:<the OS user running the operator's command>`.
    pub actor: String,
    /// The peer's IP address (no port) for a change made over HTTP; null otherwise.
    pub source_address: Option<String>,
    /// The request's `X-Request-Id` for a change made over HTTP; null otherwise.
    pub request_id: Option<String>,
    /// The account the change concerns; null for changes of no account (a plan, an operator
    /// token, an end-user login).
    pub client_id: Option<String>,
    /// The ids the change touched, by name (`apiKeyId`, `webhookEndpointId`, `productSlug`, …).
    pub ids: BTreeMap<String, String>,
    /// What changed (names, units, reasons), never a secret.
    pub details: serde_json::Value,
}

/// A page of the trail, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct AuditEntryList {
    pub entries: Vec<AuditEntry>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
}
