//! The database behind the library: SQLite or PostgreSQL, chosen by the URL's scheme alone.
//!
//! Both run the same SQL through sqlx's `Any` driver (`$n` placeholders work on both). What
//! differs lives here: connection settings, how a write transaction begins, migrations, and how
//! an idempotency key is locked across replicas.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyPool, Executor, Transaction};

use crate::clock::Clock;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::licenses::LicenseGroups;

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend named by a database URL's scheme.
    pub fn from_url(url: &str) -> Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Self::Postgres)
        } else {
            Err(Error::Internal(
                "the database URL must start with sqlite: or postgres:".to_owned(),
            ))
        }
    }
}

/// A write transaction on either backend.
pub type Tx = Transaction<'static, Any>;

/// The connection pool, the clock, and the process-local registry of in-flight idempotency
/// keys. Cheap to clone; every clone shares the same pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    clock: Clock,
    in_flight: Arc<Mutex<HashSet<String>>>,
    master_key: Option<Arc<MasterKey>>,
    license_groups: Arc<LicenseGroups>,
    group_commit: bool,
    promo_permits: Arc<tokio::sync::Semaphore>,
    webhooks: Arc<crate::webhooks::WebhookSettings>,
    webhook_wake: Arc<tokio::sync::Notify>,
    account_promo_permits: Arc<Mutex<HashMap<i64, Arc<tokio::sync::Semaphore>>>>,
    #[cfg(feature = "fault-injection")]
    faults: Arc<Mutex<Vec<FaultPoint>>>,
}

/// Steps of promo generation at which tests can make it fail (feature `fault-injection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Drawing the random codes.
    DrawCodes,
    /// Sealing the recovery payload.
    SealPayload,
    /// After the debit, inside the transaction.
    AfterDebit,
    /// After the code hashes are inserted.
    AfterCodes,
    /// Just before COMMIT.
    BeforeCommit,
    /// Fails a license's writes after its debit, as a database error would: in a group
    /// transaction, every request of the group must fail and none commit.
    LicenseWrite,
    /// Panics in the request handler after drawing the codes, with a message that quotes one
    /// of them: the answer must be a plain 500 and neither the answer nor the log may hold it.
    Panic,
    /// Makes the batch's first code hash one that another batch already holds, as an 80-bit
    /// collision would: the code must be redrawn, not the batch failed.
    CodeCollision,
}

/// Moments around the COMMIT of a keyed write at which a test build can kill its own process
/// (feature `fault-injection`), as a power cut or an OOM kill would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Every statement has run; the COMMIT has not been sent.
    BeforeCommit,
    /// The COMMIT has returned; the answer has not been sent.
    AfterCommit,
}

/// Environment variable arming a [`CrashPoint`] in a test build: `before-commit:N` or
/// `after-commit:N` kills the process with SIGKILL at the N-th keyed commit it makes.
#[cfg(feature = "fault-injection")]
pub const CRASH_AT_ENV: &str = "PARTNER_BILLING_CRASH_AT";

/// Kills this process with SIGKILL if [`CRASH_AT_ENV`] armed `point` for this commit.
#[cfg(feature = "fault-injection")]
pub(crate) fn crash_point(point: CrashPoint) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    static ARMED: OnceLock<Option<(CrashPoint, u64)>> = OnceLock::new();
    static COMMITS: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| {
        let value = std::env::var(CRASH_AT_ENV).ok()?;
        let (name, n) = value.split_once(':')?;
        let point = match name {
            "before-commit" => CrashPoint::BeforeCommit,
            "after-commit" => CrashPoint::AfterCommit,
            _ => return None,
        };
        Some((point, n.parse().ok()?))
    });
    let Some((armed_point, nth)) = *armed else {
        return;
    };
    let commit = if point == CrashPoint::BeforeCommit {
        COMMITS.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        COMMITS.load(Ordering::SeqCst)
    };
    if point == armed_point && commit == nth {
        tracing::warn!(?point, commit, "fault injection: killing this process");
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        // SIGKILL is asynchronous to the sender's return; never go on past the crash point.
        loop {
            std::thread::park();
        }
    }
}

/// Without feature `fault-injection` nothing can be armed.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn crash_point(_point: CrashPoint) {}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Promo batches drawn and stored at once per process. Each holds up to 1000 codes, their
/// hashes, the sealed payload and a 2000-parameter statement (about 1 MB); the database writes
/// them one at a time anyway, so more in parallel only hold memory while they queue.
const PROMO_BATCHES_AT_ONCE: usize = 4;

