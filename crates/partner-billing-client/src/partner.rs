//! The partner API: what a reseller's backend calls with its API key.

use std::fmt;

use partner_billing::domain::IdempotencyKey;
use partner_billing::wire::{
    Balances, GeneratePromoBatchRequest, IssueLicenseRequest, License, LicenseRecord, PromoBatch,
};
use reqwest::Method;
use reqwest::header::HeaderMap;

use crate::credentials::Credentials;
use crate::error::{Error, Result};
use crate::http::{Call, PlainHttp, Reply, Resend, Transport, header_value};
use crate::retry::RetryPolicy;

const PARTNER: [&str; 3] = ["v1", "billing", "partner"];

/// The most codes one promo batch request may ask for.
pub const MAX_PROMO_BATCH_COUNT: u32 = partner_billing::limits::PROMO_BATCH_MAX_CODES as u32;

/// The result of a write, with what a caller needs to reconcile it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued<T> {
    /// What the server returned.
    pub value: T,
    /// `true` when the server answered from its idempotency record (`Idempotent-Replayed:
    /// true`): this request had already succeeded before, and nothing was charged again.
    pub replayed: bool,
    /// The idempotency key the request was sent with: the caller's, or the one the SDK
    /// generated. Keep it to retry the same request later without a second charge.
    pub idempotency_key: String,
}

/// A client for the partner endpoints (`/v1/billing/partner/…`), authenticated with an API key
/// sent as `X-Client-Id` / `X-Client-Secret`.
///
/// Cheap to clone: clones share one connection pool. Every write carries an idempotency key,
/// kept across the SDK's own retries, so a retried request is never charged twice.
///
/// ```no_run
/// # async fn run() -> Result<(), partner_billing_client::Error> {
/// use partner_billing_client::{Credentials, Error, PartnerClient};
///
/// let client = PartnerClient::new(
///     "https://billing.example.com",
///     Credentials::new("rsc_…", std::env::var("PARTNER_BILLING_SECRET").unwrap_or_default()),
/// )?;
/// match client.issue_license("pro", "alice@example.com", None).await {
///     Ok(issued) => println!("license {} (replayed: {})", issued.value.license_id, issued.replayed),
///     Err(Error::InsufficientQuota { .. }) => println!("top up first; nothing was charged"),
///     Err(error) if !error.is_definite() => println!("outcome unknown: retry with the same key"),
///     Err(error) => return Err(error),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PartnerClient {
    transport: Transport,
    credentials: Credentials,
    auth_headers: HeaderMap,
}

impl PartnerClient {
    /// A client for the service at `base_url` (e.g. `https://billing.example.com`, without
    /// `/v1`), with the default [`RetryPolicy`].
    ///
    /// Fails with [`Error::InvalidInput`] when the URL is not `http(s)`, carries user info, or
    /// the credentials cannot be sent as headers.
    ///
    /// A plain `http://` URL is refused unless its host is loopback (the secret would cross
    /// the network in clear); see [`new_allowing_plain_http`](Self::new_allowing_plain_http).
    pub fn new(base_url: impl Into<String>, credentials: Credentials) -> Result<Self> {
        Self::with_transport(
            Transport::new(&base_url.into(), PlainHttp::LoopbackOnly)?,
            credentials,
        )
    }

    /// As [`new`](Self::new), also accepting plain `http://` to any host: the secret then
    /// crosses the network unencrypted. An explicit opt-in, e.g. behind a TLS sidecar.
    pub fn new_allowing_plain_http(
        base_url: impl Into<String>,
        credentials: Credentials,
    ) -> Result<Self> {
        Self::with_transport(
            Transport::new(&base_url.into(), PlainHttp::Allowed)?,
            credentials,
        )
    }

    fn with_transport(transport: Transport, credentials: Credentials) -> Result<Self> {
        let mut auth_headers = HeaderMap::new();
        auth_headers.insert(
            "x-client-id",
            header_value("clientId", &credentials.client_id, false)?,
        );
        auth_headers.insert(
            "x-client-secret",
            header_value("secret", credentials.secret.expose(), true)?,
        );
        Ok(Self {
            transport,
            credentials,
            auth_headers,
        })
    }

