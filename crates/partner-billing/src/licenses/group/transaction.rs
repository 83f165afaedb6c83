//! One group transaction: the first try without locks where the backend has one, else (or
//! after a conflict) the locked way; then each request's answer.

use sqlx::pool::PoolConnection;
use sqlx::{Any, Connection};

use super::decide::{Decided, Step, decide, keyed_requests};
use super::pending::Pending;
use super::read::read_group;
use super::writes::Written;
use crate::db::dialect::{
    self,
    group::{FirstTry, GroupStatements, GroupWrite},
};
use crate::error::{Error, Result};
use crate::idempotency::{self, Fingerprint, KeyBatch, Keyed, Outcome};
use crate::keys::PartnerAccount;
use crate::licenses::request::fingerprint;
use crate::request_scope;
use crate::store::{CrashPoint, HoldPoint, Store, Tx, crash_point};
use crate::wire::License;

/// The retryable error every request of a failed transaction answers with.
fn shared_failure(err: &Error) -> Error {
    match err {
        Error::Unavailable(_) => Error::Unavailable(sqlx::Error::Io(std::io::Error::other(
            "the license transaction could not reach the database",
        ))),
        // Retryable, nothing committed: the client's retry with its key settles it.
        Error::Overloaded => Error::Overloaded,
        other => Error::Internal(format!("the license transaction failed: {other}")),
    }
}

/// Runs the group's transaction and answers each request; `committed_licenses` is told the size
/// of the group when its transaction committed licenses, before any request is answered.
pub(super) async fn run_transaction(
    store: &Store,
    mut batch: Vec<Pending>,
    conn: &mut Option<PoolConnection<Any>>,
    committed_licenses: &(dyn Fn(usize) + Sync),
) {
    // Concurrent requests have no order of their own to keep; the sort is stable, so one
    // balance's requests keep their arrival order.
    batch.sort_by_key(|p| (p.account.account_id, p.plan.map(|plan| plan.id)));
    if let Some(first) = batch.first() {
        store
            .pass(HoldPoint::LicenseGroupTaken, first.account.account_id)
            .await;
    }
    let statements = dialect::license_group(store.backend());
    let settled = match statements.first_try {
        Some(first_try) => match optimistic(store, first_try, conn, &batch).await {
            Ok(Some(settled)) => Ok(settled),
            // A row changed between the read and the write: the careful way settles it.
            Ok(None) => locked_until_settled(store, statements, &batch).await,
            Err(err) => {
                *conn = None;
                Err(err)
            }
        },
        None => locked_until_settled(store, statements, &batch).await,
    };
    let (steps, committed) = match settled {
        Ok(settled) => settled,
        Err(err) => {
            for pending in batch {
                let _ = pending.reply.send(Err(shared_failure(&err)));
            }
            return;
        }
    };
    if committed.is_ok() && steps.iter().any(|s| matches!(s, Ok(Keyed::Fresh(_)))) {
        tracing::debug!(requests = batch.len(), "license group committed");
        committed_licenses(batch.len());
    }
    for (pending, step) in batch.into_iter().zip(steps) {
        let answer = match (step, &committed) {
            (Ok(Keyed::Fresh(license)), Ok(())) => Ok(Outcome {
                value: license,
                replayed: false,
            }),
            // A replay may have read a record this very transaction wrote (a retry queued
            // beside its original): it stands only if the transaction committed.
            (Ok(_), Err(err)) => Err(shared_failure(err)),
            (Ok(Keyed::Replay(body)), Ok(())) => idempotency::replayed(&body),
            (Err(err), _) => Err(err),
        };
        // The caller writes "license issued" in its own task, off this lane (`AnswerSlot`); if
        // it went away before its answer, the line is written here, in its request's scope,
        // since the license stands.
        if let Err(answer) = pending.reply.send(answer) {
            request_scope::within(pending.request_id, || {
                log_if_issued(&pending.account, &answer)
            });
        }
    }
}

/// The "license issued" line of an answer that carries a fresh license (not a replay), in the
/// scope of the request that asked for it (see `AnswerSlot` for who writes it).
pub(super) fn log_if_issued(account: &PartnerAccount, answer: &Result<Outcome<License>>) {
    if let Ok(issued) = answer
        && !issued.replayed
    {
        tracing::info!(
            client_id = %account.client_id,
            license_id = %issued.value.license_id,
            plan = %issued.value.plan_slug,
            "license issued"
        );
    }
}

/// Each request's fingerprint, in batch order.
fn fingerprints(batch: &[Pending]) -> Vec<Fingerprint> {
    batch.iter().map(|p| fingerprint(&p.request)).collect()
}

/// Each request's step, and whether the writes committed (`Ok` too when there were none).
type Settled = (Vec<Step>, Result<()>);

