//! The reseller panel API: log in with the account's password, then manage API keys.

use std::fmt;

use partner_billing::domain::Secret;
use partner_billing::wire::{
    ApiKeyList, ChangePasswordRequest, CreatedApiKey, ResellerAccount, Session, SessionRequest,
};
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap};

use crate::error::{Error, Result};
use crate::http::{Call, PlainHttp, Reply, Resend, Transport, header_value};
use crate::retry::RetryPolicy;

/// A client for the panel endpoints (`/v1/billing/resellers/…`), authenticated with a panel
/// session (`Authorization: Bearer rps_…`, valid 12 hours).
///
/// API keys cannot manage keys: that takes the account's password, through [`Self::login`].
/// The session token is kept inside the client and never shown by `Debug`.
///
/// ```no_run
/// # async fn run() -> Result<(), partner_billing_client::Error> {
/// use partner_billing_client::{Credentials, PanelClient, PartnerClient};
///
/// let mut panel = PanelClient::new("https://billing.example.com")?;
/// panel.login("rsc_…", "the panel password").await?;
/// let key = panel.create_api_key(Some("production")).await?;
/// // The secret is shown once: store it server-side now.
/// let partner = PartnerClient::new("https://billing.example.com", Credentials::from(&key))?;
/// # let _ = partner;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PanelClient {
    transport: Transport,
    session_token: Option<Secret>,
    session_expires_utc: Option<i64>,
}

impl PanelClient {
    /// A client for the service at `base_url` (without `/v1`), not yet logged in.
    ///
    /// A plain `http://` URL is refused unless its host is loopback; see
    /// [`new_allowing_plain_http`](Self::new_allowing_plain_http).
    pub fn new(base_url: impl Into<String>) -> Result<Self> {
        Self::with_transport(Transport::new(&base_url.into(), PlainHttp::LoopbackOnly)?)
    }

    /// As [`new`](Self::new), also accepting plain `http://` to any host: the password and
    /// session tokens then cross the network unencrypted. An explicit opt-in.
    pub fn new_allowing_plain_http(base_url: impl Into<String>) -> Result<Self> {
        Self::with_transport(Transport::new(&base_url.into(), PlainHttp::Allowed)?)
    }

    fn with_transport(transport: Transport) -> Result<Self> {
        Ok(Self {
            transport,
            session_token: None,
            session_expires_utc: None,
        })
    }

    /// The same client using a session token obtained earlier (`rps_…`).
    pub fn using_session_token(mut self, session_token: impl Into<String>) -> Self {
        self.session_token = Some(Secret::from_presented(session_token));
        self
    }

    /// A client that uses a session token obtained earlier (`rps_…`), e.g. kept by a CLI.
    pub fn with_session_token(
        base_url: impl Into<String>,
        session_token: impl Into<String>,
    ) -> Result<Self> {
        let mut client = Self::new(base_url)?;
        client.session_token = Some(Secret::from_presented(session_token));
        Ok(client)
    }

