//! Idempotency of partner and product writes (docs/design.md).
//!
//! A partner key is scoped to the account (it survives key rotation) and shared by both partner
//! write endpoints; a product key is scoped to its caller (an operator token, or the operator's
//! console), in a table of its own. The first success stores its status and body in the same
//! transaction as its effect (the charge, the license); a retry with the same request replays
//! that body and changes nothing, a retry with a different request is refused, and a retry while
//! the first still runs is `RequestInProgress`. Outcomes that consumed nothing are not stored, so
//! a retry runs again.

use crate::db::{Tx, dialect, is_unique_violation};
use crate::domain::{IdempotencyKey, sha256_hex};
use crate::error::{Error, Result};
use crate::faults::{CrashPoint, crash_point};
use crate::runtime::InFlightGuard;
use crate::store::Store;

mod group;

pub(crate) use group::{
    Found, GroupKeyedRequest, StoredOutcome, check, lock_names, record_many, record_row,
    try_lock_many,
};

/// The outcome of a partner write, and whether it was replayed from an earlier success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    pub value: T,
    pub replayed: bool,
}

/// What a request is, for telling "the same request again" from "another request".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    operation: &'static str,
    digest: String,
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

/// Holds the key for this request: in this process (a map of keys in flight) and, on
/// PostgreSQL, across replicas (a transaction-scoped advisory lock taken in [`begin`]).
pub(crate) struct Claim {
    _in_flight: InFlightGuard,
}

/// Claims the key in this process, or answers `RequestInProgress`.
pub(crate) fn claim(store: &Store, scope: Scope<'_>, key: &IdempotencyKey) -> Result<Claim> {
    Ok(Claim {
        _in_flight: store.claim_in_flight(scope.lock_name(key))?,
    })
}

/// [`claim`], naming the operation (`license`, `promo_batch`) that the request lookup reports
/// while the request runs.
pub(crate) fn claim_for(
    store: &Store,
    scope: Scope<'_>,
    key: &IdempotencyKey,
    operation: &'static str,
) -> Result<Claim> {
    Ok(Claim {
        _in_flight: store.claim_in_flight_for(scope.lock_name(key), operation)?,
    })
}

/// Whether an outcome is already stored for the key: a read without lock or transaction, so a
/// retry can skip work that only a fresh request needs (drawing 1000 promo codes). [`begin`]
/// still decides, under the lock.
pub(crate) async fn has_outcome(
    store: &Store,
    scope: Scope<'_>,
    key: &IdempotencyKey,
) -> Result<bool> {
    let found: Option<i64> = match scope {
        Scope::Account(account_id) => sqlx::query_scalar(
            "SELECT 1 FROM idempotency_records WHERE account_id = $1 AND idempotency_key = $2",
        )
        .bind(account_id),
        Scope::Operator(owner) => sqlx::query_scalar(
            "SELECT 1 FROM operator_idempotency_records WHERE scope = $1 AND idempotency_key = $2",
        )
        .bind(owner),
    }
    .bind(key.as_str())
    .fetch_optional(store.pool())
    .await?;
    Ok(found.is_some())
}

