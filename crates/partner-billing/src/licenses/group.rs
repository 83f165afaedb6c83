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

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events::{self, EventData, Subscribers};
use crate::idempotency::{self, Fingerprint, Found, GroupKeyedRequest, Outcome};
use crate::keys::PartnerAccount;
use crate::plans::{PlanRow, find_plan};
use crate::quota::{self, EntryKind, GroupDebit};
use crate::store::{Backend, CrashPoint, FaultPoint, Store, Tx, crash_point};
use crate::wire::License;

use super::{IssueLicense, SECONDS_PER_DAY, fingerprint};

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

/// What the group reads, in one statement, once its keys are locked.
#[derive(Default)]
struct GroupRead {
    /// User ids by login; unregistered logins are absent.
    users: HashMap<String, i64>,
    /// Stored outcomes by (account, key).
    outcomes: HashMap<(i64, String), idempotency::StoredOutcome>,
    /// Balances by (account, plan), locked; a pair without a balance row is absent.
    balances: HashMap<(i64, i64), i64>,
    /// Enabled webhook endpoints: (account, endpoint row, event types).
    endpoints: Vec<(i64, i64, String)>,
    /// Low-balance thresholds by (account, plan).
    thresholds: HashMap<(i64, i64), i64>,
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

/// Reads, in one statement, everything the group's decisions need: the logins' user ids, the
/// keys' stored outcomes, the balances (locked, in (account, plan) order, on PostgreSQL; the
/// write lock covers them on SQLite), the accounts' enabled endpoints and low-balance
/// thresholds. On PostgreSQL it follows the statement that took the keys' advisory locks, so
/// its snapshot sees every outcome committed under them.
async fn read_group(store: &Store, tx: &mut Tx, batch: &[Pending]) -> Result<GroupRead> {
    let logins: BTreeSet<&str> = batch.iter().map(|p| p.request.login.as_str()).collect();
    let keys: Vec<(i64, &str)> = batch
        .iter()
        .map(|p| (p.account.account_id, p.request.idempotency_key.as_str()))
        .collect();
    let rows: BTreeSet<(i64, i64)> = batch
        .iter()
        .map(|p| (p.account.account_id, p.plan.id.get()))
        .collect();
    let accounts: BTreeSet<i64> = batch.iter().map(|p| p.account.account_id).collect();
    let sql = match store.backend() {
        Backend::Sqlite => {
            "SELECT 'u' AS kind, id AS a, NULL AS b, NULL AS c, login AS s, NULL AS t, NULL AS v, \
             NULL AS w FROM users WHERE login IN (SELECT value FROM json_each($1)) \
             UNION ALL SELECT 'i', r.account_id, NULL, NULL, r.idempotency_key, r.operation, \
             r.fingerprint, r.response_body FROM json_each($2) AS j \
             JOIN idempotency_records r ON r.account_id = json_extract(j.value, '$[0]') \
             AND r.idempotency_key = json_extract(j.value, '$[1]') \
             UNION ALL SELECT 'b', b.account_id, b.plan_id, b.remaining, NULL, NULL, NULL, NULL \
             FROM json_each($3) AS j JOIN balances b ON b.account_id = json_extract(j.value, '$[0]') \
             AND b.plan_id = json_extract(j.value, '$[1]') \
             UNION ALL SELECT 'e', account_id, id, NULL, event_types, NULL, NULL, NULL FROM webhook_endpoints \
             WHERE account_id IN (SELECT value FROM json_each($4)) AND status = 'enabled' \
             UNION ALL SELECT 't', a.account_id, a.plan_id, a.low_balance_threshold, NULL, NULL, NULL, NULL \
             FROM json_each($3) AS j JOIN balance_alerts a ON a.account_id = json_extract(j.value, '$[0]') \
             AND a.plan_id = json_extract(j.value, '$[1]')"
        }
        Backend::Postgres => {
            "WITH locked AS MATERIALIZED (SELECT b.account_id, b.plan_id, b.remaining FROM balances b \
             WHERE (b.account_id, b.plan_id) IN \
             (SELECT (j->>0)::bigint, (j->>1)::bigint FROM json_array_elements($3::json) AS j) \
             ORDER BY b.account_id, b.plan_id FOR UPDATE) \
             SELECT 'u' AS kind, id AS a, NULL::bigint AS b, NULL::bigint AS c, login AS s, \
             NULL::text AS t, NULL::text AS v, NULL::text AS w \
             FROM users WHERE login IN (SELECT json_array_elements_text($1::json)) \
             UNION ALL SELECT 'i', r.account_id, NULL, NULL, r.idempotency_key, r.operation, \
             r.fingerprint, r.response_body FROM json_array_elements($2::json) AS j \
             JOIN idempotency_records r ON r.account_id = (j->>0)::bigint AND r.idempotency_key = j->>1 \
             UNION ALL SELECT 'b', account_id, plan_id, remaining, NULL, NULL, NULL, NULL FROM locked \
             UNION ALL SELECT 'e', account_id, id, NULL, event_types, NULL, NULL, NULL FROM webhook_endpoints \
             WHERE account_id IN (SELECT (json_array_elements_text($4::json))::bigint) \
             AND status = 'enabled' \
             UNION ALL SELECT 't', a.account_id, a.plan_id, a.low_balance_threshold, NULL, NULL, NULL, NULL \
             FROM balance_alerts a WHERE (a.account_id, a.plan_id) IN \
             (SELECT (j->>0)::bigint, (j->>1)::bigint FROM json_array_elements($3::json) AS j)"
        }
    };
    type Row = (
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let found: Vec<Row> = sqlx::query_as(sql)
        .bind(to_json(&logins)?)
        .bind(to_json(&keys)?)
        .bind(to_json(&rows)?)
        .bind(to_json(&accounts)?)
        .fetch_all(&mut **tx)
        .await?;
    let missing = || Error::Internal("a group read row is incomplete".to_owned());
    let mut read = GroupRead::default();
    for (kind, a, b, c, s, t, v, w) in found {
        match kind.as_str() {
            "u" => {
                read.users.insert(s.ok_or_else(missing)?, a);
            }
            "i" => {
                read.outcomes.insert(
                    (a, s.ok_or_else(missing)?),
                    (
                        t.ok_or_else(missing)?,
                        v.ok_or_else(missing)?,
                        w.ok_or_else(missing)?,
                    ),
                );
            }
            "b" => {
                read.balances
                    .insert((a, b.ok_or_else(missing)?), c.ok_or_else(missing)?);
            }
            "e" => read
                .endpoints
                .push((a, b.ok_or_else(missing)?, s.ok_or_else(missing)?)),
            "t" => {
                read.thresholds
                    .insert((a, b.ok_or_else(missing)?), c.ok_or_else(missing)?);
            }
            _ => return Err(Error::Internal("a group read row of no kind".to_owned())),
        }
    }
    Ok(read)
}

/// The rows a group writes, built once; one statement on PostgreSQL, one per table on SQLite.
struct Writes<'a> {
    /// (account, plan, before, after) of every debited balance.
    balances: Vec<(i64, i64, i64, i64)>,
    debits: Vec<GroupDebit<'a>>,
    /// (account, key, operation, fingerprint, response body).
    records: Vec<(i64, &'a str, &'static str, &'a str, String)>,
    /// (account, event, endpoints), in the order the one-request path records them.
    events: Vec<(i64, EventData, Vec<i64>)>,
}

impl<'a> Writes<'a> {
    fn new(
        batch: &[Pending],
        read: &GroupRead,
        remaining: &HashMap<(i64, i64), i64>,
        charges: &'a [Charge],
        keyed: &[GroupKeyedRequest<'a>],
    ) -> Result<Self> {
        let mut balances: Vec<(i64, i64, i64, i64)> = remaining
            .iter()
            .filter_map(|(&(account_id, plan_id), &after)| {
                let before = read.balances.get(&(account_id, plan_id)).copied()?;
                (after != before).then_some((account_id, plan_id, before, after))
            })
            .collect();
        balances.sort_unstable();
        let debits = charges
            .iter()
            .map(|c| GroupDebit {
                account_id: batch[c.index].account.account_id,
                plan_id: batch[c.index].plan.id.get(),
                units: 1,
                balance_after: c.license.remaining_balance,
                actor: &c.actor,
                reference: &c.license.license_id,
            })
            .collect();
        let records = charges
            .iter()
            .map(|c| idempotency::record_row(&keyed[c.index], &c.license))
            .collect::<Result<Vec<_>>>()?;
        let subscribers = Subscribers::from_rows(
            charges.iter().map(|c| batch[c.index].account.account_id),
            read.endpoints.iter().cloned(),
        );
        let mut events = Vec::new();
        for charge in charges {
            let pending = &batch[charge.index];
            let account_id = pending.account.account_id;
            let Some(subscribers) = subscribers.get(&account_id) else {
                continue;
            };
            let license = &charge.license;
            // `Subscribers::after_debit`, then the license's own event.
            if subscribers.wants("balance.low") {
                let threshold = read
                    .thresholds
                    .get(&(account_id, pending.plan.id.get()))
                    .copied()
                    .unwrap_or(0);
                if events::crosses_low_balance(threshold, 1, license.remaining_balance) {
                    let data = EventData::BalanceLow {
                        product_slug: license.plan_slug.clone(),
                        remaining_balance: license.remaining_balance,
                        threshold,
                    };
                    let endpoints = subscribers.endpoints_for(&data);
                    events.push((account_id, data, endpoints));
                }
            }
            let data = EventData::LicenseIssued {
                license_id: license.license_id.clone(),
                product_slug: license.plan_slug.clone(),
                login: license.login.clone(),
                remaining_balance: license.remaining_balance,
            };
            let endpoints = subscribers.endpoints_for(&data);
            events.push((account_id, data, endpoints));
        }
        events.retain(|(_, _, endpoints)| !endpoints.is_empty());
        Ok(Self {
            balances,
            debits,
            records,
            events,
        })
    }

    /// SQLite: a statement per table (its statements cost no network round trip).
    async fn run_sqlite(
        &self,
        store: &Store,
        tx: &mut Tx,
        batch: &[Pending],
        charges: &[Charge],
        now: i64,
    ) -> Result<()> {
        quota::debit_many(
            store,
            tx,
            &self.balances,
            &self.debits,
            EntryKind::License,
            now,
        )
        .await?;
        insert_licenses(store, tx, batch, charges, now).await?;
        events::insert_events(store, tx, &self.events).await?;
        idempotency::record_many(store, tx, &self.records, now).await
    }

    /// PostgreSQL: every write in one statement of data-modifying CTEs, one round trip. The
    /// outbox messages reference the events inserted beside them by event id.
    async fn run_postgres(
        &self,
        tx: &mut Tx,
        batch: &[Pending],
        charges: &[Charge],
        now: i64,
    ) -> Result<()> {
        let entries: Vec<(i64, i64, i64, i64, &str, &str)> = self
            .debits
            .iter()
            .map(|d| {
                (
                    d.account_id,
                    d.plan_id,
                    -d.units,
                    d.balance_after,
                    d.actor,
                    d.reference,
                )
            })
            .collect();
        let events = self
            .events
            .iter()
            .map(|(account_id, data, endpoints)| {
                let (event_id, account_id, event_type, body) =
                    events::event_row(*account_id, data, now)?;
                Ok((event_id, account_id, event_type, body, endpoints))
            })
            .collect::<Result<Vec<_>>>()?;
        let counts: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "WITH upd AS (UPDATE balances AS b SET remaining = (j->>3)::bigint \
             FROM json_array_elements($1::json) AS j \
             WHERE b.account_id = (j->>0)::bigint AND b.plan_id = (j->>1)::bigint \
             AND b.remaining = (j->>2)::bigint RETURNING 1), \
             led AS (INSERT INTO ledger_entries \
             (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
             SELECT (j->>0)::bigint, (j->>1)::bigint, 'license', (j->>2)::bigint, (j->>3)::bigint, \
             j->>4, NULL, j->>5, $6 FROM json_array_elements($2::json) WITH ORDINALITY AS t(j, n) \
             ORDER BY t.n RETURNING 1), \
             lic AS (INSERT INTO licenses \
             (license_id, user_id, plan_id, account_id, source, created_utc, expires_utc) \
             SELECT j->>0, (j->>1)::bigint, (j->>2)::bigint, (j->>3)::bigint, 'direct', $6, \
             (j->>4)::bigint FROM json_array_elements($3::json) WITH ORDINALITY AS t(j, n) \
             ORDER BY t.n RETURNING 1), \
             rec AS (INSERT INTO idempotency_records \
             (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
             SELECT (j->>0)::bigint, j->>1, j->>2, j->>3, 200, j->>4, $6 \
             FROM json_array_elements($4::json) WITH ORDINALITY AS t(j, n) ORDER BY t.n RETURNING 1), \
             ev AS (INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
             SELECT j->>0, (j->>1)::bigint, j->>2, j->>3, $6 \
             FROM json_array_elements($5::json) WITH ORDINALITY AS t(j, n) ORDER BY t.n \
             RETURNING id, event_id), \
             msg AS (INSERT INTO webhook_messages \
             (event_row_id, endpoint_row_id, status, attempts, next_attempt_utc) \
             SELECT ev.id, e.endpoint::bigint, 'pending', 0, $6 \
             FROM json_array_elements($5::json) AS j JOIN ev ON ev.event_id = j->>0 \
             CROSS JOIN LATERAL json_array_elements_text(j->4) WITH ORDINALITY AS e(endpoint, n) \
             ORDER BY ev.id, e.n RETURNING 1) \
             SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM led), \
             (SELECT count(*) FROM lic), (SELECT count(*) FROM rec), (SELECT count(*) FROM msg)",
        )
        .bind(to_json(&self.balances)?)
        .bind(to_json(&entries)?)
        .bind(to_json(&license_rows(batch, charges))?)
        .bind(to_json(&self.records)?)
        .bind(to_json(&events)?)
        .bind(now)
        .fetch_one(&mut **tx)
        .await?;
        let messages: usize = self.events.iter().map(|(_, _, e)| e.len()).sum();
        let expected = (
            self.balances.len(),
            self.debits.len(),
            charges.len(),
            self.records.len(),
            messages,
        );
        let counted = (
            usize::try_from(counts.0).unwrap_or(usize::MAX),
            usize::try_from(counts.1).unwrap_or(usize::MAX),
            usize::try_from(counts.2).unwrap_or(usize::MAX),
            usize::try_from(counts.3).unwrap_or(usize::MAX),
            usize::try_from(counts.4).unwrap_or(usize::MAX),
        );
        if counted != expected {
            return Err(Error::Internal(format!(
                "the group's writes wrote {counted:?} rows, not {expected:?}"
            )));
        }
        Ok(())
    }
}

/// Every charged license, in one statement.
async fn insert_licenses(
    store: &Store,
    tx: &mut Tx,
    batch: &[Pending],
    charges: &[Charge],
    now: i64,
) -> Result<()> {
    let rows = license_rows(batch, charges);
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

/// The licenses' rows: id, user, plan, account, expiry.
fn license_rows<'a>(
    batch: &[Pending],
    charges: &'a [Charge],
) -> Vec<(&'a str, i64, i64, i64, Option<i64>)> {
    charges
        .iter()
        .map(|c| {
            let pending = &batch[c.index];
            (
                c.license.license_id.as_str(),
                c.user_id,
                pending.plan.id.get(),
                pending.account.account_id,
                c.license.expires_utc,
            )
        })
        .collect()
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Internal(format!("parameters: {e}")))
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
