//! The product API: what the product's own backend calls with an operator token.

use std::fmt;

use partner_billing::domain::Secret;
use partner_billing::wire::{
    EndUser, Entitlements, RedeemPromoCodeRequest, RedeemedLicense, RegisterUserRequest,
    UserLicenses,
};
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap};

use crate::error::{Error, Result};
use crate::http::{Call, PlainHttp, Reply, Resend, Transport, header_value};
use crate::partner::{Issued, resolve_idempotency_key};
use crate::retry::RetryPolicy;

const PRODUCT: [&str; 3] = ["v1", "billing", "product"];

/// A login after [`ProductClient::register_user`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The login and when it was first registered.
    pub user: EndUser,
    /// `true` when this call registered the login (`201`), `false` when it was registered
    /// before (`200`). After an SDK retry of a lost answer this can be `false` although the
    /// first attempt did the registering.
    pub created: bool,
}

/// A client for the product endpoints (`/v1/billing/product/…`), for the product's own backend,
/// authenticated with an operator token (`Authorization: Bearer rso_…`).
///
/// The token is kept as a [`Secret`]: it never appears in `Debug` output or error messages.
/// Cheap to clone: clones share one connection pool.
///
/// ```no_run
/// # async fn run() -> Result<(), partner_billing_client::Error> {
/// use partner_billing_client::{Error, ProductClient};
///
/// let token = std::env::var("PARTNER_BILLING_OPERATOR_TOKEN").unwrap_or_default();
/// let client = ProductClient::new("https://billing.example.com", token)?;
/// client.register_user("alice@example.com").await?;
/// match client.redeem_promo_code("abcd-efgh-jkmn-pqrs", "alice@example.com", None).await {
///     Ok(issued) => println!("license {} of {}", issued.value.license_id, issued.value.plan_slug),
///     Err(Error::CodeNotFound { .. }) => println!("no such code"),
///     Err(Error::TooManyAttempts { retry_after, .. }) => println!("wait {retry_after:?}"),
///     Err(error) => return Err(error),
/// }
/// for license in client.user_licenses("alice@example.com").await?.licenses {
///     println!("{} {} until {:?}", license.plan_slug, license.source, license.expires_utc);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ProductClient {
    transport: Transport,
    token: Secret,
    auth_headers: HeaderMap,
}

impl ProductClient {
    /// A client for the service at `base_url` (without `/v1`) with an operator token
    /// (`rso_…`), with the default [`RetryPolicy`].
    ///
    /// Fails with [`Error::InvalidInput`] when the URL is not `http(s)` or carries user info,
    /// or the token cannot be sent as a header.
    ///
    /// A plain `http://` URL is refused unless its host is loopback; see
    /// [`new_allowing_plain_http`](Self::new_allowing_plain_http).
    pub fn new(base_url: impl Into<String>, operator_token: impl Into<String>) -> Result<Self> {
        Self::with_transport(
            Transport::new(&base_url.into(), PlainHttp::LoopbackOnly)?,
            operator_token,
        )
    }

    /// As [`new`](Self::new), also accepting plain `http://` to any host: the operator token
    /// then crosses the network unencrypted. An explicit opt-in.
    pub fn new_allowing_plain_http(
        base_url: impl Into<String>,
        operator_token: impl Into<String>,
    ) -> Result<Self> {
        Self::with_transport(
            Transport::new(&base_url.into(), PlainHttp::Allowed)?,
            operator_token,
        )
    }

    fn with_transport(transport: Transport, operator_token: impl Into<String>) -> Result<Self> {
        let token = Secret::from_presented(operator_token);
        let mut auth_headers = HeaderMap::new();
        let bearer = format!("Bearer {}", token.expose());
        auth_headers.insert(AUTHORIZATION, header_value("operatorToken", &bearer, true)?);
        Ok(Self {
            transport,
            token,
            auth_headers,
        })
    }

