//! Write transactions, and SQLite's one writer.
//!
//! SQLite lets one connection write at a time. Left to its busy handler, waiting writers each
//! hold a pooled connection while they sleep and retry, in no particular order: a few slow
//! writes (1000-code promo batches) then leave no connection for readers, which answer 503
//! once the pool's acquire timeout passes, and a writer can lose the lock again and again.
//! So on SQLite a write transaction first takes this process's one write turn, in arrival
//! order and without holding a connection, and only then a connection and the lock. Other
//! processes on the same file (replicas) still meet at SQLite's lock through the busy timeout.
//!
//! The turn also keeps the WAL bounded. SQLite's automatic checkpoints copy pages back but
//! cannot start the WAL over while readers keep using it, and `journal_size_limit` trims the
//! file only when it starts over: under steady batch load with a steady reader the WAL grew
//! by hundreds of MiB a minute. So a write that leaves the WAL past [`WAL_CHECKPOINT_BYTES`]
//! runs a `RESTART` checkpoint before it gives up its turn: it copies the WAL back, waits for
//! the readers still on older pages (reads take milliseconds; new readers go on meanwhile,
//! from the database file), and makes the next write start the WAL from its beginning.

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Any, AnyConnection, AnyPool, Transaction};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// How long a SQLite statement waits for another process's lock before it fails (every
/// connection's `busy_timeout`).
pub(super) const SQLITE_BUSY_TIMEOUT_MS: u32 = 30_000;

/// How long a write waits for its turn behind this process's other writes before it answers
/// 503: as long as SQLite's busy timeout lets it wait for another process's.
const WRITE_TURN_TIMEOUT: Duration = Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS as u64);

/// A WAL past this size is checkpointed (`RESTART`) by the write that grew it; the file then
/// stays near this size (it is reused from its start, and trimmed to `journal_size_limit`).
pub(crate) const WAL_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// This process's turns to write to a SQLite database: one at a time, first come first served
/// (tokio's semaphore is fair).
#[derive(Debug, Clone)]
pub(crate) struct WriteTurns {
    turns: Arc<Semaphore>,
    wal: Option<Arc<Wal>>,
    /// The bookkeeping writes waiting for a turn off their request's way, by what they write
    /// (see [`crate::db::Db::write_one_soon`]): one waits per key.
    waiting: Arc<Mutex<HashSet<String>>>,
    /// Told each time the last of them is done.
    none_waiting: Arc<Notify>,
}

/// What a write needs to keep the WAL bounded: its file, and the pool to checkpoint through.
#[derive(Debug)]
struct Wal {
    path: PathBuf,
    pool: AnyPool,
}

impl WriteTurns {
    /// The turns of the database at `database_path` (`None`: in memory, no WAL to bound).
    pub(crate) fn new(database_path: Option<PathBuf>, pool: &AnyPool) -> Self {
        let wal = database_path.map(|path| {
            let mut name = path.into_os_string();
            name.push("-wal");
            Arc::new(Wal {
                path: PathBuf::from(name),
                pool: pool.clone(),
            })
        });
        Self {
            turns: Arc::new(Semaphore::new(1)),
            wal,
            waiting: Arc::default(),
            none_waiting: Arc::default(),
        }
    }

    /// Marks a write of `key` as waiting for a turn until the guard drops; `None` if one
    /// already waits.
    pub(crate) fn start_waiting(&self, key: String) -> Option<Waiting> {
        let inserted = self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        inserted.then(|| Waiting {
            turns: self.clone(),
            key,
        })
    }

    /// Resolves once no bookkeeping write waits (at once if none does).
    pub(crate) async fn none_waiting(&self) {
        loop {
            let told = self.none_waiting.notified();
            let mut told = std::pin::pin!(told);
            // Listening before looking: a write done between the two still wakes this.
            told.as_mut().enable();
            if self
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                return;
            }
            told.await;
        }
    }

    /// Waits for the turn, up to [`WRITE_TURN_TIMEOUT`]; past it, a retryable 503.
    pub(crate) async fn take(&self) -> Result<WriteTurn> {
        let permit = Arc::clone(&self.turns).acquire_owned();
        match tokio::time::timeout(WRITE_TURN_TIMEOUT, permit).await {
            Ok(Ok(permit)) => Ok(WriteTurn {
                _permit: permit,
                wal: self.wal.clone(),
            }),
            Ok(Err(_)) => Err(Error::Unavailable(sqlx::Error::PoolClosed)),
            Err(_) => Err(Error::Unavailable(sqlx::Error::PoolTimedOut)),
        }
    }
}