/// Promo batches of one account generated at once per process: below the global count, so
/// one account's batches never hold every slot and other accounts are not queued behind
/// them (DESIGN.md §19). An account's further batches wait holding no global slot.
pub const PROMO_BATCHES_PER_ACCOUNT: usize = 2;

/// SQLite connections: one writes at a time whatever the count, and each costs a thread, its
/// allocator arena and its page cache, so a few serve two cores' worth of readers.
const SQLITE_CONNECTIONS: u32 = 4;

/// How long a request waits for a database connection before answering 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

impl Store {
    /// Connects, applies pending migrations, and returns the store. A SQLite file is created if
    /// missing.
    pub async fn connect(database_url: &str, clock: Clock) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(database_url)?;
        let url = match backend {
            Backend::Sqlite if !database_url.contains("mode=") => {
                let sep = if database_url.contains('?') { '&' } else { '?' };
                format!("{database_url}{sep}mode=rwc")
            }
            _ => database_url.to_owned(),
        };
        if backend == Backend::Sqlite {
            create_private_sqlite_file(database_url)?;
        }
        let options = AnyConnectOptions::from_str(&url).map_err(|e| {
            Error::Internal(format!("invalid database URL: {}", redact_url_error(&e)))
        })?;
        let pool_options = AnyPoolOptions::new().acquire_timeout(ACQUIRE_TIMEOUT);
        let pool = match backend {
            Backend::Sqlite => {
                pool_options
                    .max_connections(SQLITE_CONNECTIONS)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            // WAL lets readers run beside the one writer; FULL makes each commit
                            // durable; the busy timeout queues writers instead of failing them.
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = FULL").await?;
                            conn.execute("PRAGMA busy_timeout = 30000").await?;
                            // 1 MiB of page cache per connection (SQLite's default is 2 MiB).
                            conn.execute("PRAGMA cache_size = -1024").await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            // The WAL is cut back to 64 MiB after each checkpoint, so sustained
                            // batch load never leaves it at gigabytes (DESIGN.md §19).
                            conn.execute("PRAGMA journal_size_limit = 67108864").await?;
                            Ok(())
                        })
                    })
                    .connect_with(options)
                    .await?
            }
            Backend::Postgres => {
                pool_options
                    .max_connections(16)
                    .connect_with(options)
                    .await?
            }
        };
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&pool)
            .await
            .map_err(|e| Error::Internal(format!("migration failed: {e}")))?;
        Ok(Self {
            pool,
            backend,
            clock,
            in_flight: Arc::default(),
            master_key: None,
            license_groups: Arc::default(),
            group_commit: true,
            promo_permits: Arc::new(tokio::sync::Semaphore::new(PROMO_BATCHES_AT_ONCE)),
            webhooks: Arc::default(),
            webhook_wake: Arc::default(),
            account_promo_permits: Arc::default(),
            #[cfg(feature = "fault-injection")]
            faults: Arc::default(),
        })
    }

    /// Gives the store the master key that promo codes need.
    pub fn with_master_key(mut self, key: MasterKey) -> Self {
        self.master_key = Some(Arc::new(key));
        self
    }

    /// Turns group commit of concurrent license requests on (the default) or off, e.g. to
    /// measure one transaction per request.
    pub fn with_group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }

    /// Sets the webhook delivery schedule and the URL rule (`--webhook-backoff`,
    /// `--webhook-allow-insecure`).
    pub fn with_webhook_settings(mut self, settings: crate::webhooks::WebhookSettings) -> Self {
        self.webhooks = Arc::new(settings);
        self
    }

    /// The webhook delivery schedule and URL rule.
    pub fn webhook_settings(&self) -> &crate::webhooks::WebhookSettings {
        &self.webhooks
    }

    /// Wakes this process's webhook worker: an event was just queued.
    pub fn wake_webhook_worker(&self) {
        self.webhook_wake.notify_one();
    }

    /// Resolves when [`wake_webhook_worker`](Self::wake_webhook_worker) is called.
    pub async fn webhook_worker_woken(&self) {
        self.webhook_wake.notified().await;
    }

    /// Calls `observer` with the number of requests of every license group transaction that
    /// commits (for metrics); only the first observer set on a store counts.
    pub fn observe_license_groups(&self, observer: impl Fn(usize) + Send + Sync + 'static) {
        self.license_groups.observe(Box::new(observer));
    }

    /// Whether concurrent license requests share transactions.
    pub fn group_commit(&self) -> bool {
        self.group_commit
    }

    /// License requests waiting for a group transaction, requests inside a running one, and
    /// group transactions begun: for tests that check the grouping itself.
    #[doc(hidden)]
    pub fn license_group_stats(&self) -> (usize, usize, u64) {
        self.license_groups.stats()
    }

    /// Waits for a turn to generate a promo batch: first one of the account's
    /// [`PROMO_BATCHES_PER_ACCOUNT`], then one of the process's [`PROMO_BATCHES_AT_ONCE`].
    pub(crate) async fn promo_permit(&self, account_id: i64) -> Result<PromoPermit<'_>> {
        let closed = |_| Error::Internal("promo permits closed".to_owned());
        let account = {
            let mut map = self
                .account_promo_permits
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            Arc::clone(map.entry(account_id).or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(PROMO_BATCHES_PER_ACCOUNT))
            }))
        };
        let account = account.acquire_owned().await.map_err(closed)?;
        let global = self.promo_permits.acquire().await.map_err(closed)?;
        Ok(PromoPermit {
            _account: account,
            _global: global,
        })
    }

    pub(crate) fn license_groups(&self) -> &LicenseGroups {
        &self.license_groups
    }

    pub(crate) fn master_key(&self) -> Result<&MasterKey> {
        self.master_key
            .as_deref()
            .ok_or_else(|| Error::Internal("no master key configured".to_owned()))
    }

    /// Makes the next promo generation fail at `point` (once).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&self, point: FaultPoint) {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(point);
    }

    /// Whether a fault is armed at `point`; consumes it.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn fault(&self, point: FaultPoint) -> bool {
        let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        match faults.iter().position(|f| *f == point) {
            Some(index) => {
                faults.remove(index);
                true
            }
            None => false,
        }
    }

    /// Without feature `fault-injection` nothing can be armed: no lock on the request path.
    #[cfg(not(feature = "fault-injection"))]
    pub(crate) fn fault(&self, _point: FaultPoint) -> bool {
        false
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The pool, for reads that need no transaction.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Current time, Unix seconds.
    pub fn now_utc(&self) -> i64 {
        self.clock.now_utc()
    }

    /// Begins a write transaction. SQLite takes the write lock up front (`BEGIN IMMEDIATE`), so
    /// a read never has to upgrade to a write under concurrency.
    pub async fn begin_write(&self) -> Result<Tx> {
        Ok(match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    /// Moves the SQLite WAL into the database and truncates it (a no-op on PostgreSQL); run
    /// now and then, so that the WAL stays small between the automatic checkpoints.
    pub async fn checkpoint(&self) -> Result<()> {
        if self.backend == Backend::Sqlite {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes the pool, waiting for connections to return.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Claims a scoped idempotency key (`account:1:key`, `operator:token:2:key`) for this
    /// process until the guard drops; a second claim while the first runs is
    /// [`Error::RequestInProgress`].
    pub(crate) fn claim_in_flight(&self, entry: String) -> Result<InFlightGuard> {
        let mut set = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if !set.insert(entry.clone()) {
            return Err(Error::RequestInProgress);
        }
        Ok(InFlightGuard {
            set: Arc::clone(&self.in_flight),
            entry,
        })
    }
}

/// A turn to generate a promo batch: the account's slot and a global one, released on drop.
#[derive(Debug)]
pub(crate) struct PromoPermit<'a> {
    _account: tokio::sync::OwnedSemaphorePermit,
    _global: tokio::sync::SemaphorePermit<'a>,
}

/// Releases an in-flight claim when dropped, however the request ends.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    set: Arc<Mutex<HashSet<String>>>,
    entry: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.entry);
    }
}

/// Creates a missing SQLite database file empty with mode 0600 before SQLite opens it: SQLite
/// then creates its `-wal` and `-shm` files with the database file's mode, so every file of
/// the database is private (DESIGN.md §19). An existing file is left as it is.
fn create_private_sqlite_file(database_url: &str) -> Result<()> {
    let Some(path) = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))
    else {
        return Ok(());
    };
    if path.is_empty() || path.starts_with(':') || database_url.contains("mode=memory") {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        // A directory that does not exist: SQLite reports it in its own words.
        Err(_) => Ok(()),
    }
}

/// Never echo a URL back: it may hold a password.
fn redact_url_error(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Configuration(_) => "unparseable or unsupported".to_owned(),
        other => other.to_string(),
    }
}

/// Whether an error is a unique-constraint violation.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|db| matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation))
}
