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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events::{self, EventData, Subscribers};
use crate::idempotency::{self, Fingerprint, Found, KeyedRequest, Outcome};
use crate::keys::PartnerAccount;
use crate::plans::{PlanRow, find_plan};
use crate::quota::{self, EntryKind, GroupDebit};
use crate::store::{Backend, CrashPoint, FaultPoint, Store, Tx, crash_point};
use crate::wire::License;

use super::{IssueLicense, SECONDS_PER_DAY, fingerprint};

/// Most requests one transaction takes; more wait for the next one.
const MAX_GROUP: usize = 64;

/// Commit lanes on PostgreSQL: groups that commit in parallel, each account always in the
/// same one. SQLite has one: its writers take one lock anyway.
const POSTGRES_LANES: i64 = 4;

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
        if let Some(plan) = self.plans.lock().unwrap_or_else(|p| p.into_inner()).get(slug) {
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
        Backend::Postgres => account.account_id.rem_euclid(POSTGRES_LANES),
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
    let users = find_users(store, tx, batch).await?;
    let fingerprints: Vec<Fingerprint> = batch.iter().map(|p| fingerprint(&p.request)).collect();
    let keyed: Vec<KeyedRequest<'_>> = batch
        .iter()
        .zip(&fingerprints)
        .map(|(p, fingerprint)| KeyedRequest {
            account_id: p.account.account_id,
            key: &p.request.idempotency_key,
            fingerprint,
        })
        .collect();
    let found = idempotency::find_outcomes(store, tx, &keyed).await?;
    let rows: Vec<(i64, i64)> = batch
        .iter()
        .map(|p| (p.account.account_id, p.plan.id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let locked = quota::lock_balances(store, tx, &rows).await?;
    let mut remaining = locked.clone();

    // The decisions, in the order of the sequential path: the login (an unknown one is
    // refused as insufficient quota when the balance could not have paid), then the key, then
    // the balance.
    let mut steps = Vec::with_capacity(batch.len());
    let mut charges = Vec::new();
    for (index, (pending, found)) in batch.iter().zip(found).enumerate() {
        let row = (pending.account.account_id, pending.plan.id);
        let balance = remaining.get(&row).copied().unwrap_or(0);
        let Some(&user_id) = users.get(pending.request.login.as_str()) else {
            steps.push(Some(Step::Refused(if balance < 1 {
                Error::InsufficientQuota
            } else {
                Error::UnknownLogin
            })));
            continue;
        };
        match found {
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
                    expires_utc: pending
                        .plan
                        .duration_days
                        .map(|days| now + days * SECONDS_PER_DAY),
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
        write_charges(store, tx, batch, &locked, &remaining, &charges, &fingerprints, now).await?;
    }
    for charge in charges {
        steps[charge.index] = Some(Step::Fresh(charge.license));
    }
    steps
        .into_iter()
        .map(|step| step.ok_or_else(|| Error::Internal("a request without a step".to_owned())))
        .collect()
}

/// The writes of the charged licenses, in a constant number of statements.
#[allow(clippy::too_many_arguments)]
async fn write_charges(
    store: &Store,
    tx: &mut Tx,
    batch: &[Pending],
    locked: &HashMap<(i64, i64), i64>,
    remaining: &HashMap<(i64, i64), i64>,
    charges: &[Charge],
    fingerprints: &[Fingerprint],
    now: i64,
) -> Result<()> {
    let accounts: Vec<i64> = charges
        .iter()
        .map(|c| batch[c.index].account.account_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let subscribers = Subscribers::load_many(store, tx, &accounts).await?;
    let alerted: Vec<(i64, i64)> = charges
        .iter()
        .map(|c| (batch[c.index].account.account_id, batch[c.index].plan.id))
        .filter(|(account_id, _)| {
            subscribers
                .get(account_id)
                .is_some_and(|s| s.wants("balance.low"))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let thresholds = events::low_balance_thresholds(store, tx, &alerted).await?;
    if store.fault(FaultPoint::LicenseWrite) {
        return Err(Error::Internal(
            "fault injection: license write failed".to_owned(),
        ));
    }

    let mut balances: Vec<(i64, i64, i64, i64)> = remaining
        .iter()
        .filter_map(|(&(account_id, plan_id), &after)| {
            let before = locked.get(&(account_id, plan_id)).copied()?;
            (after != before).then_some((account_id, plan_id, before, after))
        })
        .collect();
    balances.sort_unstable();
    let debits: Vec<GroupDebit<'_>> = charges
        .iter()
        .map(|c| GroupDebit {
            account_id: batch[c.index].account.account_id,
            plan_id: batch[c.index].plan.id,
            units: 1,
            balance_after: c.license.remaining_balance,
            actor: &c.actor,
            reference: &c.license.license_id,
        })
        .collect();
    quota::debit_many(store, tx, &balances, &debits, EntryKind::License, now).await?;

    insert_licenses(store, tx, batch, charges, now).await?;

    let mut recorded = Vec::new();
    for charge in charges {
        let pending = &batch[charge.index];
        let account_id = pending.account.account_id;
        let Some(subscribers) = subscribers.get(&account_id) else {
            continue;
        };
        let license = &charge.license;
        let threshold = thresholds
            .get(&(account_id, pending.plan.id))
            .copied()
            .unwrap_or(0);
        if subscribers.wants("balance.low")
            && events::crosses_low_balance(threshold, 1, license.remaining_balance)
        {
            let data = EventData::BalanceLow {
                product_slug: license.plan_slug.clone(),
                remaining_balance: license.remaining_balance,
                threshold,
            };
            let endpoints = subscribers.endpoints_for(&data);
            recorded.push((subscribers.account_id(), data, endpoints));
        }
        let data = EventData::LicenseIssued {
            license_id: license.license_id.clone(),
            product_slug: license.plan_slug.clone(),
            login: license.login.clone(),
            remaining_balance: license.remaining_balance,
        };
        let endpoints = subscribers.endpoints_for(&data);
        recorded.push((subscribers.account_id(), data, endpoints));
    }
    events::insert_events(store, tx, &recorded).await?;

    let outcomes: Vec<(KeyedRequest<'_>, &License)> = charges
        .iter()
        .map(|c| {
            let pending = &batch[c.index];
            (
                KeyedRequest {
                    account_id: pending.account.account_id,
                    key: &pending.request.idempotency_key,
                    fingerprint: &fingerprints[c.index],
                },
                &c.license,
            )
        })
        .collect();
    idempotency::record_many(store, tx, &outcomes, now).await
}

/// The user ids of the group's logins, in one read; unregistered logins are absent.
async fn find_users(store: &Store, tx: &mut Tx, batch: &[Pending]) -> Result<HashMap<String, i64>> {
    let logins: Vec<&str> = batch
        .iter()
        .map(|p| p.request.login.as_str())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let sql = match store.backend() {
        Backend::Sqlite => "SELECT login, id FROM users WHERE login IN (SELECT value FROM json_each($1))",
        Backend::Postgres => {
            "SELECT login, id FROM users WHERE login IN (SELECT json_array_elements_text($1::json))"
        }
    };
    let rows: Vec<(String, i64)> = sqlx::query_as(sql)
        .bind(to_json(&logins)?)
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows.into_iter().collect())
}

/// Every charged license, in one statement.
async fn insert_licenses(
    store: &Store,
    tx: &mut Tx,
    batch: &[Pending],
    charges: &[Charge],
    now: i64,
) -> Result<()> {
    let rows: Vec<(&str, i64, i64, i64, Option<i64>)> = charges
        .iter()
        .map(|c| {
            let pending = &batch[c.index];
            (
                c.license.license_id.as_str(),
                c.user_id,
                pending.plan.id,
                pending.account.account_id,
                c.license.expires_utc,
            )
        })
        .collect();
    let sql = match store.backend() {
        Backend::Sqlite => {
            "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, expires_utc) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
             json_extract(value, '$[3]'), 'direct', $2, json_extract(value, '$[4]') \
             FROM json_each($1) ORDER BY key"
        }
        Backend::Postgres => {
            "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, expires_utc) \
             SELECT j->>0, (j->>1)::bigint, (j->>2)::bigint, (j->>3)::bigint, 'direct', $2, (j->>4)::bigint \
             FROM json_array_elements($1::json) WITH ORDINALITY AS t(j, n) ORDER BY t.n"
        }
    };
    sqlx::query(sql)
        .bind(to_json(&rows)?)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Internal(format!("parameters: {e}")))
}
