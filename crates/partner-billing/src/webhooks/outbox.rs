//! The outbox as the delivery worker sees it: lease due messages, then settle each attempt.
//!
//! A lease is a time (`lease_until_utc`) written in the transaction that picks the message; on
//! PostgreSQL the pick takes its rows `FOR UPDATE SKIP LOCKED`, so two replicas never pick the
//! same message at once; on SQLite the write lock does the same. A worker that dies mid-send
//! leaves its lease to run out, and the message is sent again with the same `webhook-id`.

use std::fmt;

use crate::db::dialect;
use crate::error::{Error, Result};
use crate::store::Store;

/// How long a picked message is reserved for its worker: the 10 s request timeout plus slack for recording the outcome.
pub const LEASE_SECONDS: i64 = 20;

/// A message leased for one attempt.
pub struct DueMessage {
    pub message_row_id: i64,
    pub endpoint_row_id: i64,
    pub event_id: String,
    pub body: String,
    pub url: String,
    /// The signing key (the bytes of the `whsec_` secret). Never printed.
    pub signing_key: Vec<u8>,
    /// This attempt's number, from 1.
    pub attempt: i64,
}

/// A due message as [`dialect::lease_due_messages`] picks it, with its endpoint's sealed secret.
#[derive(sqlx::FromRow)]
struct LeasedRow {
    id: i64,
    endpoint_row_id: i64,
    attempts: i64,
    event_id: String,
    body: String,
    url: String,
    endpoint_id: String,
    sealed_secret: String,
}

impl fmt::Debug for DueMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DueMessage")
            .field("message_row_id", &self.message_row_id)
            .field("event_id", &self.event_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// One attempt to deliver a message: when it was made (the `webhook-timestamp` it was signed
/// with, and the delivery's `attemptedUtc`) and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub attempted_utc: i64,
    pub outcome: AttemptOutcome,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The receiver answered with this status.
    Answered(u16),
    /// No answer: refused connection, timeout, a URL the rule refuses now. A short reason.
    NoAnswer(String),
}

/// Whether any message of an enabled endpoint is due (a cheap read, so an idle worker takes no
/// write lock; messages of deleted or disabled endpoints are never sent).
pub async fn any_due(store: &Store) -> Result<bool> {
    let now = store.now_utc();
    let due: Option<i64> = sqlx::query_scalar(
        "SELECT m.id FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_row_id \
         WHERE m.status = 'pending' AND m.next_attempt_utc <= $1 \
         AND (m.lease_until_utc IS NULL OR m.lease_until_utc <= $1) AND e.status = 'enabled' LIMIT 1",
    )
    .bind(now)
    .fetch_optional(store.pool())
    .await?;
    Ok(due.is_some())
}

/// Leases up to `limit` due messages of enabled endpoints, oldest due first.
pub async fn lease_due(store: &Store, limit: i64) -> Result<Vec<DueMessage>> {
    if !any_due(store).await? {
        return Ok(Vec::new());
    }
    let now = store.now_utc();
    let sql = dialect::lease_due_messages(store.backend());
    let mut tx = store.begin_write().await?;
    let rows: Vec<LeasedRow> = sqlx::query_as(sql)
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    let key = store.master_key()?;
    let mut leased = Vec::with_capacity(rows.len());
    for row in rows {
        sqlx::query("UPDATE webhook_messages SET lease_until_utc = $1 WHERE id = $2")
            .bind(now + LEASE_SECONDS)
            .bind(row.id)
            .execute(&mut *tx)
            .await?;
        let sealed = hex::decode(&row.sealed_secret)
            .map_err(|_| Error::Internal("a sealed webhook secret is not hex".to_owned()))?;
        let signing_key = key
            .open(&sealed, &super::secret_context(&row.endpoint_id))
            .map_err(|_| {
                Error::Internal("a webhook secret does not open under the master key".to_owned())
            })?;
        leased.push(DueMessage {
            message_row_id: row.id,
            endpoint_row_id: row.endpoint_row_id,
            event_id: row.event_id,
            body: row.body,
            url: row.url,
            signing_key,
            attempt: row.attempts + 1,
        });
    }
    tx.commit().await?;
    Ok(leased)
}

