//! The HTTP exchange shared by the clients: URL building, one attempt, and the retry loop.

use std::error::Error as _;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Url};

use crate::error::Error;
use crate::response::{decode_success, error_from_response};
use crate::retry::RetryPolicy;

/// Which failures a request may be sent again after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Reads, writes carrying an idempotency key, and writes that are idempotent by nature:
    /// every retryable failure (see [`Error::is_retryable`]).
    WhenRetryable,
    /// Writes with no idempotency key (creating an API key): only when the connection could
    /// not even be opened, so the server cannot have acted.
    OnlyIfUnsent,
}

/// One request, built once and sent as often as the policy allows.
pub(crate) struct Call<'a> {
    pub method: Method,
    /// Path segments after the base URL, each percent-encoded on its own.
    pub path: &'a [&'a str],
    /// Query parameters (name, value), percent-encoded; empty for none.
    pub query: Vec<(&'static str, String)>,
    /// Authentication headers.
    pub headers: HeaderMap,
    /// A JSON body, serialised once so every attempt sends the same bytes.
    pub body: Option<Vec<u8>>,
    pub resend: Resend,
    /// Values never to be quoted in an error (the caller's secret or token).
    pub sensitive: &'a [&'a str],
}

/// A success answer.
pub(crate) struct Reply {
    pub status: u16,
    /// The server sent `Idempotent-Replayed: true`: a stored result, nothing charged again.
    pub replayed: bool,
    pub body: Vec<u8>,
}

impl Reply {
    /// Decodes the JSON body.
    pub fn json<T: serde::de::DeserializeOwned>(&self, sensitive: &[&str]) -> Result<T, Error> {
        decode_success(self.status, &self.body, sensitive)
    }
}

/// A failed attempt, and whether the request surely never reached the server.
struct Failure {
    error: Error,
    unsent: bool,
}

/// Whether a client may send its credentials over plain `http://` to a host that is not
/// loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainHttp {
    /// `http://` only to loopback hosts; `https://` anywhere (the default).
    LoopbackOnly,
    /// `http://` to any host: the caller accepts that secrets cross the network in clear
    /// (e.g. a private network or a TLS-terminating sidecar).
    Allowed,
}

/// Whether the URL's host is this machine.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let host = host.to_ascii_lowercase();
            host == "localhost" || host.ends_with(".localhost")
        }
    }
}

/// The base URL, the connection pool and the retry policy.
#[derive(Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    base_url: Url,
    pub policy: RetryPolicy,
}

impl Transport {
    /// Checks the base URL (`http` or `https`, no user info, query or fragment) and builds the
    /// connection pool. Redirects are not followed: a redirect must never carry the secret
    /// headers to another host.
    ///
    /// Plain `http://` carries secrets readable on the way, so it is refused unless the host
    /// is loopback (`localhost`, `127.0.0.0/8`, `::1`) or `plain_http` is
    /// [`PlainHttp::Allowed`] (the caller's explicit opt-in).
    pub fn new(base_url: &str, plain_http: PlainHttp) -> Result<Self, Error> {
        let base_url = Url::parse(base_url.trim())
            .map_err(|err| Error::invalid("base URL", err.to_string()))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(Error::invalid(
                "base URL",
                "the scheme must be http or https",
            ));
        }
        if base_url.scheme() == "http"
            && plain_http == PlainHttp::LoopbackOnly
            && !is_loopback(&base_url)
        {
            return Err(Error::invalid(
                "base URL",
                "plain http:// would send the credentials unencrypted: use https://, or opt in \
                 explicitly (the clients' `new_allowing_plain_http` constructors)",
            ));
        }
        if !base_url.username().is_empty() || base_url.password().is_some() {
            return Err(Error::invalid(
                "base URL",
                "credentials do not belong in the URL",
            ));
        }
        if base_url.query().is_some() || base_url.fragment().is_some() {
            return Err(Error::invalid(
                "base URL",
                "it must not have a query or a fragment",
            ));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "partner-billing-client/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|err| Error::Transport(describe(&err)))?;
        Ok(Self {
            http,
            base_url,
            policy: RetryPolicy::default(),
        })
    }

    /// The base URL as given (normalised).
    pub fn base_url(&self) -> &str {
        self.base_url.as_str()
    }

