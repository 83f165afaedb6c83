//! Group commit for license issue: concurrent requests share one transaction and one COMMIT,
//! and the transaction is set-oriented: a constant number of statements whatever its size.
//!
//! On one hot account every license takes the same balance row lock from its debit to its
//! COMMIT, so requests queue behind each other's durable flush; spread over many accounts
//! they still each pay a COMMIT (an fsync). Here the first request of a lane starts a
//! committer task; requests that arrive while it works wait in the lane's queue, and the
//! committer takes them all into its next transaction, which runs, for the whole group:
//!
//! 1. one read of every login (`users`);
//! 2. on PostgreSQL one statement taking every key's advisory lock, then one read of every
//!    stored outcome (`idempotency::find_outcomes`);
//! 3. one read of every balance row the group debits, locked in (account, plan) order
//!    (`quota::lock_balances`);
//! 4. the decisions, in Rust, request by request in arrival order within each balance: the
//!    first N that the balance covers are charged, the rest refused;
//! 5. when any is charged: one read of the accounts' webhook endpoints (and of their
//!    low-balance thresholds when one subscribes to `balance.low`), one balance update, one
//!    insert each of ledger entries, licenses, events and outbox messages (when subscribed),
//!    and idempotency records.
//!
//! Each request still gets its own answer:
//!
//! - a request refused for a reason of its own (unknown login, insufficient quota, a reused
//!   key, a key in progress on another replica) writes nothing, so the others go on;
//! - a replay is answered from the stored outcome;
//! - a database failure rolls the whole transaction back and every request of it gets a
//!   retryable error: none of them committed, and a retry with the same key settles it.
//!
//! With no concurrency a group holds one request. On SQLite there is one lane, since every
//! write takes the one write lock anyway; on PostgreSQL a few lanes, an account always in the
//! same one, so spread traffic shares commits while lanes commit in parallel. Balance rows
//! are locked in one order in every transaction of every process, so lanes and replicas never
//! deadlock on each other's rows.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::{Any, Connection};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::idempotency::{self, Fingerprint, Outcome};
use crate::keys::PartnerAccount;
use crate::plans::{PlanRow, cached_plan};
use crate::store::{Backend, CrashPoint, Store, Tx, crash_point};
use crate::wire::License;

use super::{IssueLicense, fingerprint};

mod decide;
mod statements;

use decide::{Charge, Decided, decide, keyed_requests};
use statements::{Lock, Written, read_group};

/// Most requests one transaction takes; more wait for the next one.
const MAX_GROUP: usize = 64;

/// Commit lanes on PostgreSQL: groups that commit in parallel, each account always in the
/// same one; one per two CPUs, at most [`MAX_LANES`]. Fewer lanes make bigger groups (fewer
/// statements and commits per license), more lanes overlap their round trips: on two CPUs
/// one lane measured best at 8 and 64 clients (docs/performance.md). SQLite has one lane: its
/// writers take one lock anyway.
fn postgres_lanes() -> i64 {
    static LANES: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        i64::try_from(cpus / 2).unwrap_or(1).clamp(1, MAX_LANES)
    })
}

/// At most this many lanes. A busy lane holds a pool connection (two during a locked retry):
/// two lanes and eight promo batches at once leave at least four of the 16 PostgreSQL
/// connections for everything else. More lanes measured no better on two CPUs.
const MAX_LANES: i64 = 2;

/// One request waiting for its group's transaction.
struct Pending {
    account: PartnerAccount,
    request: IssueLicense,
    plan: PlanRow,
    reply: oneshot::Sender<Result<Outcome<License>>>,
    /// The request's span (its request id): the group's lines about this request are
    /// written inside it, though the group runs in a task of its own.
    span: tracing::Span,
}

/// The queues of the lanes that have a committer running. A lane is in the map exactly
/// while its committer runs.
#[derive(Default)]
pub(crate) struct LicenseGroups {
    queues: Mutex<HashMap<i64, Vec<Pending>>>,
    running: AtomicUsize,
    transactions: AtomicU64,
    observer: std::sync::OnceLock<GroupObserver>,
}

/// Told the size of every group transaction that commits (the server's metrics).
pub(crate) type GroupObserver = Box<dyn Fn(usize) + Send + Sync>;

impl std::fmt::Debug for LicenseGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LicenseGroups").finish_non_exhaustive()
    }
}

