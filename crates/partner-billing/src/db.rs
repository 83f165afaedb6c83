//! The database layer: SQLite or PostgreSQL, chosen by the URL's scheme alone.
//!
//! Both run the same SQL through sqlx's `Any` driver (`$n` placeholders work on both). What
//! differs lives here: connection settings, how a write transaction begins, migrations, and
//! (in [`dialect`]) the few statements spelled differently on each. This layer knows no
//! domain type: the modules above it pass ids and strings in and read rows out.

#[cfg(test)]
mod closing;
pub mod dialect;
#[cfg(test)]
mod dropped_transactions;
mod readers;
mod reworded_migrations;
mod shared_reads;
mod write;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Connection, Executor};

use crate::error::{Error, Result};
pub use readers::Reader;
use readers::Readers;
pub use write::Tx;
use write::{SQLITE_BUSY_TIMEOUT_MS, WriteTurns};

/// Which database a [`Db`] talks to.
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

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// SQLite connections: one writes at a time whatever the count, and each costs a thread, its
/// allocator arena and its page cache, so a few serve two cores' worth of readers.
const SQLITE_CONNECTIONS: u32 = 5;

/// PostgreSQL connections: the one setting the process's concurrency limits derive from
/// (`runtime::Capacity`).
const POSTGRES_CONNECTIONS: u32 = 20;

/// Of those, the connections kept for one-statement reads ([`Reader`]): a fifth, at least one.
const fn kept_readers(connections: u32) -> u32 {
    if connections >= 10 {
        connections / 5
    } else {
        1
    }
}

/// How long closing waits for the bookkeeping writes still queued (SQLite). It comes after the
/// stop's drain, when what may still hold the turn (a license group finishing on its own, a
/// WAL checkpoint) ends within a write's time; the stop's whole length stays within the grace
/// period docs/operations.md recommends.
const BOOKKEEPING_AT_CLOSE: Duration = Duration::from_secs(5);

/// A pooled connection idle this long is pinged before it is handed out.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// How long a request waits for a database connection before answering 503, per backend.
/// PostgreSQL: 5 s, so that a database that stopped answering is told to clients quickly.
/// SQLite: as long as a write waits for its turn or for another process's lock (the busy
/// timeout). Its connections are busy only while this process's one writer and its readers
/// work on the same file, so a request that waits gets its turn; under heavy load 5 s turned
/// ordinary waits into 503s.
const fn acquire_timeout(backend: Backend) -> Duration {
    match backend {
        Backend::Sqlite => Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS as u64),
        Backend::Postgres => Duration::from_secs(5),
    }
}

/// The settings (PostgreSQL, `SET LOCAL`) under which a transaction reads list pages in their
/// index's order whatever the statistics say, each statement planned once per connection (see
/// [`Db::page`]).
macro_rules! pages_in_order {
    () => {
        "SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off; \
         SET LOCAL plan_cache_mode = force_generic_plan"
    };
}

/// The connection pool and which backend it talks to. Cheap to clone; every clone shares the
/// same pool.
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    /// SQLite only: this process's one write turn (see [`write`]).
    write_turns: Option<WriteTurns>,
    /// Connections kept for one-statement reads, cut from the pool.
    readers: Readers,
    /// The reads by key waiting for one of them, sent together.
    shared_reads: std::sync::Arc<shared_reads::SharedReads>,
}