/// Records attempts and settles their messages, in one transaction (the worker batches what
/// finished together: one commit instead of one per attempt): a 2xx is delivered; `410 Gone`
/// fails it and disables the endpoint at once; anything else (redirects included) is retried
/// the schedule's next delay after the attempt ended (now, rounded up to the whole second:
/// never sooner, at most a second later), or failed when the schedule is used up.
pub async fn record_attempts(store: &Store, attempts: &[(&DueMessage, &Attempt)]) -> Result<()> {
    if attempts.is_empty() {
        return Ok(());
    }
    let now = store.now_utc();
    let backoff = &store.webhook_settings().backoff;
    let mut tx = store.begin_write().await?;
    let mut gone_events = Vec::new();
    for (message, attempt) in attempts {
        let (status_code, error) = match &attempt.outcome {
            AttemptOutcome::Answered(status) => (Some(i64::from(*status)), None),
            AttemptOutcome::NoAnswer(reason) => (None, Some(reason.as_str())),
        };
        let delivered = status_code.is_some_and(|s| (200..300).contains(&s));
        let gone = status_code == Some(410);
        let next_attempt_utc = if delivered || gone {
            None
        } else {
            usize::try_from(message.attempt - 1)
                .ok()
                .and_then(|i| backoff.get(i))
                // From the end of the second the attempt ended in: times are whole seconds, so
                // counting from `now` (rounded down) would retry up to a second early.
                .map(|delay| now + 1 + i64::try_from(delay.as_secs()).unwrap_or(i64::MAX / 2))
        };
        let status = match (delivered, next_attempt_utc) {
            (true, _) => "delivered",
            (false, Some(_)) => "pending",
            (false, None) => "failed",
        };
        sqlx::query(
            "INSERT INTO webhook_attempts (message_row_id, endpoint_row_id, attempt, status_code, error, attempted_utc, next_attempt_utc) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(message.message_row_id)
        .bind(message.endpoint_row_id)
        .bind(message.attempt)
        .bind(status_code)
        .bind(error)
        .bind(attempt.attempted_utc)
        .bind(next_attempt_utc)
        .execute(&mut *tx)
        .await?;
        // Only a message still pending: one whose endpoint was deleted or disabled while
        // this attempt was in flight was settled as failed then (`drop_pending`), and stays so.
        sqlx::query(
            "UPDATE webhook_messages SET status = $1, attempts = $2, next_attempt_utc = $3, lease_until_utc = NULL \
             WHERE id = $4 AND status = 'pending'",
        )
        .bind(status)
        .bind(message.attempt)
        .bind(next_attempt_utc)
        .bind(message.message_row_id)
        .execute(&mut *tx)
        .await?;
        if gone {
            sqlx::query(
                "UPDATE webhook_endpoints SET status = 'disabled' WHERE id = $1 AND status = 'enabled'",
            )
            .bind(message.endpoint_row_id)
            .execute(&mut *tx)
            .await?;
            drop_pending(&mut tx, message.endpoint_row_id).await?;
            gone_events.push(message.event_id.as_str());
        }
    }
    tx.commit().await?;
    for event_id in gone_events {
        tracing::warn!(event_id = %event_id, "webhook endpoint answered 410 Gone: disabled");
    }
    Ok(())
}

/// Messages waiting to be sent (pending, to an enabled endpoint), for tests and operations
/// (the outbox gauge). A message of an endpoint disabled or deleted meanwhile will never be
/// sent: it is not waiting.
pub async fn pending_count(store: &Store) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_row_id \
         WHERE m.status = 'pending' AND e.status = 'enabled'",
    )
    .fetch_one(store.pool())
    .await?)
}

/// Settles as failed the messages still pending for an endpoint that was just disabled or
/// deleted (in the caller's transaction): nothing more is sent to it, so none is waiting.
pub(crate) async fn drop_pending(tx: &mut crate::db::Tx, endpoint_row_id: i64) -> Result<()> {
    sqlx::query(
        "UPDATE webhook_messages SET status = 'failed', lease_until_utc = NULL \
         WHERE endpoint_row_id = $1 AND status = 'pending'",
    )
    .bind(endpoint_row_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
