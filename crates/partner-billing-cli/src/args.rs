//! Value parsers for clap: each domain value is checked where it enters, so a malformed one is
//! a usage error (exit 2) before anything is contacted.

use partner_billing::domain::{ApiKeyId, ClientId, IdempotencyKey, InvalidField, Login, PlanSlug};

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
