//! The idempotency checks of a license group transaction, set-oriented: every key's lock in
//! one statement, every stored outcome checked in memory, every record in one insert.

use crate::db::{Backend, Tx, json_param};
use crate::domain::IdempotencyKey;
use crate::error::{Error, Result};
use crate::store::Store;

use super::{Fingerprint, Scope};

/// One keyed request of a group transaction: its account, its key and what it is.
pub(crate) struct GroupKeyedRequest<'a> {
    pub account_id: i64,
    pub key: &'a IdempotencyKey,
    pub fingerprint: &'a Fingerprint,
}

/// What a group transaction found for one of its keyed requests.
#[derive(Debug)]
pub(crate) enum Found {
    /// No earlier outcome, and the key is this transaction's: do the work.
    Fresh,
    /// The stored response body of the earlier success.
    Replay(String),
    /// Refused: the key is in progress on another replica, or names another request.
    Refused(Error),
}

/// A stored outcome as a group transaction reads it: operation, fingerprint, response body.
pub(crate) type StoredOutcome = (String, String, String);

/// The set-oriented lock of [`find_outcome`]: on PostgreSQL one statement tries every key's
/// advisory lock and tells, in the order of `requests`, which it holds (a key held by another
/// replica is [`Error::RequestInProgress`]); SQLite's write lock already covers every key.
/// The stored outcomes must be read by a later statement, whose snapshot follows the locks.
pub(crate) async fn try_lock_many(
    store: &Store,
    tx: &mut Tx,
    requests: &[GroupKeyedRequest<'_>],
) -> Result<Vec<bool>> {
    if store.backend() != Backend::Postgres || requests.is_empty() {
        return Ok(vec![true; requests.len()]);
    }
    let names = lock_names(requests);
    let locked: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtextextended(t.name, 0)) \
         FROM json_array_elements_text($1::json) WITH ORDINALITY AS t(name, n) ORDER BY t.n",
    )
    .bind(json_param(&names)?)
    .fetch_all(&mut **tx)
    .await?;
    if locked.len() != requests.len() {
        return Err(Error::Internal("advisory locks miscounted".to_owned()));
    }
    Ok(locked)
}

/// The names of the requests' advisory locks, as [`try_lock_many`] takes them.
pub(crate) fn lock_names<'a>(
    requests: impl IntoIterator<Item = &'a GroupKeyedRequest<'a>>,
) -> Vec<String> {
    requests
        .into_iter()
        .map(|r| Scope::Account(r.account_id).lock_name(r.key))
        .collect()
}

/// What [`find_outcome`] concludes for a request from its lock and its stored outcome.
pub(crate) fn check(
    locked: bool,
    stored: Option<&StoredOutcome>,
    fingerprint: &Fingerprint,
) -> Found {
    if !locked {
        return Found::Refused(Error::RequestInProgress);
    }
    match stored {
        None => Found::Fresh,
        Some((operation, digest, _))
            if *operation != fingerprint.operation || *digest != fingerprint.digest =>
        {
            Found::Refused(Error::IdempotencyKeyReused)
        }
        Some((_, _, body)) => Found::Replay(body.clone()),
    }
}

/// The row [`record`] stores for a success, as a group transaction inserts it: account, key,
/// operation, fingerprint, response body.
pub(crate) fn record_row<'a, T: serde::Serialize>(
    request: &GroupKeyedRequest<'a>,
    outcome: &T,
) -> Result<(i64, &'a str, &'static str, &'a str, String)> {
    let body = serde_json::to_string(outcome)
        .map_err(|e| Error::Internal(format!("outcome not serialisable: {e}")))?;
    Ok((
        request.account_id,
        request.key.as_str(),
        request.fingerprint.operation,
        request.fingerprint.digest.as_str(),
        body,
    ))
}

/// The set-oriented [`record`] of a group transaction: one statement stores every success's
/// row ([`record_row`]), each with status 200. SQLite's group runs it; PostgreSQL's writes
/// the same rows in its one statement (`licenses/group`).
pub(crate) async fn record_many(
    tx: &mut Tx,
    rows: &[(i64, &str, &'static str, &str, String)],
    now_utc: i64,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let sql = "INSERT INTO idempotency_records \
             (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
             json_extract(value, '$[2]'), json_extract(value, '$[3]'), 200, \
             json_extract(value, '$[4]'), $2 FROM json_each($1) ORDER BY key";
    sqlx::query(sql)
        .bind(json_param(rows)?)
        .bind(now_utc)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