    /// The same client with another retry and timeout policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.transport.policy = policy;
        self
    }

    /// The policy in force.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.transport.policy
    }

    /// The base URL the client talks to.
    pub fn base_url(&self) -> &str {
        self.transport.base_url()
    }

    /// `POST /v1/billing/product/users`: registers an end user's login (1–254 characters, no
    /// control characters). Idempotent: registering a login again changes nothing.
    pub async fn register_user(&self, login: &str) -> Result<Registration> {
        let request = RegisterUserRequest {
            login: login.to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let reply = self.send(Method::POST, &["users"], Some(body), &[]).await?;
        Ok(Registration {
            user: reply.json(&self.sensitive(&[]))?,
            created: reply.status == 201,
        })
    }

    /// `POST /v1/billing/product/promo-redemptions`: redeems a promo code (as the user typed
    /// it) for the registered `login` and returns the license granted. Nothing is charged: the
    /// reseller paid for the code when it generated the batch.
    ///
    /// `idempotency_key` (8–128 visible ASCII characters) makes the call safe to repeat: the
    /// same key and request return the same license with [`Issued::replayed`] set. With `None`
    /// the SDK generates one and returns it in [`Issued::idempotency_key`].
    ///
    /// Errors of note: [`Error::CodeNotFound`] (unknown or malformed: one answer),
    /// [`Error::CodeExpired`], [`Error::CodeExhausted`], [`Error::AlreadyRedeemed`],
    /// [`Error::UnknownLogin`], and [`Error::TooManyAttempts`] after too many failed
    /// redemptions for the login (wait [`Error::retry_after`]; the SDK does not retry it).
    pub async fn redeem_promo_code(
        &self,
        code: &str,
        login: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Issued<RedeemedLicense>> {
        let idempotency_key = resolve_idempotency_key(idempotency_key)?;
        let request = RedeemPromoCodeRequest {
            code: code.to_owned(),
            login: login.to_owned(),
            idempotency_key: idempotency_key.as_str().to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let reply = self
            .send(Method::POST, &["promo-redemptions"], Some(body), &[code])
            .await?;
        Ok(Issued {
            value: reply.json(&self.sensitive(&[code]))?,
            replayed: reply.replayed,
            idempotency_key: idempotency_key.as_str().to_owned(),
        })
    }

    /// `GET /v1/billing/product/users/{login}/licenses`: every license of a registered login,
    /// direct and redeemed, oldest first. An unregistered login is [`Error::UnknownLogin`].
    pub async fn user_licenses(&self, login: &str) -> Result<UserLicenses> {
        let reply = self
            .send(Method::GET, &["users", login, "licenses"], None, &[])
            .await?;
        reply.json(&self.sensitive(&[]))
    }

    /// `GET /v1/billing/product/users/{login}/entitlements`: what the login may use now and
    /// until when, one entry per plan with an unrevoked license that has not ended, sorted by
    /// slug. The answer for the sign-in path: a plan not listed is not held. An unregistered
    /// login is [`Error::UnknownLogin`].
    ///
    /// ```no_run
    /// # async fn run(client: partner_billing_client::ProductClient) -> Result<(), partner_billing_client::Error> {
    /// let held = client.entitlements("alice@example.com").await?;
    /// let may_use_pro = held.entitlements.iter().any(|e| e.plan_slug == "pro" && e.active_now);
    /// # let _ = may_use_pro;
    /// # Ok(()) }
    /// ```
    pub async fn entitlements(&self, login: &str) -> Result<Entitlements> {
        let reply = self
            .send(Method::GET, &["users", login, "entitlements"], None, &[])
            .await?;
        reply.json(&self.sensitive(&[]))
    }

    /// One call to a product endpoint, retried within the policy: every write here is
    /// idempotent (by key, or by nature).
    async fn send(
        &self,
        method: Method,
        below: &[&str],
        body: Option<Vec<u8>>,
        also_sensitive: &[&str],
    ) -> Result<Reply> {
        let mut path = PRODUCT.to_vec();
        path.extend_from_slice(below);
        let sensitive = self.sensitive(also_sensitive);
        let call = Call {
            method,
            path: &path,
            query: Vec::new(),
            headers: self.auth_headers.clone(),
            body,
            resend: Resend::WhenRetryable,
            sensitive: &sensitive,
        };
        self.transport.execute(&call).await
    }

    /// Values no error may quote: the token, and a promo code being redeemed.
    fn sensitive<'a>(&'a self, also: &[&'a str]) -> Vec<&'a str> {
        let mut values = vec![self.token.expose()];
        values.extend_from_slice(also);
        values
    }
}

impl fmt::Debug for ProductClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProductClient")
            .field("base_url", &self.transport.base_url())
            .field("operator_token", &"[redacted]")
            .field("retry_policy", &self.transport.policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let client = ProductClient::new("http://127.0.0.1:1", "rso_canary").unwrap();
        let shown = format!("{client:?} {client:#?}");
        assert!(!shown.contains("canary"), "{shown}");
    }

    #[test]
    fn a_token_that_cannot_be_a_header_is_refused_without_echo() {
        let error = ProductClient::new("http://127.0.0.1:1", "rso_canary\n").unwrap_err();
        assert!(matches!(error, Error::InvalidInput { .. }));
        assert!(!error.to_string().contains("canary"), "{error}");
    }
}