impl LicenseGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<Pending>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting for their group's next transaction, requests inside a running one,
    /// and group transactions begun since start.
    pub(crate) fn stats(&self) -> (usize, usize, u64) {
        let waiting = self.lock().values().map(Vec::len).sum();
        (
            waiting,
            self.running.load(Ordering::SeqCst),
            self.transactions.load(Ordering::SeqCst),
        )
    }

    /// Sets the observer of committed group sizes; only the first call counts.
    pub(crate) fn observe(&self, observer: GroupObserver) {
        let _ = self.observer.set(observer);
    }
}

/// Issues the license in its group's next transaction; answers when that transaction ends.
pub(crate) async fn issue(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    // Unknown plans are refused here, outside any transaction; logins are read by the group.
    let plan = cached_plan(store, &request.plan).await?;
    let lane = match store.backend() {
        Backend::Postgres => account.account_id.rem_euclid(postgres_lanes()),
        Backend::Sqlite => 0,
    };
    let (reply, answer) = oneshot::channel();
    let pending = Pending {
        account: account.clone(),
        request,
        plan,
        reply,
        span: tracing::Span::current(),
    };
    let start_committer = {
        let mut queues = store.license_groups().lock();
        match queues.get_mut(&lane) {
            Some(queue) => {
                queue.push(pending);
                false
            }
            None => {
                queues.insert(lane, vec![pending]);
                true
            }
        }
    };
    if start_committer {
        // A task of its own: the group's transactions finish even if this caller goes away.
        tokio::spawn(run_group(store.clone(), lane));
    }
    answer.await.unwrap_or_else(|_| {
        Err(Error::Internal(
            "the license transaction ended without an answer".to_owned(),
        ))
    })
}

/// Takes the lane out of the map when its committer ends, however it ends: a panic drops
/// the waiting requests' reply channels, so they answer 500 instead of waiting forever.
struct GroupGuard {
    store: Store,
    lane: i64,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.store.license_groups().lock().remove(&self.lane);
        }
    }
}

/// Runs the lane's transactions until its queue is empty.
async fn run_group(store: Store, lane: i64) {
    let _guard = GroupGuard {
        store: store.clone(),
        lane,
    };
    // The lane's connection for PostgreSQL's first tries, kept from one group to the next
    // while requests keep coming (no pool round trip per group); dropped after an error.
    let mut conn = None;
    loop {
        let batch = {
            let mut queues = store.license_groups().lock();
            let Some(queue) = queues.get_mut(&lane) else {
                return;
            };
            if queue.is_empty() {
                queues.remove(&lane);
                return;
            }
            let take = queue.len().min(MAX_GROUP);
            let groups = store.license_groups();
            groups.running.fetch_add(take, Ordering::SeqCst);
            groups.transactions.fetch_add(1, Ordering::SeqCst);
            queue.drain(..take).collect::<Vec<_>>()
        };
        let size = batch.len();
        run_transaction(&store, batch, &mut conn).await;
        store
            .license_groups()
            .running
            .fetch_sub(size, Ordering::SeqCst);
    }
}

/// What one request came to inside the shared transaction, before COMMIT.
enum Step {
    Fresh(License),
    Replay(String),
    Refused(Error),
}

/// The retryable error every request of a failed transaction answers with.
fn shared_failure(err: &Error) -> Error {
    match err {
        Error::Unavailable(_) => Error::Unavailable(sqlx::Error::Io(std::io::Error::other(
            "the license transaction could not reach the database",
        ))),
        other => Error::Internal(format!("the license transaction failed: {other}")),
    }
}