    fn url(&self, path: &[&str], query: &[(&'static str, String)]) -> Url {
        let mut url = self.base_url.clone();
        // Cannot fail: the scheme was checked to be http(s), which always has a path.
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends the call, retrying within the policy, and returns the first success or the last
    /// error.
    pub async fn execute(&self, call: &Call<'_>) -> Result<Reply, Error> {
        let url = self.url(call.path, &call.query);
        let started = tokio::time::Instant::now();
        let mut attempt = 1;
        loop {
            let failure = match self.attempt(&url, call).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let may_resend = match call.resend {
                Resend::WhenRetryable => failure.error.is_retryable(),
                Resend::OnlyIfUnsent => failure.unsent,
            };
            if !may_resend {
                return Err(failure.error);
            }
            let Some(delay) =
                self.policy
                    .next_retry(attempt, started.elapsed(), failure.error.retry_after())
            else {
                return Err(failure.error);
            };
            tracing::debug!(
                method = %call.method,
                path = url.path(),
                attempt,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %failure.error,
                "partner-billing request failed; retrying"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn attempt(&self, url: &Url, call: &Call<'_>) -> Result<Reply, Failure> {
        let mut request = self
            .http
            .request(call.method.clone(), url.clone())
            .timeout(self.policy.request_timeout)
            .headers(call.headers.clone())
            .header(
                ACCEPT,
                HeaderValue::from_static("application/json, application/problem+json"),
            );
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone());
        }
        let response = request.send().await.map_err(transport_failure)?;
        let status = response.status().as_u16();
        let headers = response.headers();
        let replayed = headers
            .get("idempotent-replayed")
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"));
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let body = response.bytes().await.map_err(transport_failure)?.to_vec();
        if (200..300).contains(&status) {
            Ok(Reply {
                status,
                replayed,
                body,
            })
        } else {
            let error = error_from_response(status, retry_after.as_deref(), &body, call.sensitive);
            Err(Failure {
                error,
                unsent: false,
            })
        }
    }
}

fn transport_failure(err: reqwest::Error) -> Failure {
    let unsent = err.is_connect();
    let error = if err.is_timeout() {
        Error::Timeout
    } else {
        Error::Transport(describe(&err))
    };
    Failure { error, unsent }
}

/// A reqwest error with its chain of causes ("… : tcp connect error: Connection refused").
/// Request headers (where the secret travels) never appear in these messages.
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A header value built from caller input, or `InvalidInput` naming what was wrong.
pub(crate) fn header_value(
    field: &'static str,
    value: &str,
    sensitive: bool,
) -> Result<HeaderValue, Error> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| Error::invalid(field, "must be visible ASCII characters"))?;
    header.set_sensitive(sensitive);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_and_encode_segments() {
        let transport = Transport::new("http://127.0.0.1:8080", PlainHttp::LoopbackOnly).unwrap();
        assert_eq!(
            transport
                .url(&["v1", "billing", "partner", "balances"], &[])
                .as_str(),
            "http://127.0.0.1:8080/v1/billing/partner/balances"
        );
        let transport =
            Transport::new("https://example.com/prefix/", PlainHttp::LoopbackOnly).unwrap();
        assert_eq!(
            transport.url(&["v1", "keys", "../a b/?"], &[]).as_str(),
            "https://example.com/prefix/v1/keys/..%2Fa%20b%2F%3F"
        );
        assert_eq!(
            transport
                .url(&["v1", "ledger"], &[("cursor", "a+b&c=d".to_owned())])
                .as_str(),
            "https://example.com/prefix/v1/ledger?cursor=a%2Bb%26c%3Dd"
        );
    }

    #[test]
    fn base_urls_are_checked() {
        assert!(matches!(
            Transport::new("not a url", PlainHttp::LoopbackOnly),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            Transport::new("ftp://example.com", PlainHttp::LoopbackOnly),
            Err(Error::InvalidInput { .. })
        ));
        let error = Transport::new(
            "https://rsc_x:rss_canary@example.com",
            PlainHttp::LoopbackOnly,
        )
        .err()
        .unwrap();
        assert!(!error.to_string().contains("canary"), "{error}");
        assert!(Transport::new("https://example.com/?q=1", PlainHttp::LoopbackOnly).is_err());
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        for refused in [
            "http://billing.example.com",
            "http://10.0.0.5:8080",
            "http://[fe80::1]",
        ] {
            let error = Transport::new(refused, PlainHttp::LoopbackOnly).err();
            assert!(
                matches!(error, Some(Error::InvalidInput { .. })),
                "{refused} must be refused"
            );
            assert!(
                Transport::new(refused, PlainHttp::Allowed).is_ok(),
                "{refused} opted in"
            );
        }
        for allowed in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
            "https://billing.example.com",
        ] {
            assert!(
                Transport::new(allowed, PlainHttp::LoopbackOnly).is_ok(),
                "{allowed} must be allowed"
            );
        }
    }

    #[test]
    fn header_values_reject_control_characters() {
        assert!(header_value("clientId", "rsc_ok", false).is_ok());
        assert!(header_value("secret", "rss\nbad", true).is_err());
        assert!(
            header_value("secret", "rss_ok", true)
                .unwrap()
                .is_sensitive()
        );
    }
}
