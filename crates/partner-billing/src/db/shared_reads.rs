//! One statement for the reads that arrive together. The read every partner request starts
//! with (its API key, with the account and its balances) is asked many times at once under
//! load, each time for one key. Asked one by one, each costs a round trip to the database and a
//! wake-up of a database backend; here the reads that queue while [`IN_FLIGHT`] statements are
//! running are sent together when one of them ends, as one statement over a JSON array of
//! their keys, on a kept connection ([`super::Reader`]).
//!
//! No read waits for company: one that finds no statement running sends its own at once. A
//! statement for several callers runs on a task of its own, so a caller that goes away (its
//! client disconnected) never takes the others' answers with it. Waiting for a turn and a
//! connection is bounded by the pool's acquire timeout, as every read's is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::{Semaphore, oneshot};

use super::Reader;
use super::readers::Readers;
use crate::error::{Error, Result};

/// How many shared statements run at once. One lets the most reads queue behind it and share
/// the next. Measured on PostgreSQL on two cores (docs/performance.md, "Reads"), alternating:
/// one served 10–20 % more reads than two at 8 connections and about 6 % more at 64, with a
/// lower 99th percentile, and the license path and SQLite the same within the noise. (An
/// earlier machine, one run each, had put two ahead.)
pub(crate) const IN_FLIGHT: usize = 1;

