//! The guessing limit: at most [`REDEMPTION_FAILURES_PER_LOGIN`] failed redemptions per login in
//! its sliding window, counted in the database so that every replica enforces the same limit.
//!
//! An attempt is written down *before* it runs and committed, and only then counted (outside
//! that transaction, so the count reads every committed attempt): of two concurrent attempts
//! the later count always sees the other, so concurrency cannot slip past the limit. A success, or a failure that says nothing about the code (validation,
//! a key in progress, the database), takes its row back; a failed guess leaves it standing, even
//! though its transaction rolled back.

use crate::domain::UserId;
use crate::error::{Error, Result};
use crate::limits::REDEMPTION_FAILURES_PER_LOGIN;
use crate::store::Store;

/// Failed redemptions a login may make in one window.
const MAX_FAILED_ATTEMPTS: i64 = REDEMPTION_FAILURES_PER_LOGIN.max;

/// The sliding window, in seconds.
const WINDOW_SECONDS: i64 = REDEMPTION_FAILURES_PER_LOGIN.window_seconds;

/// An attempt written down and within the limit.
#[must_use = "an attempt stays counted unless released"]
pub(crate) struct Reservation {
    row_id: i64,
}

/// Writes the attempt down and counts the login's attempts in the window; over the limit it is
/// [`Error::TooManyAttempts`] with the seconds until the oldest attempt leaves the window.
pub(crate) async fn reserve(store: &Store, user_id: UserId) -> Result<Reservation> {
    let now = store.now_utc();
    let window_start = now - WINDOW_SECONDS;
    #[derive(sqlx::FromRow)]
    struct Window {
        attempts: i64,
        oldest: Option<i64>,
    }
    // Written down and committed first (in a write transaction of its own, as every write:
    // on SQLite it takes the process's write turn), counted after, on committed rows only.
    let mut tx = store.begin_write().await?;
    sqlx::query("DELETE FROM redemption_attempts WHERE user_id = $1 AND attempted_utc <= $2")
        .bind(user_id)
        .bind(window_start)
        .execute(&mut *tx)
        .await?;
    let row_id: i64 = sqlx::query_scalar(
        "INSERT INTO redemption_attempts (user_id, attempted_utc) VALUES ($1, $2) RETURNING id",
    )
    .bind(user_id)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let Window { attempts, oldest } = sqlx::query_as(
        "SELECT COUNT(*) AS attempts, MIN(attempted_utc) AS oldest FROM redemption_attempts \
         WHERE user_id = $1 AND attempted_utc > $2",
    )
    .bind(user_id)
    .bind(window_start)
    .fetch_one(store.pool())
    .await?;
    if attempts <= MAX_FAILED_ATTEMPTS {
        return Ok(Reservation { row_id });
    }
    // Refused attempts are not counted: the lockout ends when the window frees, however
    // often the caller knocks meanwhile.
    Reservation { row_id }.release(store).await;
    let frees_at = oldest.unwrap_or(now) + WINDOW_SECONDS;
    tracing::warn!(%user_id, "promo redemption attempts over the limit");
    Err(Error::TooManyAttempts {
        retry_after_seconds: retry_after(frees_at, now),
    })
}

/// Seconds from `now` until `frees_at`, at least one.
fn retry_after(frees_at: i64, now: i64) -> u64 {
    u64::try_from(frees_at - now).unwrap_or(0).max(1)
}

impl Reservation {
    /// Takes the attempt back: it succeeded, or failed for a reason that is not a guess. Best
    /// effort: if the database cannot be reached the attempt stays counted, which only errs on
    /// the safe side.
    pub(crate) async fn release(self, store: &Store) {
        let deleted = store
            .write_one(
                sqlx::query("DELETE FROM redemption_attempts WHERE id = $1").bind(self.row_id),
            )
            .await;
        if let Err(err) = deleted {
            tracing::warn!(error = %err, "a redemption attempt could not be released");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_at_least_a_second() {
        assert_eq!(retry_after(160, 100), 60);
        assert_eq!(retry_after(101, 100), 1);
        assert_eq!(retry_after(100, 100), 1);
        assert_eq!(retry_after(90, 100), 1);
    }
}