impl Db {
    /// Connects and applies pending migrations. A SQLite file is created if missing.
    pub async fn connect(database_url: &str) -> Result<Self> {
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
        let pool_options = AnyPoolOptions::new()
            .acquire_timeout(acquire_timeout(backend))
            // sqlx pings every connection it hands out by default: a round trip before each
            // request's first statement. A connection in steady use is checked by that
            // statement instead (a broken one fails it with a retryable 503 and is closed when
            // sqlx pings it on release); one that sat idle, as through a database restart, is
            // pinged first.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_WHEN_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            });
        let pool = match backend {
            Backend::Sqlite => {
                pool_options
                    .max_connections(max_connections(backend))
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            // WAL lets readers run beside the one writer; FULL makes each commit
                            // durable; the busy timeout queues writers instead of failing them.
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = FULL").await?;
                            conn.execute(sqlx::AssertSqlSafe(format!(
                                "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"
                            )))
                            .await?;
                            // 1 MiB of page cache per connection (SQLite's default is 2 MiB).
                            conn.execute("PRAGMA cache_size = -1024").await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            // The WAL is cut back to 64 MiB after each checkpoint, so sustained
                            // batch load never leaves it at gigabytes (docs/security.md).
                            conn.execute("PRAGMA journal_size_limit = 67108864").await?;
                            Ok(())
                        })
                    })
                    .connect_with(options)
                    .await?
            }
            Backend::Postgres => {
                pool_options
                    .max_connections(max_connections(backend))
                    .connect_with(options)
                    .await?
            }
        };
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        reworded_migrations::accept(&pool, backend, migrator).await?;
        migrator
            .run(&pool)
            .await
            .map_err(|e| Error::Internal(format!("migration failed: {e}")))?;
        let write_turns = (backend == Backend::Sqlite)
            .then(|| WriteTurns::new(sqlite_file_path(database_url).map(Into::into), &pool));
        let readers = Readers::new(
            pool.clone(),
            usize::try_from(kept_readers(max_connections(backend))).unwrap_or(1),
            acquire_timeout(backend),
            PING_WHEN_IDLE_FOR,
        );
        Ok(Self {
            pool,
            backend,
            write_turns,
            readers,
            shared_reads: std::sync::Arc::new(shared_reads::SharedReads::new(
                shared_reads::IN_FLIGHT,
            )),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connections the pool shares among requests: all it opens but those kept for
    /// one-statement reads ([`Db::reader`]).
    pub fn shared_connections(&self) -> u32 {
        let all = max_connections(self.backend);
        all - kept_readers(all)
    }

    /// A connection kept for one-statement reads: no round trip to the database when it is
    /// handed over or given back. Run the read with [`Reader::run`].
    pub async fn reader(&self) -> Result<Reader> {
        self.readers.take().await
    }

    /// The rows of `sql` for `key` at time `at`, read in one statement with the other reads of
    /// `sql` waiting at the same time: [`shared_reads::SharedReads::read`] says what `sql` must
    /// read and answer.
    pub(crate) async fn shared_read(
        &self,
        sql: &'static str,
        key: String,
        at: i64,
    ) -> Result<Vec<sqlx::any::AnyRow>> {
        self.shared_reads.read(&self.readers, sql, key, at).await
    }

    /// Whether the database runs writers side by side (PostgreSQL) rather than one at a time
    /// (SQLite, whose write transactions take one lock).
    pub fn parallel_writers(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// The pool, for reads that need no transaction.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The rows of one page of a list (`ORDER BY` the key of an index, `LIMIT n`), read in that
    /// index's order whatever the planner's statistics say. PostgreSQL estimates an account's
    /// (or a login's) rows from its statistics; where they are missing (a table never
    /// analyzed) or stale, it takes a large account for a few rows and may read them all and
    /// sort them rather than read the first `n` of the index in order: a page of a million-row
    /// account then costs a second, not a tenth of a millisecond. So on PostgreSQL the page is
    /// read in a read-only transaction that turns sorting off for itself (`SET LOCAL`, which
    /// also holds behind PgBouncer's transaction pooling), leaving the index that gives the
    /// order as the only plan without a sort; one more round trip per page (`BEGIN ...`; the
    /// rollback that ends it is sent as the connection returns to the pool). The same
    /// transaction has the page planned once per connection and statement (`plan_cache_mode =
    /// force_generic_plan`): left to choose, PostgreSQL saw that a plan for the bound values
    /// beats the generic one (which cannot see the `LIMIT`) and planned every page again,
    /// 0.3-0.4 ms of its time per page, more than the page's reading. SQLite plans by rules and
    /// takes that index anyway.
    pub(crate) async fn page<'q, T>(
        &self,
        query: sqlx::query::QueryAs<'q, sqlx::Any, T, sqlx::any::AnyArguments>,
    ) -> Result<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> + Send + Unpin,
    {
        match self.backend {
            Backend::Sqlite => Ok(query.fetch_all(&self.pool).await?),
            Backend::Postgres => {
                let mut tx = self
                    .begin_detached(Some(concat!("BEGIN READ ONLY; ", pages_in_order!())))
                    .await?;
                let rows = query.fetch_all(&mut *tx).await?;
                // It wrote nothing: no `COMMIT` to wait for. Dropped, it ends by the rollback
                // sqlx queues and sends as the connection goes back to the pool, off the page's
                // way (the pool's check of a returned connection waits for it).
                drop(tx);
                Ok(rows)
            }
        }
    }

    /// Begins a transaction on a pooled connection (with `statement`, or a plain `BEGIN`), in
    /// a task of its own that runs until the database has answered, whatever becomes of the
    /// caller. sqlx 0.9.0 counts a transaction as begun only once its `BEGIN` is answered: a
    /// caller dropped while the `BEGIN` was on the wire (its client went away, the stop's
    /// drain ran out) handed the connection back to the pool inside the transaction, where the
    /// next user's statements ran in it: a write left uncommitted, or refused in a read-only
    /// one, until the connection's lifetime ended. Begun in the task, a transaction the caller
    /// no longer wants is dropped there, and rolled back as any other.
    async fn begin_detached(
        &self,
        statement: Option<&'static str>,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let pool = self.pool.clone();
        let begun = tokio::spawn(async move {
            match statement {
                Some(statement) => pool.begin_with(statement).await,
                None => pool.begin().await,
            }
        });
        Ok(begun.await.map_err(|e| {
            crate::Error::Internal(format!("beginning a transaction failed: {e}"))
        })??)
    }

    /// Begins a write transaction. On SQLite it waits for this process's write turn first,
    /// holding no connection meanwhile, then takes the write lock up front (`BEGIN
    /// IMMEDIATE`), so a read never has to upgrade to a write under concurrency.
    pub async fn begin_write(&self) -> Result<Tx> {
        let turn = self.take_turn().await?;
        self.begin_write_in(turn).await
    }

    /// Waits for this process's write turn (SQLite); none to wait for on PostgreSQL.
    async fn take_turn(&self) -> Result<Option<write::WriteTurn>> {
        Ok(match &self.write_turns {
            Some(turns) => Some(turns.take().await?),
            None => None,
        })
    }

    /// Runs one statement in a write transaction of its own holding `turn`.
    async fn execute_in_turn<'q>(
        &self,
        turn: write::WriteTurn,
        statement: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<sqlx::any::AnyQueryResult> {
        let mut tx = self.begin_write_in(Some(turn)).await?;
        let result = statement.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(result)
    }

    /// Runs one write statement as every write must run: on SQLite in a write transaction of
    /// its own, which waits for this process's write turn holding no connection; on PostgreSQL,
    /// whose writers run side by side, on its own (autocommit). Sent on a pooled SQLite
    /// connection without the turn, it would wait for SQLite's lock holding that connection, and
    /// enough such waits leave the writer that holds the lock no connection for its next read:
    /// every request stalls until the busy timeout.
    pub async fn write_one<'q>(
        &self,
        statement: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<sqlx::any::AnyQueryResult> {
        match self.take_turn().await? {
            Some(turn) => self.execute_in_turn(turn, statement).await,
            None => Ok(statement.execute(&self.pool).await?),
        }
    }

    /// As [`write_one`](Self::write_one), for bookkeeping a request should not wait for (a
    /// key's last use, a session's touch): on SQLite it runs now when this process's write
    /// turn is free, and otherwise waits for the turn in a task of its own, off the request's
    /// way; while one write of `key` (what it writes: a key's row, say) waits, another is
    /// dropped, so a burst of requests queues one write, not one each. On PostgreSQL it runs
    /// now. Skipped rather than queued, a key used once while another write held the turn (a
    /// rolled key's last use, checked before revoking it) was never recorded. A queued write
    /// that fails (its turn not given within the turn's timeout, or still waiting when the
    /// store closes: see [`Db::close`]) is logged, not retried: the next use writes it.
    pub(crate) async fn write_one_soon(
        &self,
        key: String,
        statement: sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<()> {
        let Some(turns) = &self.write_turns else {
            statement.execute(&self.pool).await?;
            return Ok(());
        };
        if let Some(turn) = turns.try_take() {
            self.execute_in_turn(turn, statement).await?;
            return Ok(());
        }
        let Some(waiting) = turns.start_waiting(key) else {
            return Ok(());
        };
        let db = self.clone();
        tokio::spawn(async move {
            let written = db.write_one(statement).await;
            // No longer waiting, however the task ends (a panic, the runtime's shutdown).
            drop(waiting);
            if let Err(error) = written {
                tracing::warn!(%error, "a bookkeeping write failed");
            }
        });
        Ok(())
    }

    /// Begins a read-only transaction whose reads all see the database as of its first one, for
    /// a read that spans several statements (an export read a chunk at a time, a check that
    /// compares two sums). PostgreSQL: `REPEATABLE READ READ ONLY` (its default, `READ
    /// COMMITTED`, takes a new snapshot per statement). SQLite: a deferred transaction, which
    /// in WAL mode reads one snapshot from its first read on and takes no write lock.
    pub async fn begin_snapshot(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        self.begin_detached(match self.backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
        })
        .await
    }

    /// Begins a snapshot ([`Db::begin_snapshot`]) for a list read a page at a time, each page
    /// read in its index's order whatever the planner's statistics say, as `Db::page` reads
    /// one page: an export that must see one snapshot from its first chunk to its last.
    pub(crate) async fn begin_snapshot_of_pages(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        self.begin_detached(match self.backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(concat!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; ",
                pages_in_order!()
            )),
        })
        .await
    }

    /// A write transaction holding `turn` (SQLite) or none (PostgreSQL).
    async fn begin_write_in(&self, turn: Option<write::WriteTurn>) -> Result<Tx> {
        let tx = self
            .begin_detached(match self.backend {
                Backend::Sqlite => Some("BEGIN IMMEDIATE"),
                Backend::Postgres => None,
            })
            .await?;
        Ok(Tx::new(tx, turn))
    }

    /// Moves the SQLite WAL into the database and truncates it (a no-op on PostgreSQL); run
    /// now and then, so that the WAL stays small between the automatic checkpoints.
    pub async fn checkpoint(&self) -> Result<()> {
        if self.backend == Backend::Sqlite {
            // In the write turn, as every write: it takes SQLite's writer lock.
            let _turn = self.take_turn().await?;
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

    /// Closes the pool, waiting for connections to return (the kept readers' included). On
    /// SQLite the bookkeeping writes still waiting for their turn (`Db::write_one_soon`) are
    /// written first, for up to 5 s: a key used just before a stop keeps its last use.
    pub async fn close(&self) {
        if let Some(turns) = &self.write_turns
            && tokio::time::timeout(BOOKKEEPING_AT_CLOSE, turns.none_waiting())
                .await
                .is_err()
        {
            tracing::warn!("closing with bookkeeping writes still waiting for their turn");
        }
        self.readers.release_idle();
        self.pool.close().await;
    }
}

/// The most connections the pool of `backend` opens.
const fn max_connections(backend: Backend) -> u32 {
    match backend {
        Backend::Sqlite => SQLITE_CONNECTIONS,
        Backend::Postgres => POSTGRES_CONNECTIONS,
    }
}

/// Creates a missing SQLite database file empty with mode 0600 before SQLite opens it: SQLite
/// then creates its `-wal` and `-shm` files with the database file's mode, so every file of
/// the database is private (docs/security.md). An existing file is left as it is.
fn create_private_sqlite_file(database_url: &str) -> Result<()> {
    let Some(path) = sqlite_file_path(database_url) else {
        return Ok(());
    };
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

/// The file a SQLite database URL names (`sqlite://data/billing.db?mode=rwc`:
/// `data/billing.db`); `None` for PostgreSQL and for an in-memory database. What belongs beside
/// the database is placed by it: the file's private mode here, the default master key file
/// (`crypto::default_master_key_path`), so no module above this one reads a URL's scheme.
pub fn sqlite_file_path(database_url: &str) -> Option<&Path> {
    let path = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))?;
    if path.is_empty() || path.starts_with(':') || database_url.contains("mode=memory") {
        return None;
    }
    Some(Path::new(path))
}

/// Never echo a URL back: it may hold a password.
fn redact_url_error(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Configuration(_) => "unparseable or unsupported".to_owned(),
        other => other.to_string(),
    }
}

/// Whether an error is a unique-constraint violation.
/// A set of rows as one JSON text parameter, for the set-oriented statements (`json_each` on
/// SQLite, `json_array_elements` on PostgreSQL): sqlx's `Any` driver binds no arrays.
pub(crate) fn json_param<T: serde::Serialize + ?Sized>(rows: &T) -> Result<String> {
    serde_json::to_string(rows).map_err(|e| Error::Internal(format!("parameters: {e}")))
}

pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|db| matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation))
}
