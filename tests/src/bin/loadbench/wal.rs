//! The database's write-ahead log around each measured run.
//!
//! Every run (HTTP or raw) starts right after a `CHECKPOINT`, so none pays for what the one
//! before it wrote, nor for the checkpoint that growing the history set going: a run measured
//! while PostgreSQL writes out a gigabyte of dirty pages, and logs the first change of every page
//! after a checkpoint whole (a full-page image), is not comparable with one that is not. On
//! PostgreSQL the run's log volume is read around it too (`pg_stat_wal`, and the checkpoints
//! begun meanwhile), per request in the report: what separates a run that wrote more from one
//! that was slowed by something else.

use anyhow::Context;

use partner_billing::clock::Clock;
use partner_billing::store::{Backend, Store};

/// The cluster's log counters at one moment (PostgreSQL).
#[derive(Debug, Clone, Copy)]
pub struct Counters {
    bytes: i64,
    full_page_images: i64,
    checkpoints: i64,
}

/// What the log took during one run, with the requests it served (warm-up included).
#[derive(Debug, Clone, Copy)]
pub struct WalDelta {
    pub bytes: i64,
    pub full_page_images: i64,
    pub checkpoints: i64,
    pub requests: u64,
}

impl WalDelta {
    pub fn bytes_per_request(&self) -> f64 {
        self.bytes as f64 / self.requests.max(1) as f64
    }

    pub fn full_page_images_per_request(&self) -> f64 {
        self.full_page_images as f64 / self.requests.max(1) as f64
    }
}

/// Writes out every dirty page (PostgreSQL `CHECKPOINT`; SQLite folds its WAL into the database
/// file) and, on PostgreSQL, returns the log counters just after.
pub async fn checkpoint(url: &str) -> anyhow::Result<Option<Counters>> {
    let store = Store::connect(url, Clock::system()).await?;
    let result = match store.backend() {
        Backend::Postgres => {
            sqlx::query("CHECKPOINT")
                .execute(store.pool())
                .await
                .context("CHECKPOINT failed")?;
            read(&store).await.map(Some)
        }
        Backend::Sqlite => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(store.pool())
                .await
                .context("wal_checkpoint failed")?;
            Ok(None)
        }
    };
    store.close().await;
    result
}

/// What the log took since `before`, over `requests` requests. Read after the run's
/// connections are closed: a backend reports its counters when it goes idle or exits.
pub async fn since(
    url: &str,
    before: Option<Counters>,
    requests: u64,
) -> anyhow::Result<Option<WalDelta>> {
    let Some(before) = before else {
        return Ok(None);
    };
    let store = Store::connect(url, Clock::system()).await?;
    let after = read(&store).await;
    store.close().await;
    let after = after?;
    Ok(Some(WalDelta {
        bytes: after.bytes - before.bytes,
        full_page_images: after.full_page_images - before.full_page_images,
        checkpoints: after.checkpoints - before.checkpoints,
        requests,
    }))
}

async fn read(store: &Store) -> anyhow::Result<Counters> {
    let (bytes, full_page_images): (i64, i64) =
        sqlx::query_as("SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal")
            .fetch_one(store.pool())
            .await
            .context("cannot read pg_stat_wal")?;
    // PostgreSQL 17 moved the checkpoint counters to their own view.
    let checkpoints: i64 = match sqlx::query_scalar(
        "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
    )
    .fetch_one(store.pool())
    .await
    {
        Ok(count) => count,
        Err(_) => sqlx::query_scalar("SELECT num_timed + num_requested FROM pg_stat_checkpointer")
            .fetch_one(store.pool())
            .await
            .context("cannot read the checkpoint counters")?,
    };
    Ok(Counters {
        bytes,
        full_page_images,
        checkpoints,
    })
}
