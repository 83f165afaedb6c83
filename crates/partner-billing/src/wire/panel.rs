//! The reseller panel's shapes: sessions, passwords, API keys and the account profile.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

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

redacted_debug!(SessionRequest { client_id; redacted: password });

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

redacted_debug!(ChangePasswordRequest { ; redacted: current_password, new_password });

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

redacted_debug!(Session { expires_utc; redacted: session_token });

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

redacted_debug!(CreatedApiKey { api_key_id, client_id, name, created_utc; redacted: secret });

/// One API key as listed in the panel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
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
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct ResellerAccount {
    /// The stable client id (`rsc_…`).
    pub client_id: String,
    /// The account's name.
    pub name: String,
    /// `good` or `suspended`.
    pub standing: String,
}

#[cfg(test)]
mod tests {
    use super::*;

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
