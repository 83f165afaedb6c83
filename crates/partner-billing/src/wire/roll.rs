//! The body of a key roll (`POST /v1/billing/resellers/me/api-keys/{apiKeyId}/roll`).

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// `POST /v1/billing/resellers/me/api-keys/{apiKeyId}/roll`: how long the old key keeps
/// working. The body may be left out (or be `{}`) for the default of one day.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct RollApiKeyRequest {
    /// Seconds the old key keeps working, 0 (refused from now on) to 604800 (7 days); 86400
    /// when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_seconds: Option<i64>,
}
