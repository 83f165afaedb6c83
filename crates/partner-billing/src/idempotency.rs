//! Idempotency of every keyed write (docs/design.md, docs/write-engine.md).
//!
//! A partner key is scoped to the account (it survives key rotation) and shared by both partner
//! write endpoints; a product key is scoped to its caller (an operator token, or the operator's
//! console), in a table of its own. The first success stores its status and body in the same
//! transaction as its effect (the charge, the license); a retry with the same request replays
//! that body and changes nothing, a retry with a different request is refused, and a retry while
//! the first still runs is `RequestInProgress`. Outcomes that consumed nothing are not stored, so
//! a retry runs again.
//!
//! One API for every keyed write, in four steps: `claim` the key in this process, check it
//! (`start` for one request, `KeyBatch` for a group of many), decide and write the effects,
//! record the outcome with them (`KeyedWrite::commit`, or the batch's record rows). What a
//! key check comes to is one type, `Keyed`; its refusals are errors.

use crate::db::{Tx, dialect, is_unique_violation};
use crate::domain::IdempotencyKey;
use crate::error::{Error, Result};
use crate::faults::{CrashPoint, crash_point};
use crate::runtime::InFlightGuard;
use crate::store::Store;

mod batch;
mod rule;

pub(crate) use batch::{KeyBatch, RecordRow};
pub use rule::Fingerprint;
pub(crate) use rule::{Keyed, KeyedRequest, Scope, StoredOutcome};
use rule::{check, response_body};

/// The outcome of a partner write, and whether it was replayed from an earlier success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    pub value: T,
    pub replayed: bool,
}

/// Holds the key for this request in this process (a map of keys in flight); across replicas
/// the PostgreSQL advisory lock taken by [`start`] or [`KeyBatch::lock`] holds it.
pub(crate) struct Claim {
    _in_flight: InFlightGuard,
}

/// Claims the key in this process for `request`, naming its operation (`license`,
/// `promo_batch`, `promo_redemption`) for the request lookup while it runs. When another
/// request of this process holds the key, the key's record answers, read without a lock: the
/// replay of an earlier success, or the key reused for another request; with no record the
/// first request is still running, and the answer is `RequestInProgress`. A fresh key costs
/// no statement here.
pub(crate) async fn claim(
    store: &Store,
    request: KeyedRequest<'_>,
    operation: &'static str,
) -> Result<Keyed<Claim>> {
    let name = request.scope.lock_name(request.key);
    if let Some(in_flight) = store.claim_in_flight(name, operation) {
        return Ok(Keyed::Fresh(Claim {
            _in_flight: in_flight,
        }));
    }
    let stored = read_outcome(store.pool(), request.scope, request.key).await?;
    match check(false, stored.as_ref(), request.fingerprint)? {
        Keyed::Replay(body) => Ok(Keyed::Replay(body)),
        Keyed::Fresh(()) => Err(Error::RequestInProgress),
    }
}

/// What is stored under the key, if anything.
async fn read_outcome<'c, E>(
    executor: E,
    scope: Scope<'_>,
    key: &IdempotencyKey,
) -> Result<Option<StoredOutcome>>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    Ok(match scope {
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
    .fetch_optional(executor)
    .await?)
}

/// Whether an outcome is already stored for the key: a read without lock or transaction, so a
/// retry can skip work that only a fresh request needs (drawing 1000 promo codes). [`start`]
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

/// Checks the key of one request: begins its write transaction, takes the key's lock across
/// replicas (PostgreSQL) and reads its stored outcome. A replay or a refusal ends the
/// transaction at once (releasing the lock); a fresh request gets the open [`KeyedWrite`].
pub(crate) async fn start<'a>(
    store: &Store,
    _claim: &Claim,
    request: KeyedRequest<'a>,
) -> Result<Keyed<KeyedWrite<'a>>> {
    let mut tx = store.begin_write().await?;
    match stored_outcome(store, &mut tx, request).await {
        Ok(Keyed::Fresh(())) => Ok(Keyed::Fresh(KeyedWrite {
            tx,
            request,
            now_utc: store.now_utc(),
        })),
        other => {
            // Release the key's lock now, not when the connection is next used.
            let _ = tx.rollback().await;
            other.map(|keyed| match keyed {
                Keyed::Replay(body) => Keyed::Replay(body),
                Keyed::Fresh(()) => unreachable!("a fresh key keeps its transaction"),
            })
        }
    }
}

/// Locks the key across replicas (PostgreSQL) and checks its stored outcome, if any. The
/// outcome is read whether the lock was taken or not: another replica may hold it only to
/// replay the same record.
async fn stored_outcome(
    store: &Store,
    tx: &mut Tx,
    request: KeyedRequest<'_>,
) -> Result<Keyed<()>> {
    let KeyedRequest {
        scope,
        key,
        fingerprint,
    } = request;
    let held = dialect::try_lock_name(store.backend(), tx, &scope.lock_name(key)).await?;
    let stored = read_outcome(&mut **tx, scope, key).await?;
    check(held, stored.as_ref(), fingerprint)
}

/// A keyed write under way: its transaction, and the time it began, read once the key's
/// lock was held.
pub(crate) struct KeyedWrite<'a> {
    tx: Tx,
    request: KeyedRequest<'a>,
    now_utc: i64,
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

    /// Ends the write without effects, releasing the key's lock at once.
    pub(crate) async fn abandon(self) {
        let _ = self.tx.rollback().await;
    }

    /// The one way a keyed write ends: on success the record of its outcome is written and
    /// committed together with its effects; on an error all of it is rolled back at once, so
    /// the key's lock is released before the answer and an immediate retry runs again instead
    /// of meeting `RequestInProgress`.
    pub(crate) async fn commit<T: serde::Serialize>(mut self, effects: Result<T>) -> Result<T> {
        let result = match effects {
            Ok(outcome) => record(&mut self.tx, self.request, &outcome, self.now_utc)
                .await
                .map(|()| outcome),
            Err(err) => Err(err),
        };
        match result {
            Ok(value) => {
                crash_point(CrashPoint::BeforeCommit);
                self.tx.commit().await?;
                crash_point(CrashPoint::AfterCommit);
                Ok(value)
            }
            Err(err) => {
                let _ = self.tx.rollback().await;
                Err(err)
            }
        }
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

/// Stores the outcome of a success inside its transaction.
async fn record<T: serde::Serialize>(
    tx: &mut Tx,
    request: KeyedRequest<'_>,
    outcome: &T,
    now_utc: i64,
) -> Result<()> {
    let KeyedRequest {
        scope,
        key,
        fingerprint,
    } = request;
    let response_body = response_body(outcome)?;
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