/// The reads queued for each statement, and the turns to send one.
#[derive(Debug)]
pub(crate) struct SharedReads {
    /// Per statement (told apart by address: each is one `'static` string), the callers
    /// waiting. As many entries as statements that share, so a scan finds one.
    queued: Mutex<Vec<(&'static str, Vec<Waiting>)>>,
    turns: Arc<Semaphore>,
    /// Numbers the callers, so that one knows its own key in a batch.
    callers: AtomicU64,
}

/// One caller's key and where its rows go.
struct Waiting {
    caller: u64,
    key: String,
    at: i64,
    answer: oneshot::Sender<Result<Vec<AnyRow>>>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key (a secret's hash) stays out of debug output.
        f.debug_struct("Waiting")
            .field("caller", &self.caller)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl SharedReads {
    /// At most `in_flight` statements at once (at least one).
    pub(crate) fn new(in_flight: usize) -> Self {
        Self {
            queued: Mutex::default(),
            turns: Arc::new(Semaphore::new(in_flight.max(1))),
            callers: AtomicU64::new(0),
        }
    }

    /// The rows of `sql` for `key` at time `at`, read in one statement with the other reads
    /// of `sql` queued by then. `sql` reads the time in `$1` and the JSON array of keys in
    /// `$2`, and names each row's key by its 1-based position in the array in column
    /// `request`; a statement that reads at several times runs at the latest.
    pub(crate) async fn read(
        &self,
        readers: &Readers,
        sql: &'static str,
        key: String,
        at: i64,
    ) -> Result<Vec<AnyRow>> {
        let (answer, mut rows) = oneshot::channel();
        let caller = self.callers.fetch_add(1, Ordering::Relaxed);
        self.queue(sql, |queue| {
            queue.push(Waiting {
                caller,
                key,
                at,
                answer,
            });
        });
        let turn = async {
            let turn = Arc::clone(&self.turns)
                .acquire_owned()
                .await
                .map_err(|_| Error::from(sqlx::Error::PoolClosed))?;
            Ok::<_, Error>((turn, readers.take_unbounded().await?))
        };
        tokio::select! {
            biased;
            // Our key went with a statement another caller sent.
            rows = &mut rows => return answered(rows),
            turn = tokio::time::timeout(readers.acquire_timeout(), turn) => {
                // Timed out or failed: our key stays queued until the next caller to take a
                // turn drops it.
                let (turn, reader) =
                    turn.map_err(|_| Error::from(sqlx::Error::PoolTimedOut))??;
                let mut batch = self.queue(sql, std::mem::take);
                // Callers that went away (cancelled, or timed out waiting for a turn) take no
                // answer: their keys are not sent.
                batch.retain(|w| !w.answer.is_closed());
                match batch.as_slice() {
                    // Ours left with a statement that started meanwhile.
                    [] => drop(reader),
                    // Ours alone: read here, where going away loses no one else's answer.
                    [only] if only.caller == caller => {
                        run(reader, sql, batch).await;
                        drop(turn);
                    }
                    // Others' keys (ours among them, or already on its way): on a task of
                    // their own, which ends whatever becomes of this caller.
                    _ => {
                        tokio::spawn(async move {
                            run(reader, sql, batch).await;
                            drop(turn);
                        });
                    }
                }
            }
        }
        answered(rows.await)
    }

    /// Runs `f` on the callers waiting for `sql`, under the lock.
    fn queue<T>(&self, sql: &'static str, f: impl FnOnce(&mut Vec<Waiting>) -> T) -> T {
        // Nothing panics while the lock is held: a poisoned list is still whole.
        let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match queued.iter().position(|(s, _)| std::ptr::eq(*s, sql)) {
            Some(at) => at,
            None => {
                queued.push((sql, Vec::new()));
                queued.len() - 1
            }
        };
        f(&mut queued[at].1)
    }
}

fn answered(
    rows: std::result::Result<Result<Vec<AnyRow>>, oneshot::error::RecvError>,
) -> Result<Vec<AnyRow>> {
    rows.unwrap_or_else(|_| {
        Err(Error::Internal(
            "a shared read ended without an answer".to_owned(),
        ))
    })
}

/// Runs `sql` for `batch` on `reader` and hands each caller its rows, or the error.
async fn run(mut reader: Reader, sql: &'static str, batch: Vec<Waiting>) {
    let at = batch.iter().map(|w| w.at).max().unwrap_or_default();
    let keys: Vec<&str> = batch.iter().map(|w| w.key.as_str()).collect();
    let rows = match super::json_param(&keys) {
        Ok(keys) => {
            let query = sqlx::query(AssertSqlSafe(sql)).bind(at).bind(keys);
            reader.run(|c| query.fetch_all(c)).await
        }
        Err(e) => Err(e),
    };
    drop(reader);
    match rows.and_then(|rows| by_caller(rows, batch.len())) {
        Ok(answers) => {
            for (waiting, rows) in batch.into_iter().zip(answers) {
                // A caller that went away takes no answer.
                let _ = waiting.answer.send(Ok(rows));
            }
        }
        Err(e) => {
            // The first caller gets the error itself, the others its copy.
            let copies: Vec<Error> = batch.iter().skip(1).map(|_| e.again()).collect();
            for (waiting, e) in batch.into_iter().zip(std::iter::once(e).chain(copies)) {
                let _ = waiting.answer.send(Err(e));
            }
        }
    }
}

/// Each of `callers` callers' rows, by the 1-based position each row names in `request`. A
/// row that names none is an error of the whole statement, never a row dropped (which would
/// read as "no such key").
fn by_caller(rows: Vec<AnyRow>, callers: usize) -> Result<Vec<Vec<AnyRow>>> {
    let mut answers: Vec<Vec<AnyRow>> = (0..callers).map(|_| Vec::new()).collect();
    for row in rows {
        let position: i64 = row.try_get("request")?;
        let slot = usize::try_from(position)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|n| answers.get_mut(n))
            .ok_or_else(|| {
                Error::Internal(format!(
                    "a shared read answered position {position} of {callers}"
                ))
            })?;
        slot.push(row);
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::{AnyConnection, AnyPool, Connection};

    use super::*;

    /// Each key's value in `t`, with how many keys the statement carried and its time.
    const SQL: &str = "SELECT CAST(j.key AS INTEGER) + 1 AS request, t.v, \
                       json_array_length($2) AS sent, $1 AS at \
                       FROM json_each($2) j JOIN t ON t.k = j.value";

    /// Lets the other tasks of this (single-threaded) runtime run until `done` holds.
    async fn yield_until(mut done: impl FnMut() -> bool) {
        while !done() {
            tokio::task::yield_now().await;
        }
    }

    /// The caller that sends a statement for others may go away (its client disconnected)
    /// while the statement runs: the others still get their rows. A caller that goes away
    /// while queued has its key left out.
    #[tokio::test]
    async fn a_statement_sent_for_others_outlives_its_sender() {
        let dir = partner_billing_testkit::TempDir::new();
        let url = format!("sqlite://{}?mode=rwc", dir.path.join("t.db").display());
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(&url).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT NOT NULL); \
             INSERT INTO t VALUES ('a', 'for a'), ('b', 'for b'), ('c', 'for c')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let readers = Arc::new(Readers::new(
            pool,
            1,
            Duration::from_secs(10),
            Duration::from_secs(60),
        ));
        let shared = Arc::new(SharedReads::new(1));
        let queued = |shared: &SharedReads| shared.queue(SQL, |queue| queue.len());
        let read = |key: &str| {
            let (shared, readers, key) =
                (Arc::clone(&shared), Arc::clone(&readers), key.to_owned());
            tokio::spawn(async move { shared.read(&readers, SQL, key, 7).await })
        };

        // The only turn held: callers queue behind it, first come first served.
        let turn = Arc::clone(&shared.turns).acquire_owned().await.unwrap();
        let sender = read("a");
        yield_until(|| queued(&shared) == 1).await;
        let gone = read("c");
        yield_until(|| queued(&shared) == 2).await;
        let other = read("b");
        yield_until(|| queued(&shared) == 3).await;
        gone.abort();
        assert!(gone.await.is_err_and(|e| e.is_cancelled()));

        // The database locked: a statement, once sent, cannot answer until it is released.
        let mut lock = AnyConnection::connect(&url).await.unwrap();
        sqlx::raw_sql("BEGIN EXCLUSIVE")
            .execute(&mut lock)
            .await
            .unwrap();
        drop(turn);
        // The first caller takes the turn and the queue, and sends the statement.
        yield_until(|| queued(&shared) == 0).await;
        assert!(!sender.is_finished());
        sender.abort();
        assert!(sender.await.is_err_and(|e| e.is_cancelled()));
        sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();

        let rows = tokio::time::timeout(Duration::from_secs(30), other)
            .await
            .expect("the other caller is answered")
            .unwrap()
            .unwrap();
        let answered: Vec<(String, i64, i64)> = rows
            .iter()
            .map(|row| {
                (
                    row.try_get("v").unwrap(),
                    row.try_get("sent").unwrap(),
                    row.try_get("at").unwrap(),
                )
            })
            .collect();
        // Its own row; two keys sent (the sender's and its own, not the gone caller's).
        assert_eq!(answered, [("for b".to_owned(), 2, 7)]);
    }
}
