//! An API key as the partner endpoints take it.

use std::fmt;

use partner_billing::domain::Secret;
use partner_billing::wire::CreatedApiKey;

/// An API key: the account's client id (`rsc_…`, safe to log) and one of its secrets
/// (`rss_…`).
///
/// The secret is a [`Secret`]: it never appears in `Debug` output, error messages or logs. Keep
/// it server-side only; the API refuses browser requests.
///
/// ```
/// use partner_billing_client::Credentials;
///
/// let credentials = Credentials::new("rsc_example", "rss_example");
/// assert!(!format!("{credentials:?}").contains("rss_example"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The account's client id: the identity, not a secret.
    pub client_id: String,
    /// The key's secret, shown once when the key was created.
    pub secret: Secret,
}

impl Credentials {
    /// Pairs a client id with a secret, e.g. read from the environment or a secret store.
    pub fn new(client_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            client_id: client_id.into(),
            secret: Secret::from_presented(secret),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("client_id", &self.client_id)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// The credentials of a key just created in the panel.
impl From<&CreatedApiKey> for Credentials {
    fn from(key: &CreatedApiKey) -> Self {
        Self::new(key.client_id.clone(), key.secret.clone())
    }
}

/// The credentials of a key just created in the panel.
impl From<CreatedApiKey> for Credentials {
    fn from(key: CreatedApiKey) -> Self {
        Self::new(key.client_id, key.secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let credentials = Credentials::new("rsc_visible", "rss_canary_value");
        let shown = format!("{credentials:?} {credentials:#?}");
        assert!(!shown.contains("canary"), "{shown}");
        assert!(shown.contains("rsc_visible"));
        assert!(shown.contains("[redacted]"));
        assert_eq!(credentials.secret.expose(), "rss_canary_value");
    }

    #[test]
    fn built_from_a_created_key() {
        let key = CreatedApiKey {
            api_key_id: "rsk_1".into(),
            client_id: "rsc_1".into(),
            secret: "rss_canary".into(),
            name: None,
            created_utc: 0,
        };
        let credentials = Credentials::from(&key);
        assert_eq!(credentials.client_id, "rsc_1");
        assert_eq!(credentials.secret.expose(), "rss_canary");
        assert_eq!(Credentials::from(key), credentials);
    }
}
