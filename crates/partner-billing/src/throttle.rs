//! Attempt limits shared by every replica (docs/security.md), and the bound on password hashing.
//!
//! Attempts are counted in the database, per (kind, subject), in one-minute buckets; a limit
//! sums the buckets of its window. A subject is an identifier — a client id, a source address,
//! an account id — never a password or a secret.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::limits::{self, AttemptLimit, PASSWORD_HASHES_WAITING_MAX};
use crate::store::Store;

/// Length of one counting bucket.
const BUCKET_SECONDS: i64 = 60;

/// Buckets older than the longest window of the limits above (an hour) are deleted by
/// [`purge_expired`].
const LONGEST_WINDOW_SECONDS: i64 = 60 * 60;

/// A limit: at most `max` attempts of `kind` per subject within `window_seconds`.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub kind: &'static str,
    pub max: i64,
    pub window_seconds: i64,
}

impl Limit {
    /// The figures of `limit` (from [`crate::limits`]), counted under `kind`.
    const fn counted_as(kind: &'static str, limit: AttemptLimit) -> Self {
        Self {
            kind,
            max: limit.max,
            window_seconds: limit.window_seconds,
        }
    }
}

/// Failed panel sign-ins per client id: [`limits::SIGN_IN_FAILURES_PER_CLIENT_ID`].
pub const SIGN_IN_PER_CLIENT_ID: Limit =
    Limit::counted_as("sign_in_client_id", limits::SIGN_IN_FAILURES_PER_CLIENT_ID);

/// Failed panel sign-ins per source address: [`limits::SIGN_IN_FAILURES_PER_ADDRESS`].
pub const SIGN_IN_PER_ADDRESS: Limit =
    Limit::counted_as("sign_in_address", limits::SIGN_IN_FAILURES_PER_ADDRESS);

/// `Reseller.UnknownLogin` answers per account: [`limits::UNKNOWN_LOGINS_PER_ACCOUNT`].
pub const UNKNOWN_LOGIN_PER_ACCOUNT: Limit =
    Limit::counted_as("unknown_login", limits::UNKNOWN_LOGINS_PER_ACCOUNT);

/// Failed promo redemptions per operator token (or the operator's console), whatever the
/// logins: [`limits::REDEMPTION_FAILURES_PER_OPERATOR`] (the per-login limit is in
/// `redemption::attempts`).
pub const FAILED_REDEMPTIONS_PER_OPERATOR: Limit = Limit::counted_as(
    "redemption_operator",
    limits::REDEMPTION_FAILURES_PER_OPERATOR,
);

/// One counted attempt, to be kept (a failure) or taken back (a success).
#[derive(Debug, Clone)]
pub struct Attempt {
    kind: &'static str,
    subject: String,
    bucket_utc: i64,
}

fn bucket_of(now: i64) -> i64 {
    now - now.rem_euclid(BUCKET_SECONDS)
}

/// The attempts of `subject` within `limit`'s window, and the start of its oldest bucket that
/// holds one (a bucket whose attempts were all taken back, by successes, counts for nothing:
/// a `Retry-After` from it would send the caller back too early).
async fn window(store: &Store, limit: Limit, subject: &str) -> Result<(i64, Option<i64>)> {
    let since = store.now_utc() - limit.window_seconds;
    #[derive(sqlx::FromRow)]
    struct Window {
        attempts: Option<i64>,
        oldest: Option<i64>,
    }
    let row: Window = sqlx::query_as(
        "SELECT CAST(SUM(attempts) AS BIGINT) AS attempts, MIN(bucket_utc) AS oldest \
         FROM abuse_attempts \
         WHERE kind = $1 AND subject = $2 AND bucket_utc > $3 AND attempts > 0",
    )
    .bind(limit.kind)
    .bind(subject)
    .bind(since)
    .fetch_one(store.pool())
    .await?;
    Ok((row.attempts.unwrap_or(0), row.oldest))
}

/// The refusal for a subject over its limit: retry once its oldest bucket leaves the window.
fn refusal(store: &Store, limit: Limit, oldest: Option<i64>) -> Error {
    let until = oldest.map_or(store.now_utc() + BUCKET_SECONDS, |b| {
        b + limit.window_seconds
    });
    let retry_after_seconds = u64::try_from(until - store.now_utc()).unwrap_or(0).max(1);
    Error::RateLimited {
        retry_after_seconds,
    }
}

/// `Err(RateLimited)` when `subject` already used up `limit`; nothing is counted.
pub async fn check(store: &Store, limit: Limit, subject: &str) -> Result<()> {
    let (count, oldest) = window(store, limit, subject).await?;
    if count >= limit.max {
        return Err(refusal(store, limit, oldest));
    }
    Ok(())
}

