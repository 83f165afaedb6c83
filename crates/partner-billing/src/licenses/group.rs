//! Group commit for license issue: concurrent requests that would serialise on one lock share
//! one transaction and one COMMIT.
//!
//! On one hot account every license takes the same balance row lock from its debit to its
//! COMMIT, so requests queue behind each other's durable flush. Here the first request of a
//! group starts a committer task; requests that arrive while it works wait in the group's
//! queue, and the committer takes them all into its next transaction. Each request still
//! gets its own idempotency check, debit, ledger entry, license and idempotency record, in
//! arrival order, and its own answer:
//!
//! - a request refused for a reason of its own (unknown plan or login, insufficient quota, a
//!   reused key, a key in progress on another replica) is refused before it writes anything,
//!   so the others go on;
//! - a replay is answered from the stored outcome;
//! - a database failure rolls the whole transaction back and every request of it gets a
//!   retryable error: none of them committed, and a retry with the same key settles it.
//!
//! Within a transaction, requests take their balance rows in (account, plan) order, so groups
//! in different processes never deadlock on each other's rows.
//!
//! With no concurrency a group holds one request and this is the plain one-transaction path.
//! The group is the account on PostgreSQL (other accounts commit in parallel) and the whole
//! database on SQLite, where every write already takes the one write lock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::idempotency::{self, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::store::{Backend, CrashPoint, Store, Tx, crash_point};
use crate::wire::License;

use super::{IssueLicense, Target, fingerprint, write_license};

/// Most requests one transaction takes; more wait for the next one.
const MAX_GROUP: usize = 64;

/// One request waiting for its group's transaction.
struct Pending {
    account: PartnerAccount,
    request: IssueLicense,
    target: Target,
    reply: oneshot::Sender<Result<Outcome<License>>>,
}

/// The queues of the groups that have a committer running. A group is in the map exactly
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
    // Unknown plans and logins are refused here, outside the group's transaction, which
    // then only holds the lock-taking part of each request.
    let target = {
        let mut conn = store.pool().acquire().await?;
        Target::find(&mut conn, account, &request).await?
    };
    let group = match store.backend() {
        Backend::Postgres => account.account_id,
        Backend::Sqlite => 0,
    };
    let (reply, answer) = oneshot::channel();
    let pending = Pending {
        account: account.clone(),
        request,
        target,
        reply,
    };
    let start_committer = {
        let mut queues = store.license_groups().lock();
        match queues.get_mut(&group) {
            Some(queue) => {
                queue.push(pending);
                false
            }
            None => {
                queues.insert(group, vec![pending]);
                true
            }
        }
    };
    if start_committer {
        // A task of its own: the group's transactions finish even if this caller goes away.
        tokio::spawn(run_group(store.clone(), group));
    }
    answer.await.unwrap_or_else(|_| {
        Err(Error::Internal(
            "the license transaction ended without an answer".to_owned(),
        ))
    })
}

/// Takes the group out of the map when its committer ends, however it ends: a panic drops
/// the waiting requests' reply channels, so they answer 500 instead of waiting forever.
struct GroupGuard {
    store: Store,
    group: i64,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.store.license_groups().lock().remove(&self.group);
        }
    }
}

/// Runs the group's transactions until its queue is empty.
async fn run_group(store: Store, group: i64) {
    let _guard = GroupGuard {
        store: store.clone(),
        group,
    };
    loop {
        let batch = {
            let mut queues = store.license_groups().lock();
            let Some(queue) = queues.get_mut(&group) else {
                return;
            };
            if queue.is_empty() {
                queues.remove(&group);
                return;
            }
            let take = queue.len().min(MAX_GROUP);
            let groups = store.license_groups();
            groups.running.fetch_add(take, Ordering::SeqCst);
            groups.transactions.fetch_add(1, Ordering::SeqCst);
            queue.drain(..take).collect::<Vec<_>>()
        };
        let size = batch.len();
        run_transaction(&store, batch).await;
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

/// Whether `err` refuses one request without having written anything, so the transaction can
/// go on for the others.
fn refuses_only_its_request(err: &Error) -> bool {
    matches!(
        err,
        Error::UnknownPlan
            | Error::UnknownLogin
            | Error::InsufficientQuota
            | Error::IdempotencyKeyReused
            | Error::RequestInProgress
    )
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

async fn run_transaction(store: &Store, mut batch: Vec<Pending>) {
    // Balance rows are locked in one order, (account, plan), in every transaction of every
    // process, so two groups can never wait on each other. Concurrent requests have no order
    // of their own to keep; the sort is stable, so one plan's requests keep their arrival order.
    batch.sort_by(|a, b| {
        (a.account.account_id, a.request.plan.as_str())
            .cmp(&(b.account.account_id, b.request.plan.as_str()))
    });
    let mut tx = match store.begin_write().await {
        Ok(tx) => tx,
        Err(err) => {
            for pending in batch {
                let _ = pending.reply.send(Err(shared_failure(&err)));
            }
            return;
        }
    };
    let mut steps = Vec::with_capacity(batch.len());
    for pending in &batch {
        match step(store, &mut tx, pending).await {
            Ok(step) => steps.push(step),
            Err(err) if refuses_only_its_request(&err) => steps.push(Step::Refused(err)),
            Err(err) => {
                let _ = tx.rollback().await;
                for pending in batch {
                    let _ = pending.reply.send(Err(shared_failure(&err)));
                }
                return;
            }
        }
    }
    let wrote = steps.iter().any(|s| matches!(s, Step::Fresh(_)));
    let committed = if wrote {
        crash_point(CrashPoint::BeforeCommit);
        let committed = tx.commit().await.map_err(Error::from);
        crash_point(CrashPoint::AfterCommit);
        tracing::debug!(requests = batch.len(), "license group committed");
        if let (Ok(()), Some(observe)) = (&committed, store.license_groups().observer.get()) {
            observe(batch.len());
        }
        committed
    } else {
        let _ = tx.rollback().await;
        Ok(())
    };
    for (pending, step) in batch.into_iter().zip(steps) {
        let answer = match (step, &committed) {
            (Step::Fresh(license), Ok(())) => {
                tracing::info!(
                    client_id = %pending.account.client_id,
                    license_id = %license.license_id,
                    plan = %pending.request.plan,
                    "license issued"
                );
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

/// One request's share of the transaction: its idempotency check, then its writes.
async fn step(store: &Store, tx: &mut Tx, pending: &Pending) -> Result<Step> {
    let scope = Scope::Account(pending.account.account_id);
    let request = &pending.request;
    let fingerprint = fingerprint(request);
    if let Some(body) =
        idempotency::find_outcome(store, tx, scope, &request.idempotency_key, &fingerprint).await?
    {
        return Ok(Step::Replay(body));
    }
    let license = write_license(
        store,
        tx,
        &pending.account,
        request,
        pending.target,
        &fingerprint,
    )
    .await?;
    Ok(Step::Fresh(license))
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
