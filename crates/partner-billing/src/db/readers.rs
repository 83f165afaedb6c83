//! Connections kept for one-statement reads (authentication, balances), out of the pool's
//! release cycle.
//!
//! sqlx's pool tests every connection given back to it with a round trip to the database (a
//! ping, to flush what a cancelled query may have left). For a request that reads one row that
//! doubles its database work: measured on PostgreSQL, a balances read reached a third of the raw
//! statements' pace (docs/performance.md, "Reads"). A [`Reader`] takes a connection from the pool
//! once and keeps it: handed from read to read without a ping, pinged only after it sat idle (as
//! the pool's own connections are), retired after [`KEEP_FOR`] (so it meets the pool's own
//! lifetime rules again), and closed when a read fails in a way that may have left it unusable
//! or was cancelled midway. Taking one (the wait for a slot, a ping, a new connection) is
//! bounded as a whole by the pool's acquire timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// The kept connections of one process: at most `count` at once, taken from the pool lazily.
#[derive(Debug, Clone)]
pub(crate) struct Readers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: AnyPool,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    /// How long a read waits for a connection before it fails (as a pool's acquire does).
    acquire_timeout: Duration,
    /// A kept connection idle this long is pinged before its next read (as the pool's are).
    ping_when_idle_for: Duration,
    /// Set when the pool closes: connections are no longer kept.
    closing: AtomicBool,
}

#[derive(Debug)]
struct Idle {
    conn: Kept,
    since: Instant,
}

/// A kept connection and when it was taken from the pool.
#[derive(Debug)]
struct Kept {
    conn: PoolConnection<Any>,
    taken: Instant,
}

/// How long a connection is kept before it goes back to the pool (which then applies its own
/// lifetime and idle rules), however busy it is.
const KEEP_FOR: Duration = Duration::from_secs(600);

impl Readers {
    /// Up to `count` connections of `pool`, kept once taken; reads wait for one as the pool's
    /// callers do (`acquire_timeout`), and one idle for `ping_when_idle_for` is pinged first.
    pub(crate) fn new(
        pool: AnyPool,
        count: usize,
        acquire_timeout: Duration,
        ping_when_idle_for: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                idle: Mutex::new(Vec::with_capacity(count)),
                permits: Arc::new(Semaphore::new(count.max(1))),
                acquire_timeout,
                ping_when_idle_for,
                closing: AtomicBool::new(false),
            }),
        }
    }

    /// A connection for one read: a kept one (pinged first if it sat idle), else a new one from
    /// the pool. Waits, all in all, as long as the pool would before answering 503.
    pub(crate) async fn take(&self) -> Result<Reader> {
        tokio::time::timeout(self.inner.acquire_timeout, self.take_unbounded())
            .await
            .map_err(|_| Error::from(sqlx::Error::PoolTimedOut))?
    }

    /// How long a read waits for a connection before it fails.
    pub(crate) fn acquire_timeout(&self) -> Duration {
        self.inner.acquire_timeout
    }

    /// [`take`](Self::take) without its bound, for a caller that bounds a longer wait.
    pub(crate) async fn take_unbounded(&self) -> Result<Reader> {
        let permit = Arc::clone(&self.inner.permits)
            .acquire_owned()
            .await
            .map_err(|_| Error::from(sqlx::Error::PoolClosed))?;
        let idle = self.inner.idle.lock().map_or(None, |mut idle| idle.pop());
        let kept = match idle {
            Some(Idle { conn, since }) if since.elapsed() < self.inner.ping_when_idle_for => conn,
            Some(Idle { mut conn, .. }) => match conn.conn.ping().await {
                Ok(()) => conn,
                Err(_) => {
                    conn.conn.close_on_drop();
                    drop(conn);
                    self.fresh().await?
                }
            },
            None => self.fresh().await?,
        };
        Ok(Reader {
            conn: Some(kept),
            readers: Arc::clone(&self.inner),
            // Nothing has run on it yet: it goes back as it came if it is dropped unused.
            reusable: true,
            _permit: permit,
        })
    }

    async fn fresh(&self) -> Result<Kept> {
        Ok(Kept {
            conn: self.inner.pool.acquire().await?,
            taken: Instant::now(),
        })
    }
}

impl Readers {
    /// Gives every idle kept connection back to the pool, so that closing the pool does not
    /// wait for them; a reader still running gives its connection back when it ends.
    pub(crate) fn release_idle(&self) {
        // Under the lock, so that no reader keeps its connection after the clear.
        if let Ok(mut idle) = self.inner.idle.lock() {
            self.inner.closing.store(true, Ordering::Relaxed);
            idle.clear();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A pool connection given back spawns a task (its ping); outside a runtime, as when the
        // last handle of a store goes with a test's runtime, the kept connections are closed as
        // they are instead.
        if tokio::runtime::Handle::try_current().is_err()
            && let Ok(idle) = self.idle.get_mut()
        {
            for idle in idle.drain(..) {
                // Out of the pool's count without a task; the connection closes as it drops.
                drop(idle.conn.conn.detach());
            }
        }
    }
}

/// One kept connection, lent for a read. Run the read through [`Reader::run`]: a connection
/// whose read did not finish cleanly goes back to the pool instead of being kept.
pub struct Reader {
    conn: Option<Kept>,
    readers: Arc<Inner>,
    /// Set when the last read finished with an answer from the database (or none has run); a
    /// reader dropped without one (an error of the connection, or a cancelled read) is not
    /// kept.
    reusable: bool,
    _permit: OwnedSemaphorePermit,
}

impl Reader {
    /// Runs one read on the connection, e.g. `reader.run(|c| query.fetch_all(c)).await`.
    pub async fn run<'c, T, F, Fut>(&'c mut self, read: F) -> Result<T>
    where
        F: FnOnce(&'c mut AnyConnection) -> Fut,
        Fut: Future<Output = sqlx::Result<T>> + 'c,
    {
        let Self { conn, reusable, .. } = self;
        *reusable = false;
        let conn = conn
            .as_mut()
            .ok_or_else(|| Error::Internal("reader without a connection".to_owned()))?;
        let result = read(&mut conn.conn).await;
        *reusable = keeps_connection(&result);
        Ok(result?)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let Some(mut kept) = self.conn.take() else {
            return;
        };
        if !self.reusable {
            // Closed, not handed on: a read that failed so, or was cut off, may have left it
            // in any state (the pool closes it on its own task).
            kept.conn.close_on_drop();
            return;
        }
        if kept.taken.elapsed() >= KEEP_FOR {
            // Back to the pool, which pings it and applies its lifetime rules.
            return;
        }
        if let Ok(mut idle) = self.readers.idle.lock()
            && !self.readers.closing.load(Ordering::Relaxed)
        {
            idle.push(Idle {
                conn: kept,
                since: Instant::now(),
            });
        }
    }
}

/// Whether a connection whose read ended so can serve the next one as it is: after an answer,
/// or an error the database reported about the statement alone (data, constraint, transaction
/// rollback, syntax or access: SQLSTATE classes 22, 23, 40, 42). Anything else, a lost
/// connection, a database going away, a session-level error, closes it.
fn keeps_connection<T>(result: &sqlx::Result<T>) -> bool {
    match result {
        Ok(_) | Err(sqlx::Error::RowNotFound) => true,
        Err(sqlx::Error::Database(db)) => db.code().is_some_and(|code| {
            ["22", "23", "40", "42"]
                .iter()
                .any(|class| code.starts_with(class))
        }),
        Err(_) => false,
    }
}