/// Counts one attempt of `subject`. When that takes it past `limit` (concurrent attempts raced
/// past [`check`]), the attempt is taken back and the answer is `Err(RateLimited)`.
pub async fn count(store: &Store, limit: Limit, subject: &str) -> Result<Attempt> {
    let attempt = Attempt {
        kind: limit.kind,
        subject: subject.to_owned(),
        bucket_utc: bucket_of(store.now_utc()),
    };
    store.write_one(sqlx::query(
        "INSERT INTO abuse_attempts (kind, subject, bucket_utc, attempts) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (kind, subject, bucket_utc) DO UPDATE SET attempts = abuse_attempts.attempts + 1",
    )
    .bind(attempt.kind)
    .bind(attempt.subject.as_str())
    .bind(attempt.bucket_utc)
    ).await?;
    let (count, oldest) = window(store, limit, subject).await?;
    if count > limit.max {
        attempt.take_back(store).await?;
        return Err(refusal(store, limit, oldest));
    }
    Ok(attempt)
}

impl Attempt {
    /// Takes a counted attempt back: it succeeded, or was refused without being tried.
    pub async fn take_back(&self, store: &Store) -> Result<()> {
        store
            .write_one(
                sqlx::query(
                    "UPDATE abuse_attempts SET attempts = attempts - 1 \
             WHERE kind = $1 AND subject = $2 AND bucket_utc = $3 AND attempts > 0",
                )
                .bind(self.kind)
                .bind(self.subject.as_str())
                .bind(self.bucket_utc),
            )
            .await?;
        Ok(())
    }
}

/// Deletes buckets no window reaches any more.
pub async fn purge_expired(store: &Store) -> Result<u64> {
    let result = store
        .write_one(
            sqlx::query("DELETE FROM abuse_attempts WHERE bucket_utc <= $1")
                .bind(store.now_utc() - LONGEST_WINDOW_SECONDS - BUCKET_SECONDS),
        )
        .await?;
    Ok(result.rows_affected())
}

/// Password hashes computed at once: one per core.
fn hashing_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

type Job = Box<dyn FnOnce() + Send>;

/// The hashing threads, one per slot, and the count of requests waiting for a slot.
///
/// Dedicated threads rather than `spawn_blocking`: Argon2 allocates 19 MiB per run, and the
/// allocator keeps such a block cached per thread that ran it. The blocking pool hands runs to
/// ever new threads, so 500 concurrent sign-ins left over 500 MiB cached (measured); a fixed
/// thread per slot keeps that to one block per core.
struct HashingGate {
    permits: Arc<tokio::sync::Semaphore>,
    waiting: AtomicUsize,
    jobs: std::sync::mpsc::Sender<Job>,
}

fn gate() -> &'static HashingGate {
    static GATE: OnceLock<HashingGate> = OnceLock::new();
    GATE.get_or_init(|| {
        let slots = hashing_slots();
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let queue = Arc::new(std::sync::Mutex::new(queue));
        for n in 0..slots {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name(format!("password-hash-{n}"))
                .spawn(move || {
                    loop {
                        let job = match queue.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        };
                        // A panicking job answers nothing (its caller sees an internal
                        // error); the thread goes on serving.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            if let Err(err) = spawned {
                tracing::error!(error = %err, "could not start a password hashing thread");
            }
        }
        HashingGate {
            permits: Arc::new(tokio::sync::Semaphore::new(slots)),
            waiting: AtomicUsize::new(0),
            jobs,
        }
    })
}

/// Decrements the waiting count however the wait ends (a client that goes away included).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `work` (a password hash or verification) off the async executor, on one of the
/// hashing threads: at most one per core at once, process-wide; with
/// [`PASSWORD_HASHES_WAITING_MAX`] already waiting, `Err(Overloaded)` at once.
pub async fn hashing<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let gate = gate();
    let permit = match Arc::clone(&gate.permits).try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            if gate.waiting.fetch_add(1, Ordering::SeqCst) >= PASSWORD_HASHES_WAITING_MAX {
                gate.waiting.fetch_sub(1, Ordering::SeqCst);
                return Err(Error::Overloaded);
            }
            let _waiting = Waiting(&gate.waiting);
            Arc::clone(&gate.permits)
                .acquire_owned()
                .await
                .map_err(|_| Error::Internal("hashing gate closed".to_owned()))?
        }
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let value = work();
        drop(permit);
        let _ = reply.send(value);
    });
    gate.jobs
        .send(job)
        .map_err(|_| Error::Internal("password hashing threads stopped".to_owned()))?;
    answer
        .await
        .map_err(|_| Error::Internal("password hashing task failed".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_keeps_every_window() {
        for limit in [
            SIGN_IN_PER_CLIENT_ID,
            SIGN_IN_PER_ADDRESS,
            UNKNOWN_LOGIN_PER_ACCOUNT,
            FAILED_REDEMPTIONS_PER_OPERATOR,
        ] {
            assert!(
                limit.window_seconds <= LONGEST_WINDOW_SECONDS,
                "{}",
                limit.kind
            );
        }
    }
}