/// The first try where the backend has one (PostgreSQL), two statements and no explicit
/// transaction: one read without locks, the decisions, then one write statement that commits
/// on its own and guards everything the decisions assumed (every balance still holds what was read, no key has a
/// record yet). If another process moved a row in between, the write fails whole and this
/// answers `None`: nothing was written, and the caller runs the group again under locks.
async fn optimistic(
    store: &Store,
    first_try: FirstTry,
    lane_conn: &mut Option<PoolConnection<Any>>,
    batch: &[Pending],
) -> Result<Option<Settled>> {
    let conn = match lane_conn {
        Some(conn) => conn,
        None => lane_conn.insert(store.pool().acquire().await?),
    };
    let read = read_group(conn, first_try.read, batch).await?;
    // No lock is taken before the read: the write takes every key's lock it records.
    let fingerprints = fingerprints(batch);
    let keys = KeyBatch::unlocked(keyed_requests(batch, &fingerprints));
    let decided = decide(store, batch, &keys, &read)?;
    if decided.charges.is_empty() {
        // Replays and refusals, read from committed rows: nothing to write.
        return Ok(Some((decided.into_steps()?, Ok(()))));
    }
    let writes = decided.writes(store, batch, &read, &keys)?;
    crash_point(CrashPoint::BeforeCommit);
    match writes.run_one_statement(first_try.write, conn).await {
        Ok(Written::All) => {}
        Ok(Written::Conflict) => {
            // PostgreSQL reports the error before it has rolled the statement back and
            // released its advisory locks; the locked try must not find them still held.
            // The ping's answer comes after the rollback.
            conn.ping().await?;
            return Ok(None);
        }
        Err(err) if rolled_back(&err) => {
            // The database refused the statement (a timeout, say): it rolled back, so the
            // locked way may try again. Its answer follows the rollback, as after a conflict.
            conn.ping().await?;
            return Ok(None);
        }
        Err(err) => {
            // Sent but unanswered: it may have committed, so no retry here; the client's
            // retry with its key settles it. The connection may be broken: not kept.
            *lane_conn = None;
            return Ok(Some((decided.into_steps()?, Err(err))));
        }
    }
    crash_point(CrashPoint::AfterCommit);
    if writes.has_events() {
        store.wake_webhook_worker();
    }
    Ok(Some((decided.into_steps()?, Ok(()))))
}

/// Whether a failed first-try write certainly did not commit: the database answered it with
/// an error of the statement's own, not a lost or closing connection (after which it may have
/// committed or not).
fn rolled_back(err: &Error) -> bool {
    match err {
        Error::Unavailable(sqlx::Error::Database(db)) => db
            .code()
            .is_some_and(|code| !code.starts_with("08") && !code.starts_with("57P0")),
        Error::Unavailable(_) => false,
        _ => true,
    }
}

/// The group in one transaction under locks: on PostgreSQL every key's advisory lock and every
/// balance row locked before the read; on SQLite the write lock taken by `BEGIN IMMEDIATE`.
/// How many times the locked way runs before the group answers "too busy" (503, retryable).
const LOCKED_TRIES: usize = 4;

/// The locked way, again in a fresh transaction when its write found a row another writer
/// changed after the read's snapshot: under READ COMMITTED a statement that waited for a lock
/// still reads the other tables as of its start, so a subscription chain another replica
/// created meanwhile (no row existed to lock) is seen only by the next statement.
async fn locked_until_settled(
    store: &Store,
    statements: &GroupStatements,
    batch: &[Pending],
) -> Result<Settled> {
    let mut tries = 1;
    loop {
        match locked(store, statements, batch).await {
            Err(Error::Overloaded) if tries < LOCKED_TRIES => tries += 1,
            other => return other,
        }
    }
}

async fn locked(store: &Store, statements: &GroupStatements, batch: &[Pending]) -> Result<Settled> {
    let mut tx = store.begin_write().await?;
    let decided = match locked_steps(store, statements, &mut tx, batch).await {
        Ok(decided) => decided,
        Err(err) => {
            let _ = tx.rollback().await;
            return Err(err);
        }
    };
    let committed = if decided.charges.is_empty() {
        let _ = tx.rollback().await;
        Ok(())
    } else {
        crash_point(CrashPoint::BeforeCommit);
        let committed = tx.commit().await.map_err(Error::from);
        if committed.is_ok() {
            crash_point(CrashPoint::AfterCommit);
        }
        committed
    };
    Ok((decided.into_steps()?, committed))
}

/// The locked group's statements and decisions; an error fails the whole group.
async fn locked_steps(
    store: &Store,
    statements: &GroupStatements,
    tx: &mut Tx,
    batch: &[Pending],
) -> Result<Decided> {
    let fingerprints = fingerprints(batch);
    let keys = KeyBatch::lock(store, tx, keyed_requests(batch, &fingerprints)).await?;
    let read = read_group(tx, statements.read_locked, batch).await?;
    let decided = decide(store, batch, &keys, &read)?;
    if !decided.charges.is_empty() {
        let writes = decided.writes(store, batch, &read, &keys)?;
        match statements.write {
            GroupWrite::OneStatement(sql) => {
                if writes.run_one_statement(sql, tx).await? == Written::Conflict {
                    // Only a writer that slipped past every lock gets here (a key recorded
                    // twice in one group is refused before): retryable, nothing committed.
                    return Err(Error::Overloaded);
                }
            }
            GroupWrite::PerTable(sql) => writes.run_per_table(sql, tx).await?,
        }
        if writes.has_events() {
            store.wake_webhook_worker();
        }
    }
    Ok(decided)
}
