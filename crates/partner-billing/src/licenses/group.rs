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

use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::idempotency::{self, Fingerprint, Found, GroupKeyedRequest, Outcome};
use crate::keys::PartnerAccount;
use crate::plans::{PlanRow, find_plan, license_expiry};
use crate::store::{Backend, CrashPoint, FaultPoint, Store, Tx, crash_point};
use crate::wire::License;

use super::{IssueLicense, fingerprint};

mod statements;

use statements::{Writes, read_group};

/// Most requests one transaction takes; more wait for the next one.
const MAX_GROUP: usize = 64;

/// Commit lanes on PostgreSQL: groups that commit in parallel, each account always in the
/// same one; one per two CPUs, at most eight. Fewer lanes make bigger groups (fewer
/// statements and commits per license), more lanes overlap their round trips: on two CPUs
/// one lane measured best at 8 and 64 clients (docs/performance.md). SQLite has one lane: its
/// writers take one lock anyway.
fn postgres_lanes() -> i64 {
    static LANES: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        i64::try_from(cpus / 2).unwrap_or(1).clamp(1, 8)
    })
}

/// Plans remembered by slug (plans are only ever added, never changed): at most this many.
const PLAN_CACHE: usize = 1024;

/// One request waiting for its group's transaction.
struct Pending {
    account: PartnerAccount,
    request: IssueLicense,
    plan: PlanRow,
    reply: oneshot::Sender<Result<Outcome<License>>>,
}

/// The queues of the lanes that have a committer running. A lane is in the map exactly
/// while its committer runs.
#[derive(Default)]
pub(crate) struct LicenseGroups {
    queues: Mutex<HashMap<i64, Vec<Pending>>>,
    running: AtomicUsize,
    transactions: AtomicU64,
    observer: std::sync::OnceLock<GroupObserver>,
    plans: Mutex<HashMap<String, PlanRow>>,
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

    /// The plan of `request`, from memory when it was found before: a plan row never changes
    /// once added. An unknown plan is looked up again every time (it may be added later).
    async fn plan(&self, store: &Store, request: &IssueLicense) -> Result<PlanRow> {
        let slug = request.plan.as_str();
        if let Some(plan) = self
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(slug)
        {
            return Ok(*plan);
        }
        let plan = {
            let mut conn = store.pool().acquire().await?;
            find_plan(&mut conn, &request.plan).await?
        };
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if plans.len() < PLAN_CACHE {
            plans.insert(slug.to_owned(), plan);
        }
        Ok(plan)
    }
}

/// Issues the license in its group's next transaction; answers when that transaction ends.
pub(crate) async fn issue(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    // Unknown plans are refused here, outside any transaction; logins are read by the group.
    let plan = store.license_groups().plan(store, &request).await?;
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
    // Concurrent requests have no order of their own to keep; the sort is stable, so one
    // balance's requests keep their arrival order.
    batch.sort_by_key(|p| (p.account.account_id, p.plan.id));
    let mut tx = match store.begin_write().await {
        Ok(tx) => tx,
        Err(err) => {
            for pending in batch {
                let _ = pending.reply.send(Err(shared_failure(&err)));
            }
            return;
        }
    };
    let steps = match steps(store, &mut tx, &batch).await {
        Ok(steps) => steps,
        Err(err) => {
            let _ = tx.rollback().await;
            for pending in batch {
                let _ = pending.reply.send(Err(shared_failure(&err)));
            }
            return;
        }
    };
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

/// One license the group charges, with what its writes need.
struct Charge {
    index: usize,
    user_id: i64,
    actor: String,
    license: License,
}

/// The group's statements and decisions; an error fails the whole group.
async fn steps(store: &Store, tx: &mut Tx, batch: &[Pending]) -> Result<Vec<Step>> {
    let now = store.now_utc();
    let fingerprints: Vec<Fingerprint> = batch.iter().map(|p| fingerprint(&p.request)).collect();
    let keyed: Vec<GroupKeyedRequest<'_>> = batch
        .iter()
        .zip(&fingerprints)
        .map(|(p, fingerprint)| GroupKeyedRequest {
            account_id: p.account.account_id,
            key: &p.request.idempotency_key,
            fingerprint,
        })
        .collect();
    let locked_keys = idempotency::try_lock_many(store, tx, &keyed).await?;
    let read = read_group(store, tx, batch).await?;
    let mut remaining = read.balances.clone();

    // The decisions, in the order of the one-request path: the login (an unknown one is
    // refused as insufficient quota when the balance could not have paid), then the key, then
    // the balance.
    let mut steps = Vec::with_capacity(batch.len());
    let mut charges = Vec::new();
    for (index, (pending, keyed)) in batch.iter().zip(&keyed).enumerate() {
        let row = (pending.account.account_id, pending.plan.id.get());
        let balance = remaining.get(&row).copied().unwrap_or(0);
        let Some(&user_id) = read.users.get(pending.request.login.as_str()) else {
            steps.push(Some(Step::Refused(if balance < 1 {
                Error::InsufficientQuota
            } else {
                Error::UnknownLogin
            })));
            continue;
        };
        let stored = read
            .outcomes
            .get(&(keyed.account_id, keyed.key.as_str().to_owned()));
        match idempotency::check(locked_keys[index], stored, keyed.fingerprint) {
            Found::Refused(err) => steps.push(Some(Step::Refused(err))),
            Found::Replay(body) => steps.push(Some(Step::Replay(body))),
            Found::Fresh if balance < 1 => {
                steps.push(Some(Step::Refused(Error::InsufficientQuota)));
            }
            Found::Fresh => {
                remaining.insert(row, balance - 1);
                let license = License {
                    license_id: Uuid::new_v4().to_string(),
                    plan_slug: pending.request.plan.to_string(),
                    login: pending.request.login.to_string(),
                    remaining_balance: balance - 1,
                    created_utc: now,
                    expires_utc: license_expiry(pending.plan.duration_days, now),
                };
                // Filled in from `charges` once its writes have run.
                steps.push(None);
                charges.push(Charge {
                    index,
                    user_id,
                    actor: format!("api_key:{}", pending.account.api_key_id),
                    license,
                });
            }
        }
    }
    if !charges.is_empty() {
        if store.fault(FaultPoint::LicenseWrite) {
            return Err(Error::Internal(
                "fault injection: license write failed".to_owned(),
            ));
        }
        let writes = Writes::new(batch, &read, &remaining, &charges, &keyed)?;
        match store.backend() {
            Backend::Postgres => writes.run_postgres(tx, batch, &charges, now).await?,
            Backend::Sqlite => writes.run_sqlite(store, tx, batch, &charges, now).await?,
        }
        if !writes.events.is_empty() {
            store.wake_webhook_worker();
        }
    }
    for charge in charges {
        steps[charge.index] = Some(Step::Fresh(charge.license));
    }
    steps
        .into_iter()
        .map(|step| step.ok_or_else(|| Error::Internal("a request without a step".to_owned())))
        .collect()
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