    /// The same client with another retry and timeout policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.transport.policy = policy;
        self
    }

    /// The base URL the client talks to.
    pub fn base_url(&self) -> &str {
        self.transport.base_url()
    }

    /// The current session token, if logged in; a [`Secret`], redacted in `Debug`.
    pub fn session_token(&self) -> Option<&Secret> {
        self.session_token.as_ref()
    }

    /// When the current session ends (Unix seconds, UTC), when known from [`Self::login`].
    pub fn session_expires_utc(&self) -> Option<i64> {
        self.session_expires_utc
    }

    /// `POST /v1/billing/resellers/sessions`: logs in with the account's client id and panel
    /// password, keeps the session in this client and returns it.
    ///
    /// Every rejection (unknown id, wrong password, suspended account) is
    /// [`Error::Unauthorized`].
    pub async fn login(&mut self, client_id: &str, password: &str) -> Result<Session> {
        let request = SessionRequest {
            client_id: client_id.to_owned(),
            password: password.to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let sensitive = [password];
        let call = Call {
            method: Method::POST,
            path: &["v1", "billing", "resellers", "sessions"],
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Some(body),
            // A spare session is harmless: logging in again is safe.
            resend: Resend::WhenRetryable,
            sensitive: &sensitive,
        };
        let reply = self.transport.execute(&call).await?;
        let session: Session = reply.json(&sensitive)?;
        self.session_token = Some(Secret::from_presented(session.session_token.clone()));
        self.session_expires_utc = Some(session.expires_utc);
        Ok(session)
    }

    /// `GET /v1/billing/resellers/me`: the account's client id, name and standing.
    pub async fn me(&self) -> Result<ResellerAccount> {
        let reply = self
            .send(Method::GET, &[], None, Resend::WhenRetryable)
            .await?;
        reply.json(&self.sensitive())
    }

    /// `POST /v1/billing/resellers/me/api-keys`: creates a key, optionally labelled (at most
    /// 64 characters). The returned secret is shown this once; the account's other keys keep
    /// working. With five active keys: [`Error::ApiKeyLimitReached`].
    ///
    /// This write has no idempotency key, so the SDK resends it only when the connection could
    /// not be opened. After a timeout, [`Self::list_api_keys`] tells whether a key was created.
    pub async fn create_api_key(&self, name: Option<&str>) -> Result<CreatedApiKey> {
        let body = match name {
            Some(name) => serde_json::json!({ "name": name }),
            None => serde_json::json!({}),
        };
        let body = Some(body.to_string().into_bytes());
        let reply = self
            .send(Method::POST, &["api-keys"], body, Resend::OnlyIfUnsent)
            .await?;
        reply.json(&self.sensitive())
    }

    /// `GET /v1/billing/resellers/me/api-keys`: every key of the account, revoked ones
    /// included, with when each was last used.
    pub async fn list_api_keys(&self) -> Result<ApiKeyList> {
        let reply = self
            .send(Method::GET, &["api-keys"], None, Resend::WhenRetryable)
            .await?;
        reply.json(&self.sensitive())
    }

    /// `DELETE /v1/billing/resellers/me/api-keys/{apiKeyId}`: revokes a key from the very next
    /// request on. Revoking a revoked key succeeds again; an unknown key (or another account's)
    /// is [`Error::ApiKeyNotFound`].
    pub async fn revoke_api_key(&self, api_key_id: &str) -> Result<()> {
        self.send(
            Method::DELETE,
            &["api-keys", api_key_id],
            None,
            Resend::WhenRetryable,
        )
        .await?;
        Ok(())
    }

    /// `POST /v1/billing/resellers/me/api-keys/{apiKeyId}/roll`: creates a key with the old
    /// key's name (its secret is shown this once) and lets the old key work for
    /// `expires_in_seconds` more (0 to 604800; `None`: the server's default of 86400). After that
    /// the old key gets [`Error::Unauthorized`] and is listed `expired`. With five active keys:
    /// [`Error::ApiKeyLimitReached`]; an unknown, revoked or expired key (or another account's):
    /// [`Error::ApiKeyNotFound`].
    ///
    /// Like [`Self::create_api_key`] this write has no idempotency key, so the SDK resends it
    /// only when the connection could not be opened; after a timeout, [`Self::list_api_keys`]
    /// tells whether the key was rolled.
    pub async fn roll_api_key(
        &self,
        api_key_id: &str,
        expires_in_seconds: Option<i64>,
    ) -> Result<CreatedApiKey> {
        let body = match expires_in_seconds {
            Some(seconds) => serde_json::json!({ "expiresInSeconds": seconds }),
            None => serde_json::json!({}),
        };
        let body = Some(body.to_string().into_bytes());
        let reply = self
            .send(
                Method::POST,
                &["api-keys", api_key_id, "roll"],
                body,
                Resend::OnlyIfUnsent,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// One call under `/v1/billing/resellers/me`, with the session.
    /// Changes the account's panel password (12-128 characters). Every other session of the
    /// account ends; this client's stays. A wrong current password is
    /// `Error::ValidationFailed` naming `currentPassword`.
    pub async fn change_password(&self, current_password: &str, new_password: &str) -> Result<()> {
        let request = ChangePasswordRequest {
            current_password: current_password.to_owned(),
            new_password: new_password.to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let sensitive = [
            self.session_token.as_ref().map_or("", Secret::expose),
            current_password,
            new_password,
        ];
        // Not resent once sent: a lost answer may mean the password already changed.
        self.send_to(
            Method::PUT,
            &["v1", "billing", "resellers", "me", "password"],
            Some(body),
            Resend::OnlyIfUnsent,
            &sensitive,
        )
        .await?;
        Ok(())
    }

    /// Signs out: the session ends at once on the server, and this client forgets it.
    pub async fn sign_out(&mut self) -> Result<()> {
        let sensitive = self.sensitive();
        self.send_to(
            Method::DELETE,
            &["v1", "billing", "resellers", "sessions", "current"],
            None,
            Resend::WhenRetryable,
            &sensitive,
        )
        .await?;
        self.session_token = None;
        self.session_expires_utc = None;
        Ok(())
    }

    pub(crate) async fn send(
        &self,
        method: Method,
        below_me: &[&str],
        body: Option<Vec<u8>>,
        resend: Resend,
    ) -> Result<Reply> {
        let mut path = vec!["v1", "billing", "resellers", "me"];
        path.extend_from_slice(below_me);
        let sensitive = self.sensitive();
        self.send_to(method, &path, body, resend, &sensitive).await
    }

    async fn send_to(
        &self,
        method: Method,
        path: &[&str],
        body: Option<Vec<u8>>,
        resend: Resend,
        sensitive: &[&str],
    ) -> Result<Reply> {
        let token = self
            .session_token
            .as_ref()
            .ok_or_else(|| Error::invalid("session", "log in first (PanelClient::login)"))?;
        let mut headers = HeaderMap::new();
        let bearer = format!("Bearer {}", token.expose());
        headers.insert(AUTHORIZATION, header_value("sessionToken", &bearer, true)?);
        let call = Call {
            method,
            path,
            query: Vec::new(),
            headers,
            body,
            resend,
            sensitive,
        };
        self.transport.execute(&call).await
    }

    /// Values no error may quote.
    pub(crate) fn sensitive(&self) -> [&str; 1] {
        [self.session_token.as_ref().map_or("", Secret::expose)]
    }
}

impl fmt::Debug for PanelClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PanelClient")
            .field("base_url", &self.transport.base_url())
            .field("logged_in", &self.session_token.is_some())
            .field("session_expires_utc", &self.session_expires_utc)
            .field("retry_policy", &self.transport.policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_session_token() {
        let client = PanelClient::with_session_token("http://127.0.0.1:1", "rps_canary").unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("canary"), "{shown}");
        assert!(shown.contains("logged_in: true"));
    }

    #[tokio::test]
    async fn calls_without_a_session_fail_before_sending() {
        let client = PanelClient::new("http://127.0.0.1:1").unwrap();
        let error = client.me().await.unwrap_err();
        assert!(
            matches!(
                error,
                Error::InvalidInput {
                    field: "session",
                    ..
                }
            ),
            "{error}"
        );
    }
}