async fn run_transaction(
    store: &Store,
    mut batch: Vec<Pending>,
    conn: &mut Option<PoolConnection<Any>>,
) {
    // Concurrent requests have no order of their own to keep; the sort is stable, so one
    // balance's requests keep their arrival order.
    batch.sort_by_key(|p| (p.account.account_id, p.plan.id));
    let settled = match store.backend() {
        Backend::Postgres => match optimistic(store, conn, &batch).await {
            Ok(Some(settled)) => Ok(settled),
            // A row changed between the read and the write: the careful way settles it.
            Ok(None) => locked(store, &batch).await,
            Err(err) => {
                *conn = None;
                Err(err)
            }
        },
        Backend::Sqlite => locked(store, &batch).await,
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
    if committed.is_ok() && steps.iter().any(|s| matches!(s, Step::Fresh(_))) {
        tracing::debug!(requests = batch.len(), "license group committed");
        if let Some(observe) = store.license_groups().observer.get() {
            observe(batch.len());
        }
    }
    for (pending, step) in batch.into_iter().zip(steps) {
        let answer = match (step, &committed) {
            (Step::Fresh(license), Ok(())) => {
                pending.span.in_scope(|| {
                    tracing::info!(
                        client_id = %pending.account.client_id,
                        license_id = %license.license_id,
                        plan = %pending.request.plan,
                        "license issued"
                    )
                });
                Ok(Outcome {
                    value: license,
                    replayed: false,
                })
            }
            // A replay may have read a record this very transaction wrote (a retry queued
            // beside its original): it stands only if the transaction committed.
            (Step::Fresh(_) | Step::Replay(_), Err(err)) => Err(shared_failure(err)),
            (Step::Replay(body), Ok(())) => idempotency::replayed(&body),
            (Step::Refused(err), _) => Err(err),
        };
        let _ = pending.reply.send(answer);
    }
}

/// Each request's fingerprint, in batch order.
fn fingerprints(batch: &[Pending]) -> Vec<Fingerprint> {
    batch.iter().map(|p| fingerprint(&p.request)).collect()
}

/// Each request's step, and whether the writes committed (`Ok` too when there were none).
type Settled = (Vec<Step>, Result<()>);

/// PostgreSQL's first try, two statements and no explicit transaction: one read without
/// locks, the decisions, then one write statement that commits on its own and guards
/// everything the decisions assumed (every balance still holds what was read, no key has a
/// record yet). If another process moved a row in between, the write fails whole and this
/// answers `None`: nothing was written, and the caller runs the group again under locks.
async fn optimistic(
    store: &Store,
    lane_conn: &mut Option<PoolConnection<Any>>,
    batch: &[Pending],
) -> Result<Option<Settled>> {
    let conn = match lane_conn {
        Some(conn) => conn,
        None => lane_conn.insert(store.pool().acquire().await?),
    };
    let read = read_group(store, conn, batch, Lock::None).await?;
    // No lock is taken before the read: the write takes every key's lock it records.
    let keys_held = vec![true; batch.len()];
    let decided = decide(store, batch, fingerprints(batch), &read, &keys_held)?;
    if decided.charges.is_empty() {
        // Replays and refusals, read from committed rows: nothing to write.
        return Ok(Some((decided.into_steps()?, Ok(()))));
    }
    let writes = decided.writes(store, batch, &read)?;
    crash_point(CrashPoint::BeforeCommit);
    match writes
        .run_postgres(conn, batch, &decided.charges, decided.now)
        .await
    {
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
    if !writes.events.is_empty() {
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
async fn locked(store: &Store, batch: &[Pending]) -> Result<Settled> {
    let mut tx = store.begin_write().await?;
    let decided = match locked_steps(store, &mut tx, batch).await {
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
async fn locked_steps(store: &Store, tx: &mut Tx, batch: &[Pending]) -> Result<Decided> {
    let fingerprints = fingerprints(batch);
    let keys_held =
        idempotency::try_lock_many(store, tx, &keyed_requests(batch, &fingerprints)).await?;
    let read = read_group(store, tx, batch, Lock::ForUpdate).await?;
    let decided = decide(store, batch, fingerprints, &read, &keys_held)?;
    if !decided.charges.is_empty() {
        let writes = decided.writes(store, batch, &read)?;
        match store.backend() {
            Backend::Postgres => {
                let written = writes
                    .run_postgres(tx, batch, &decided.charges, decided.now)
                    .await?;
                if written == Written::Conflict {
                    // Only a writer that slipped past every lock gets here (a key recorded
                    // twice in one group is refused before): retryable, nothing committed.
                    return Err(Error::Overloaded);
                }
            }
            Backend::Sqlite => {
                writes
                    .run_sqlite(store, tx, batch, &decided.charges, decided.now)
                    .await?;
            }
        }
        if !writes.events.is_empty() {
            store.wake_webhook_worker();
        }
    }
    Ok(decided)
}

/// The license group queues live in the runtime's slot for them, typed here, so that the
/// store below knows no license type.
impl Store {
    pub(crate) fn license_groups(&self) -> &LicenseGroups {
        self.runtime().license_groups.get_or_default()
    }

    /// Calls `observer` with the number of requests of every license group transaction that
    /// commits (for metrics); only the first observer set on a store counts.
    pub fn observe_license_groups(&self, observer: impl Fn(usize) + Send + Sync + 'static) {
        self.license_groups().observe(Box::new(observer));
    }

    /// License requests waiting for a group transaction, requests inside a running one, and
    /// group transactions begun: for tests that check the grouping itself.
    #[doc(hidden)]
    pub fn license_group_stats(&self) -> (usize, usize, u64) {
        self.license_groups().stats()
    }
}
