//! The license engine: every license is decided and written here, by one piece of code,
//! whatever the group size. Concurrent requests share one transaction and one COMMIT (group
//! commit), and the transaction is set-oriented: a constant number of statements whatever its
//! size. With group commit off each request is a group of one, through the same code.
//!
//! On one hot account every license takes the same balance row lock from its debit to its
//! COMMIT, so requests queue behind each other's durable flush; spread over many accounts
//! they still each pay a COMMIT (an fsync). Here the first request of a lane starts a
//! committer task; requests that arrive while it works wait in the lane's queue, and the
//! committer takes them all into its next transaction (`group/transaction.rs`), which runs,
//! for the whole group:
//!
//! 1. under locks, one statement taking every key's advisory lock (PostgreSQL;
//!    `idempotency::KeyBatch`);
//! 2. one read, by name, of every login, stored outcome, balance (locked in (account, plan)
//!    order under locks), webhook endpoint and low-balance threshold (`group/read.rs`);
//! 3. the decisions, in Rust, in the one order of checks of every keyed write: the key, the
//!    plan, the balance and the login; within each balance in arrival order, the first N that
//!    it covers are charged, the rest refused (`group/decide.rs`);
//! 4. when any is charged: the writes of every balance, ledger entry, license, event, outbox
//!    message and idempotency record (one statement on PostgreSQL, one per table on SQLite;
//!    `group/writes.rs`).
//!
//! Each request still gets its own answer:
//!
//! - a request refused for a reason of its own (unknown login, insufficient quota, a reused
//!   key, a key in progress on another replica) writes nothing, so the others go on;
//! - a replay is answered from the stored outcome;
//! - a database failure rolls the whole transaction back and every request of it gets a
//!   retryable error: none of them committed, and a retry with the same key settles it.
//!
//! With no concurrency a group holds one request. The lanes come from `runtime::Capacity`:
//! one on SQLite, since every write takes the one write lock anyway; on PostgreSQL a few, an
//! account always in the same one, so spread traffic shares commits while lanes commit in
//! parallel. Balance rows are locked in one order in every transaction of every process, so
//! lanes and replicas never deadlock on each other's rows.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;

use super::request::IssueLicense;
use crate::error::{Error, Result};
use crate::idempotency::Outcome;
use crate::keys::PartnerAccount;
use crate::plans::cached_plan;
use crate::store::Store;
use crate::wire::License;

mod decide;
mod pending;
mod read;
mod transaction;
mod writes;

use pending::Pending;
use transaction::{log_if_issued, run_transaction};

/// Most requests one transaction takes; more wait for the next one.
const MAX_GROUP: usize = 64;

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

    /// Tells the observer the size of a group transaction that committed licenses.
    fn committed(&self, requests: usize) {
        if let Some(observe) = self.observer.get() {
            observe(requests);
        }
    }
}

/// Issues the license in its group's next transaction; answers when that transaction ends.
/// With group commit off (`Store::with_group_commit(false)`) the request is a group of one:
/// the same decisions and writes, in a transaction of its own.
pub(crate) async fn issue(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    // Plans are looked up here, outside any transaction; an unknown one is refused by the
    // group once the key has been checked. Logins are read by the group.
    let plan = match cached_plan(store, &request.plan).await {
        Ok(plan) => Some(plan),
        Err(Error::UnknownPlan) => None,
        Err(err) => return Err(err),
    };
    let (reply, answer) = oneshot::channel();
    let pending = Pending {
        account: account.clone(),
        request,
        plan,
        reply,
        request_id: crate::request_scope::current(),
    };
    // A task of its own either way: the transaction finishes even if this caller goes away.
    if store.group_commit() {
        enqueue(store, pending);
    } else {
        tokio::spawn(run_alone(store.clone(), pending));
    }
    AnswerSlot {
        receiver: answer,
        account,
    }
    .wait()
    .await
}

/// The caller's end of its answer. The line of a fresh license is written by whoever ends up
/// holding the license: the caller once it reads it; this end's drop when the caller went away
/// after the group sent it but before reading it; the group when the caller went away before.
/// The lane itself goes on to its next group without formatting a line per license.
struct AnswerSlot<'a> {
    receiver: oneshot::Receiver<Result<Outcome<License>>>,
    account: &'a PartnerAccount,
}

impl AnswerSlot<'_> {
    async fn wait(mut self) -> Result<Outcome<License>> {
        let answer = (&mut self.receiver).await.unwrap_or_else(|_| {
            Err(Error::Internal(
                "the license transaction ended without an answer".to_owned(),
            ))
        });
        log_if_issued(self.account, &answer);
        answer
    }
}

impl Drop for AnswerSlot<'_> {
    fn drop(&mut self) {
        // An answer the group sent and the caller never read (once read, nothing is left).
        if let Ok(answer) = self.receiver.try_recv() {
            log_if_issued(self.account, &answer);
        }
    }
}

/// Queues the request in its lane, starting the lane's committer when none runs.
fn enqueue(store: &Store, pending: Pending) {
    // Lanes: `runtime::Capacity` (one on SQLite).
    let lane = pending
        .account
        .account_id
        .rem_euclid(store.runtime().capacity.commit_lanes);
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
        tokio::spawn(run_group(store.clone(), lane));
    }
}

/// A group of one, outside the lanes (group commit off).
async fn run_alone(store: Store, pending: Pending) {
    let groups = store.license_groups();
    groups.running.fetch_add(1, Ordering::SeqCst);
    groups.transactions.fetch_add(1, Ordering::SeqCst);
    run_transaction(&store, vec![pending], &mut None, &|n| groups.committed(n)).await;
    groups.running.fetch_sub(1, Ordering::SeqCst);
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
        let groups = store.license_groups();
        run_transaction(&store, batch, &mut conn, &|n| groups.committed(n)).await;
        groups.running.fetch_sub(size, Ordering::SeqCst);
    }
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
