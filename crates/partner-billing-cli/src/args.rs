//! Value parsers for clap: each domain value is checked where it enters, so a malformed one is
//! a usage error (exit 2) before anything is contacted.

use partner_billing::domain::{ApiKeyId, ClientId, IdempotencyKey, InvalidField, Login, PlanSlug};

/// The service's address for a reseller command: given after the command, else before it
/// (or `PARTNER_BILLING_BASE_URL`), else the local default.
#[derive(Debug, clap::Args)]
pub struct Remote {
    /// The service [env: PARTNER_BILLING_BASE_URL] [default: http://127.0.0.1:8080]
    #[arg(long = "base-url", global = true, value_name = "URL")]
    base_url: Option<String>,
}

impl Remote {
    pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

    /// This command's `--base-url`, else the one before the command, else the default.
    pub fn resolve(&self, before: Option<String>) -> String {
        self.base_url
            .clone()
            .or(before)
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| Self::DEFAULT_BASE_URL.to_owned())
    }
}

fn message(err: InvalidField) -> String {
    err.message
}

pub fn plan_slug(value: &str) -> Result<PlanSlug, String> {
    PlanSlug::parse("plan", value).map_err(message)
}

pub fn login(value: &str) -> Result<Login, String> {
    Login::parse("login", value).map_err(message)
}

pub fn client_id(value: &str) -> Result<ClientId, String> {
    ClientId::parse("clientId", value).map_err(message)
}

pub fn api_key_id(value: &str) -> Result<ApiKeyId, String> {
    ApiKeyId::parse("apiKeyId", value).map_err(message)
}

pub fn idempotency_key(value: &str) -> Result<IdempotencyKey, String> {
    IdempotencyKey::parse("idempotencyKey", value).map_err(message)
}

/// A number in `lo..=hi`; clap's message names the flag and the range, and a number out of
/// range is a usage error (exit 2), like a malformed one.
pub fn in_range(lo: i64, hi: i64) -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(lo..=hi)
}

/// A quota adjustment's units, checked by the library's own rule.
pub fn adjustment_units(value: &str) -> Result<i64, String> {
    let units: i64 = value
        .parse()
        .map_err(|_| format!("`{value}` is not a whole number"))?;
    partner_billing::quota::check_adjustment_units(units).map_err(message)
}

/// A mistake in how the command was called (a missing password on stdin, a missing
/// credential in the environment): exit status 2, like clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand: a usage error as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}
