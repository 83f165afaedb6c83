//! The rule every keyed write follows, for one request ([`super::start`]) and for a group
//! ([`super::KeyBatch`]) alike: whose key it is, what makes two requests the same request, and
//! what a key comes to against the outcome stored under it.

use crate::domain::{IdempotencyKey, sha256_hex};
use crate::error::{Error, Result};

/// What a request is, for telling "the same request again" from "another request".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub(super) operation: &'static str,
    pub(super) digest: String,
}

impl Fingerprint {
    /// The operation name and its canonical fields, each length-prefixed so that no two
    /// different requests share a fingerprint.
    pub fn new(operation: &'static str, fields: &[&str]) -> Self {
        let mut canonical = String::from(operation);
        for field in fields {
            canonical.push_str(&format!("|{}:{}", field.len(), field));
        }
        Self {
            operation,
            digest: sha256_hex(canonical.as_bytes()),
        }
    }
}

/// Whose idempotency keys a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// A reseller account (partner writes): `idempotency_records`.
    Account(i64),
    /// A product-API caller (`token:<id>` or `console`): `operator_idempotency_records`.
    Operator(&'a str),
}

impl Scope<'_> {
    /// The key as one string, for the in-process registry and the PostgreSQL advisory lock.
    pub(crate) fn lock_name(self, key: &IdempotencyKey) -> String {
        match self {
            Self::Account(account_id) => format!("account:{account_id}:{}", key.as_str()),
            Self::Operator(scope) => format!("operator:{scope}:{}", key.as_str()),
        }
    }
}

/// A keyed request: whose key it is, the key, and what the request is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyedRequest<'a> {
    pub scope: Scope<'a>,
    pub key: &'a IdempotencyKey,
    pub fingerprint: &'a Fingerprint,
}

/// What the check of a key comes to, for one request or each request of a batch: the one
/// outcome type of the write engine. A refusal (the key reused for another request, the key in
/// progress) is an [`Error`] beside it.
#[derive(Debug)]
pub(crate) enum Keyed<T> {
    /// No earlier outcome: the write goes ahead with `T` (the open [`super::KeyedWrite`], or the
    /// effects a batch decided).
    Fresh(T),
    /// The stored response body of the earlier success.
    Replay(String),
}

/// The check itself, from whether this request holds the key (its claim in this process, its
/// lock across replicas) and what is stored under the key: the same rule for
/// [`super::claim`], [`super::start`] and [`super::KeyBatch`]. A stored outcome answers whatever
/// else: the replay, or the key reused for another request. Only a key with nothing stored that
/// another request holds is in progress: its first request is still running.
pub(super) fn check(
    held: bool,
    stored: Option<&StoredOutcome>,
    fingerprint: &Fingerprint,
) -> Result<Keyed<()>> {
    match stored {
        Some(stored)
            if stored.operation != fingerprint.operation
                || stored.fingerprint != fingerprint.digest =>
        {
            Err(Error::IdempotencyKeyReused)
        }
        Some(stored) => Ok(Keyed::Replay(stored.response_body.clone())),
        None if held => Ok(Keyed::Fresh(())),
        None => Err(Error::RequestInProgress),
    }
}

/// A stored outcome, as read back: what request it answered and its response body.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct StoredOutcome {
    pub operation: String,
    pub fingerprint: String,
    pub response_body: String,
}

/// The response body stored for a success: its outcome as JSON.
pub(super) fn response_body<T: serde::Serialize>(outcome: &T) -> Result<String> {
    serde_json::to_string(outcome)
        .map_err(|e| Error::Internal(format!("outcome not serialisable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_separate_fields() {
        let a = Fingerprint::new("license", &["ab", "c"]);
        let b = Fingerprint::new("license", &["a", "bc"]);
        assert_ne!(a, b);
        assert_eq!(a, Fingerprint::new("license", &["ab", "c"]));
        assert_ne!(a, Fingerprint::new("promo_batch", &["ab", "c"]));
    }
}
