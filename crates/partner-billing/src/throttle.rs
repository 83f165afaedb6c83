//! Attempt limits shared by every replica (docs/security.md), and the bound on password hashing.
//!
//! Attempts are counted in the database, per (kind, subject), in one-minute buckets; a limit
//! sums the buckets of its window. A subject is an identifier — a client id, a source address,
//! an account id — never a password or a secret.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::store::Store;

/// Length of one counting bucket.
const BUCKET_SECONDS: i64 = 60;

/// Buckets older than the longest window are deleted by [`purge_expired`].
const LONGEST_WINDOW_SECONDS: i64 = 60 * 60;

/// A limit: at most `max` attempts of `kind` per subject within `window_seconds`.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub kind: &'static str,
    pub max: i64,
    pub window_seconds: i64,
}

/// Failed panel sign-ins per client id: 10 in 15 minutes.
pub const SIGN_IN_PER_CLIENT_ID: Limit = Limit {
    kind: "sign_in_client_id",
    max: 10,
    window_seconds: 15 * 60,
};

/// Failed panel sign-ins per source address: 50 in 15 minutes.
pub const SIGN_IN_PER_ADDRESS: Limit = Limit {
    kind: "sign_in_address",
    max: 50,
    window_seconds: 15 * 60,
};

/// `Reseller.UnknownLogin` answers per account: 100 an hour.
pub const UNKNOWN_LOGIN_PER_ACCOUNT: Limit = Limit {
    kind: "unknown_login",
    max: 100,
    window_seconds: 60 * 60,
};

/// Failed promo redemptions per operator token (or the operator's console): 1000 an hour,
/// whatever the logins (the per-login limit is in `redemption::attempts`).
pub const FAILED_REDEMPTIONS_PER_OPERATOR: Limit = Limit {
    kind: "redemption_operator",
    max: 1000,
    window_seconds: 60 * 60,
};

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

/// The attempts of `subject` within `limit`'s window, and the start of its oldest bucket.
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
         WHERE kind = $1 AND subject = $2 AND bucket_utc > $3",
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
    sqlx::query(
        "INSERT INTO abuse_attempts (kind, subject, bucket_utc, attempts) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (kind, subject, bucket_utc) DO UPDATE SET attempts = abuse_attempts.attempts + 1",
    )
    .bind(attempt.kind)
    .bind(attempt.subject.as_str())
    .bind(attempt.bucket_utc)
    .execute(store.pool())
    .await?;
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
        sqlx::query(
            "UPDATE abuse_attempts SET attempts = attempts - 1 \
             WHERE kind = $1 AND subject = $2 AND bucket_utc = $3 AND attempts > 0",
        )
        .bind(self.kind)
        .bind(self.subject.as_str())
        .bind(self.bucket_utc)
        .execute(store.pool())
        .await?;
        Ok(())
    }
}

/// Deletes buckets no window reaches any more.
pub async fn purge_expired(store: &Store) -> Result<u64> {
    let result = sqlx::query("DELETE FROM abuse_attempts WHERE bucket_utc <= $1")
        .bind(store.now_utc() - LONGEST_WINDOW_SECONDS - BUCKET_SECONDS)
        .execute(store.pool())
        .await?;
    Ok(result.rows_affected())
}

/// Password hashes computed at once: one per core.
fn hashing_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Hash requests allowed to wait for a slot; one more is [`Error::Overloaded`].
pub const MAX_WAITING_HASHES: usize = 64;

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
/// hashing threads: at most one per core at once, process-wide; with [`MAX_WAITING_HASHES`]
/// already waiting, `Err(Overloaded)` at once.
pub async fn hashing<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let gate = gate();
    let permit = match Arc::clone(&gate.permits).try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            if gate.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING_HASHES {
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
