//! The handle every operation takes: the database layer ([`crate::db`]) and the runtime
//! context ([`crate::runtime`]) of one process, side by side.
//!
//! The layers, bottom up: values (`domain`, `wire`, `error`, `clock`, `crypto`), then `db` and
//! `runtime` (neither knows the other or any domain type), then this handle joining them,
//! then the domain modules (`quota`, `keys`, `promo`, `licenses`, …), which only import
//! downwards. `docs/design.md` § Layers has the picture.

use sqlx::AnyPool;

use crate::clock::Clock;
use crate::crypto::MasterKey;
use crate::db::Db;
use crate::error::Result;
use crate::runtime::{Capacity, InFlightGuard, PromoPermit, Runtime, WebhookSettings};

pub use crate::db::{Backend, Reader, Tx};
#[cfg(feature = "fault-injection")]
pub use crate::faults::CRASH_AT_ENV;
#[cfg(feature = "fault-injection")]
pub use crate::faults::Hold;
pub(crate) use crate::faults::crash_point;
pub use crate::faults::{CrashPoint, FaultPoint, HoldPoint};

/// The database and the process's runtime context. Cheap to clone; every clone shares the
/// same pool and state.
#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    runtime: Runtime,
}

impl Store {
    /// Connects, applies pending migrations, and returns the store. A SQLite file is created if
    /// missing.
    pub async fn connect(database_url: &str, clock: Clock) -> Result<Self> {
        let db = Db::connect(database_url).await?;
        let capacity = Capacity::for_this_machine(db.shared_connections(), db.parallel_writers());
        let runtime = Runtime::new(clock, capacity);
        Ok(Self { db, runtime })
    }

    /// The database layer.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The runtime context.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Gives the store the master key that promo codes need.
    pub fn with_master_key(mut self, key: MasterKey) -> Self {
        self.runtime.master_key = Some(std::sync::Arc::new(key));
        self
    }

    /// Turns group commit of concurrent license requests on (the default) or off, e.g. to
    /// measure one transaction per request.
    pub fn with_group_commit(mut self, on: bool) -> Self {
        self.runtime.group_commit = on;
        self
    }

    /// Sets the webhook delivery schedule and the URL rule (`--webhook-backoff`,
    /// `--webhook-allow-insecure`).
    pub fn with_webhook_settings(mut self, settings: WebhookSettings) -> Self {
        self.runtime.webhooks = std::sync::Arc::new(settings);
        self
    }

    /// Has `observer` told the action (`api_key.revoked`, …) of every audit entry once its
    /// transaction has committed, e.g. to count them in a metric.
    pub fn observe_audit_entries(&self, observer: impl Fn(&'static str) + Send + Sync + 'static) {
        self.runtime
            .audit_observer
            .set(std::sync::Arc::new(observer));
    }

    /// Tells the observer the action of an audit entry that has committed.
    pub(crate) fn audit_observed(&self, action: &'static str) {
        self.runtime.audit_observer.observe(action);
    }

    /// The webhook delivery schedule and URL rule.
    pub fn webhook_settings(&self) -> &WebhookSettings {
        &self.runtime.webhooks
    }

    /// Wakes this process's webhook worker: an event was just queued.
    pub fn wake_webhook_worker(&self) {
        self.runtime.webhook_wake.notify_one();
    }

    /// Resolves when [`wake_webhook_worker`](Self::wake_webhook_worker) is called.
    pub async fn webhook_worker_woken(&self) {
        self.runtime.webhook_wake.notified().await;
    }

    /// Whether concurrent license requests share transactions.
    pub fn group_commit(&self) -> bool {
        self.runtime.group_commit
    }

    /// Waits for a turn to generate a promo batch: first one of the account's
    /// [`crate::limits::PROMO_BATCHES_PER_ACCOUNT`], then one of the process's.
    pub(crate) async fn promo_permit(&self, account_id: i64) -> Result<PromoPermit<'_>> {
        self.runtime.promo_permits.acquire(account_id).await
    }

    pub(crate) fn master_key(&self) -> Result<&MasterKey> {
        self.runtime.master_key()
    }

    /// Makes the next promo generation fail at `point` (once).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&self, point: FaultPoint) {
        self.runtime.faults.inject(point);
    }

    /// Holds every later arrival at `point` for `subject` (an account id) until the returned
    /// hold is released or dropped.
    #[cfg(feature = "fault-injection")]
    pub fn hold(&self, point: HoldPoint, subject: i64) -> Hold {
        self.runtime.faults.hold(point, subject)
    }

    /// Waits while a test holds `point` for `subject`; returns at once without feature
    /// `fault-injection`.
    pub(crate) async fn pass(&self, point: HoldPoint, subject: i64) {
        self.runtime.faults.pass(point, subject).await;
    }

    /// Whether a fault is armed at `point`; consumes it. Always `false` without feature
    /// `fault-injection`.
    pub(crate) fn fault(&self, point: FaultPoint) -> bool {
        self.runtime.faults.take(point)
    }

    pub fn backend(&self) -> Backend {
        self.db.backend()
    }

    pub fn clock(&self) -> &Clock {
        &self.runtime.clock
    }

    /// The pool, for reads that need no transaction.
    pub fn pool(&self) -> &AnyPool {
        self.db.pool()
    }

    /// A connection kept for one-statement reads on every request's path, such as
    /// authentication (see [`Db::reader`]).
    pub async fn reader(&self) -> Result<Reader> {
        self.db.reader().await
    }

    /// Current time, Unix seconds.
    pub fn now_utc(&self) -> i64 {
        self.runtime.clock.now_utc()
    }

    /// Begins a write transaction (see [`Db::begin_write`]).
    pub async fn begin_write(&self) -> Result<Tx> {
        self.db.begin_write().await
    }

    /// Begins a read-only transaction that reads one snapshot (see [`Db::begin_snapshot`]).
    pub async fn begin_snapshot(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        self.db.begin_snapshot().await
    }

    /// Begins a snapshot for a list read a page at a time (see [`Db::begin_snapshot_of_pages`]).
    pub(crate) async fn begin_snapshot_of_pages(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        self.db.begin_snapshot_of_pages().await
    }

    /// Runs one write statement as every write must run (see [`Db::write_one`]).
    pub(crate) async fn write_one<'q>(
        &self,
        statement: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<sqlx::any::AnyQueryResult> {
        self.db.write_one(statement).await
    }

    /// Runs one bookkeeping write off the request's way when it would wait (see
    /// [`Db::write_one_soon`]).
    pub(crate) async fn write_one_soon(
        &self,
        key: String,
        statement: sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<()> {
        self.db.write_one_soon(key, statement).await
    }

    /// Moves the SQLite WAL into the database and truncates it (see [`Db::checkpoint`]).
    pub async fn checkpoint(&self) -> Result<()> {
        self.db.checkpoint().await
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<()> {
        self.db.ping().await
    }

    /// Closes the pool, waiting for connections to return.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// Claims a scoped idempotency key (`account:1:key`, `operator:token:2:key`) for this
    /// process until the guard drops, saying which operation runs under it (what the request
    /// lookup reports while it runs); `None` while another request of this process holds it.
    pub(crate) fn claim_in_flight(
        &self,
        entry: String,
        operation: &'static str,
    ) -> Option<InFlightGuard> {
        self.runtime.in_flight.claim(entry, operation)
    }

    /// The operation a request of this process runs under a scoped key, if one is.
    pub(crate) fn in_flight_operation(&self, entry: &str) -> Option<&'static str> {
        self.runtime.in_flight.operation_of(entry)
    }
}