/// Begins the write transaction of a keyed request and looks for an earlier outcome.
/// Returns the open transaction, or the stored body when this is a replay.
pub(crate) async fn begin(
    store: &Store,
    _claim: &Claim,
    scope: Scope<'_>,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Begun> {
    let mut tx = store.begin_write().await?;
    match find_outcome(store, &mut tx, scope, key, fingerprint).await {
        Ok(None) => Ok(Begun::Fresh(tx)),
        Ok(Some(body)) => {
            // Release the key's lock now, not when the connection is next used.
            let _ = tx.rollback().await;
            Ok(Begun::Replay(body))
        }
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}

/// Locks the key across replicas (PostgreSQL) and reads its stored outcome, if any.
pub(crate) async fn find_outcome(
    store: &Store,
    tx: &mut Tx,
    scope: Scope<'_>,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Option<String>> {
    if !dialect::try_lock_name(store.backend(), tx, &scope.lock_name(key)).await? {
        return Err(Error::RequestInProgress);
    }
    let row: Option<(String, String, String)> = match scope {
        Scope::Account(account_id) => sqlx::query_as(
            "SELECT operation, fingerprint, response_body FROM idempotency_records \
             WHERE account_id = $1 AND idempotency_key = $2",
        )
        .bind(account_id),
        Scope::Operator(owner) => sqlx::query_as(
            "SELECT operation, fingerprint, response_body FROM operator_idempotency_records \
             WHERE scope = $1 AND idempotency_key = $2",
        )
        .bind(owner),
    }
    .bind(key.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    let Some((operation, digest, response_body)) = row else {
        return Ok(None);
    };
    if operation != fingerprint.operation || digest != fingerprint.digest {
        return Err(Error::IdempotencyKeyReused);
    }
    Ok(Some(response_body))
}

/// Ends the transaction of a keyed request: COMMIT on success, an immediate ROLLBACK on
/// failure, so the key's lock is released before the answer and an immediate retry runs again
/// instead of meeting `RequestInProgress`.
pub(crate) async fn settle<T>(tx: Tx, result: Result<T>) -> Result<T> {
    match result {
        Ok(value) => {
            crash_point(CrashPoint::BeforeCommit);
            tx.commit().await?;
            crash_point(CrashPoint::AfterCommit);
            Ok(value)
        }
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
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

/// What [`begin_keyed`] found.
pub(crate) enum Started<'a> {
    /// No earlier outcome: write the effects in this transaction, then
    /// [`commit`](KeyedWrite::commit).
    Fresh(KeyedWrite<'a>),
    /// The stored response body of the earlier success.
    Replay(String),
}

/// A keyed write under way: its transaction, and the time it began, read once the key's
/// lock was held.
pub(crate) struct KeyedWrite<'a> {
    tx: Tx,
    request: KeyedRequest<'a>,
    now_utc: i64,
}

/// Begins the write transaction of a keyed request (see [`begin`]): the stored answer of an
/// earlier success, or a [`KeyedWrite`] to write the effects in.
pub(crate) async fn begin_keyed<'a>(
    store: &Store,
    claim: &Claim,
    request: KeyedRequest<'a>,
) -> Result<Started<'a>> {
    match begin(
        store,
        claim,
        request.scope,
        request.key,
        request.fingerprint,
    )
    .await?
    {
        Begun::Replay(body) => Ok(Started::Replay(body)),
        Begun::Fresh(tx) => Ok(Started::Fresh(KeyedWrite {
            tx,
            request,
            now_utc: store.now_utc(),
        })),
    }
}

impl KeyedWrite<'_> {
    /// The transaction the effects are written in.
    pub(crate) fn tx(&mut self) -> &mut Tx {
        &mut self.tx
    }

    /// The time of this write, Unix seconds: every row it writes carries the same.
    pub(crate) fn now_utc(&self) -> i64 {
        self.now_utc
    }

    /// The one way a keyed write ends: on success the record of its outcome is written and
    /// committed together with its effects; on an error all of it is rolled back at once
    /// (see [`settle`]), so a retry runs again.
    pub(crate) async fn commit<T: serde::Serialize>(mut self, effects: Result<T>) -> Result<T> {
        let KeyedRequest {
            scope,
            key,
            fingerprint,
        } = self.request;
        let result = match effects {
            Ok(outcome) => record(
                &mut self.tx,
                scope,
                key,
                fingerprint,
                &outcome,
                self.now_utc,
            )
            .await
            .map(|()| outcome),
            Err(err) => Err(err),
        };
        settle(self.tx, result).await
    }
}

/// The stored outcome of an earlier success, as the caller's type, flagged as a replay.
pub(crate) fn replayed<T: serde::de::DeserializeOwned>(body: &str) -> Result<Outcome<T>> {
    let value = serde_json::from_str(body)
        .map_err(|e| Error::Internal(format!("stored outcome unreadable: {e}")))?;
    Ok(Outcome {
        value,
        replayed: true,
    })
}

/// What [`begin`] found.
pub(crate) enum Begun {
    /// No earlier outcome: do the work in this transaction.
    Fresh(Tx),
    /// The stored response body of the earlier success.
    Replay(String),
}

/// Stores the outcome of a success (its response body, as JSON) inside its transaction.
pub(crate) async fn record<T: serde::Serialize>(
    tx: &mut Tx,
    scope: Scope<'_>,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    outcome: &T,
    now_utc: i64,
) -> Result<()> {
    let response_body = serde_json::to_string(outcome)
        .map_err(|e| Error::Internal(format!("outcome not serialisable: {e}")))?;
    match scope {
        Scope::Account(account_id) => sqlx::query(
            "INSERT INTO idempotency_records \
             (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
             VALUES ($1, $2, $3, $4, 200, $5, $6)",
        )
        .bind(account_id),
        Scope::Operator(owner) => sqlx::query(
            "INSERT INTO operator_idempotency_records \
             (scope, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
             VALUES ($1, $2, $3, $4, 200, $5, $6)",
        )
        .bind(owner),
    }
    .bind(key.as_str())
    .bind(fingerprint.operation)
    .bind(fingerprint.digest.as_str())
    .bind(response_body.as_str())
    .bind(now_utc)
    .execute(&mut **tx)
    .await
    .map_err(|e| {
        // Only reachable if another writer slipped past both locks: treat as in progress.
        if is_unique_violation(&e) {
            Error::RequestInProgress
        } else {
            e.into()
        }
    })?;
    Ok(())
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