impl WriteTurns {
    /// The turn if it is free now; `None` if another write holds it.
    pub(crate) fn try_take(&self) -> Option<WriteTurn> {
        Arc::clone(&self.turns)
            .try_acquire_owned()
            .ok()
            .map(|permit| WriteTurn {
                _permit: permit,
                wal: self.wal.clone(),
            })
    }
}

/// A write of one key waiting for its turn (see [`WriteTurns::start_waiting`]): no longer
/// waiting once dropped, however its task ends.
pub(crate) struct Waiting {
    turns: WriteTurns,
    key: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiting = self.turns.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.remove(&self.key);
        if waiting.is_empty() {
            self.turns.none_waiting.notify_waiters();
        }
    }
}

/// The process's write turn, held by one write transaction until it ends.
#[derive(Debug)]
pub(crate) struct WriteTurn {
    _permit: OwnedSemaphorePermit,
    wal: Option<Arc<Wal>>,
}

impl WriteTurn {
    /// After a commit: when the WAL has grown past [`WAL_CHECKPOINT_BYTES`], a `RESTART`
    /// checkpoint in a task of its own that keeps the turn until it is done (the committed
    /// request is answered meanwhile; the next write waits for it). A checkpoint that cannot
    /// finish (another process reading for long) is tried again after a later write.
    fn release_after_commit(self) {
        let Some(wal) = self.wal.clone() else {
            return;
        };
        let size = std::fs::metadata(&wal.path).map_or(0, |m| m.len());
        if size <= WAL_CHECKPOINT_BYTES {
            return;
        }
        tokio::spawn(async move {
            match checkpoint(&wal.pool).await {
                Ok(Checkpoint { busy: 0, .. }) => {
                    tracing::debug!(wal_bytes = size, "WAL checkpointed")
                }
                Ok(_) => tracing::debug!(wal_bytes = size, "WAL checkpoint found readers busy"),
                Err(err) => tracing::warn!(wal_bytes = size, error = %err, "WAL checkpoint failed"),
            }
            drop(self);
        });
    }
}

/// Waits for readers on older pages at most [`CHECKPOINT_WAIT_MS`]: the turn is held
/// meanwhile, and a later write tries again.
const CHECKPOINT_WAIT_MS: u32 = 1000;

/// What this process reads of SQLite's answer to `PRAGMA wal_checkpoint` (columns `busy`,
/// `log`, `checkpointed`), by name.
#[derive(sqlx::FromRow)]
struct Checkpoint {
    /// 1 when readers kept the checkpoint from finishing, else 0.
    busy: i64,
}

/// A `RESTART` checkpoint and SQLite's answer.
async fn checkpoint(pool: &AnyPool) -> Result<Checkpoint, sqlx::Error> {
    use sqlx::Executor;
    let mut conn = pool.acquire().await?;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}"
    )))
    .await?;
    let answer = sqlx::query_as("PRAGMA wal_checkpoint(RESTART)")
        .fetch_one(&mut *conn)
        .await;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"
    )))
    .await?;
    answer
}

/// A write transaction on either backend. Statements run on it as on the connection
/// (`&mut *tx`); [`commit`](Self::commit) or [`rollback`](Self::rollback) ends it, and so does
/// dropping it (a rollback). On SQLite it holds the process's write turn until it ends.
#[derive(Debug)]
pub struct Tx {
    tx: Transaction<'static, Any>,
    turn: Option<WriteTurn>,
}

impl Tx {
    pub(crate) fn new(tx: Transaction<'static, Any>, turn: Option<WriteTurn>) -> Self {
        Self { tx, turn }
    }

    /// Commits; the write turn is given up once the COMMIT returned (and, on SQLite, the
    /// WAL was checkpointed if it had grown too large).
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        let Self { tx, turn } = self;
        let committed = tx.commit().await;
        if let (Ok(()), Some(turn)) = (&committed, turn) {
            turn.release_after_commit();
        }
        committed
    }

    /// Rolls back; the write turn is given up once the ROLLBACK returned.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        let Self { tx, turn } = self;
        let rolled_back = tx.rollback().await;
        drop(turn);
        rolled_back
    }
}

impl Deref for Tx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}