    /// The same client with another retry and timeout policy; [`RetryPolicy::none`] shows every
    /// answer, `409 Reseller.RequestInProgress` included, as the server sent it.
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

    /// The account this client acts for (its client id).
    pub fn client_id(&self) -> &str {
        &self.credentials.client_id
    }

    /// `GET /v1/billing/partner/balances`: every product ever credited to the account, zero
    /// balances included, sorted by slug.
    pub async fn balances(&self) -> Result<Balances> {
        let reply = self.send(Method::GET, "balances", None).await?;
        reply.json(&self.sensitive())
    }

    /// `POST /v1/billing/partner/licenses`: grants one subscription of `plan_slug` to the
    /// registered end user `login`, for one unit of quota.
    ///
    /// `idempotency_key` (8–128 visible ASCII characters) makes the call safe to repeat: the
    /// same key and request return the stored license with [`Issued::replayed`] set, and charge
    /// nothing. With `None` the SDK generates one and returns it in [`Issued::idempotency_key`];
    /// store your own key beforehand if you may need to retry after a crash.
    ///
    /// Errors of note: [`Error::InsufficientQuota`], [`Error::UnknownPlan`],
    /// [`Error::UnknownLogin`], [`Error::IdempotencyKeyReused`], and — once retries are used
    /// up — [`Error::RequestInProgress`] or an indefinite transport error.
    pub async fn issue_license(
        &self,
        plan_slug: &str,
        login: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Issued<License>> {
        let idempotency_key = resolve_idempotency_key(idempotency_key)?;
        let request = IssueLicenseRequest {
            plan_slug: plan_slug.to_owned(),
            login: login.to_owned(),
            idempotency_key: idempotency_key.as_str().to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let reply = self.send(Method::POST, "licenses", Some(body)).await?;
        Ok(Issued {
            value: reply.json(&self.sensitive())?,
            replayed: reply.replayed,
            idempotency_key: idempotency_key.as_str().to_owned(),
        })
    }

    /// `POST /v1/billing/partner/promo-batches`: generates `count` (1–1000) promo codes of
    /// `plan_slug`, each redeemable for one subscription, and charges `count` units up front,
    /// as one unit of work (no partial fill). Unredeemed codes are not refunded.
    ///
    /// The answer is the only place the plaintext codes appear. Retrying with the same
    /// `idempotency_key` returns the same batch (with [`Issued::replayed`] set, nothing charged
    /// again) for about 72 hours from [`PromoBatch::created_utc`]; after that the codes are gone
    /// for good and the retry fails with [`Error::PromoCodesExpired`], whose
    /// [`problem`](Error::problem) names `order_public_id` and `batch_id`. With `None` the SDK
    /// generates a key and returns it in [`Issued::idempotency_key`]; store your own key
    /// beforehand if you may need to recover the codes after a crash.
    ///
    /// The SDK retries transport failures, timeouts, `503` and [`Error::RequestInProgress`]
    /// with the same key. It does **not** retry [`Error::PromoGenerationFailed`]: that `500`
    /// is a definite outcome (nothing charged, nothing issued), and the caller may retry it
    /// with the same key when it sees fit.
    ///
    /// Errors of note: [`Error::InvalidInput`] (a count outside 1–1000 or a malformed key,
    /// nothing sent), [`Error::InsufficientQuota`] (nothing consumed), [`Error::UnknownPlan`],
    /// [`Error::IdempotencyKeyReused`], [`Error::PromoGenerationFailed`],
    /// [`Error::PromoCodesExpired`], and — once retries are used up —
    /// [`Error::RequestInProgress`] or an indefinite transport error.
    ///
    /// ```no_run
    /// # async fn run(client: partner_billing_client::PartnerClient) -> Result<(), partner_billing_client::Error> {
    /// let issued = client.generate_promo_batch("pro", 50, Some("campaign-2024-05")).await?;
    /// for code in &issued.value.codes {
    ///     println!("{}", code.code);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn generate_promo_batch(
        &self,
        plan_slug: &str,
        count: u32,
        idempotency_key: Option<&str>,
    ) -> Result<Issued<PromoBatch>> {
        if !(1..=MAX_PROMO_BATCH_COUNT).contains(&count) {
            return Err(Error::invalid(
                "count",
                format!("must be 1-{MAX_PROMO_BATCH_COUNT}"),
            ));
        }
        let idempotency_key = resolve_idempotency_key(idempotency_key)?;
        let request = GeneratePromoBatchRequest {
            plan_slug: plan_slug.to_owned(),
            count: i64::from(count),
            idempotency_key: idempotency_key.as_str().to_owned(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let reply = self.send(Method::POST, "promo-batches", Some(body)).await?;
        Ok(Issued {
            value: decode_withholding_body(&reply)?,
            replayed: reply.replayed,
            idempotency_key: idempotency_key.as_str().to_owned(),
        })
    }

    /// `DELETE /v1/billing/partner/licenses/{licenseId}`: revokes one of the account's licenses
    /// (issued by it, or redeemed from its promo codes) and returns it with `revoked_utc` set.
    /// The login's later licenses of the plan move earlier by the unused time; no unit comes
    /// back. Safe to repeat: revoking again returns the same license, unchanged.
    ///
    /// Errors of note: [`Error::LicenseNotFound`] (unknown, malformed or another reseller's id).
    pub async fn revoke_license(&self, license_id: &str) -> Result<LicenseRecord> {
        let reply = self
            .send_to(Method::DELETE, &["licenses", license_id], Vec::new(), None)
            .await?;
        reply.json(&self.sensitive())
    }

    /// One call to a partner endpoint, retried within the policy.
    async fn send(&self, method: Method, endpoint: &str, body: Option<Vec<u8>>) -> Result<Reply> {
        self.send_to(method, &[endpoint], Vec::new(), body).await
    }

    /// One call to the partner endpoint at the path segments `endpoint` (each percent-encoded
    /// on its own) with a query, retried within the policy.
    pub(crate) async fn send_to(
        &self,
        method: Method,
        endpoint: &[&str],
        query: Vec<(&'static str, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<Reply> {
        let mut path = PARTNER.to_vec();
        path.extend_from_slice(endpoint);
        let sensitive = self.sensitive();
        let call = Call {
            method,
            path: &path,
            query,
            headers: self.auth_headers.clone(),
            body,
            resend: Resend::WhenRetryable,
            sensitive: &sensitive,
        };
        self.transport.execute(&call).await
    }

    /// Values no error may quote.
    pub(crate) fn sensitive(&self) -> [&str; 1] {
        [self.credentials.secret.expose()]
    }
}

impl fmt::Debug for PartnerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartnerClient")
            .field("base_url", &self.transport.base_url())
            .field("credentials", &self.credentials)
            .field("retry_policy", &self.transport.policy)
            .finish()
    }
}

/// The caller's key, checked, or a fresh one.
pub(crate) fn resolve_idempotency_key(given: Option<&str>) -> Result<IdempotencyKey> {
    match given {
        Some(key) => Ok(IdempotencyKey::parse("idempotencyKey", key)?),
        None => Ok(IdempotencyKey::generate()),
    }
}

/// Decodes a success body that may hold plaintext promo codes. When it does not decode, the
/// error says where and why, but quotes neither the body nor serde's message (which can quote
/// a value, i.e. a code).
fn decode_withholding_body<T: serde::de::DeserializeOwned>(reply: &Reply) -> Result<T> {
    serde_json::from_slice(&reply.body).map_err(|err| {
        let what = match err.classify() {
            serde_json::error::Category::Io => "an I/O error",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "an unexpected shape",
            serde_json::error::Category::Eof => "a truncated body",
        };
        let content_free = if reply.body.is_empty() {
            " (empty body)".to_owned()
        } else {
            String::new()
        };
        Error::UnexpectedResponse {
            status: reply.status,
            body_snippet: format!(
                "{what} at line {} column {}{content_free}; body withheld: it may hold promo codes",
                err.line(),
                err.column()
            ),
        }
    })
}
