//! The database's write-ahead log around each measured run.
//!
//! Every run (HTTP or raw) starts right after a checkpoint, so none pays for what the one before
//! it wrote, nor for the checkpoint that growing the history set going: a run measured while
//! PostgreSQL writes out a gigabyte of dirty pages, and logs the first change of every page
//! after a checkpoint whole (a full-page image), is not comparable with one that is not. On
//! PostgreSQL the run's log volume is read around it too, per request in the report: what
//! separates a run that wrote more from one that was slowed by something else.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

use partner_billing::clock::Clock;
use partner_billing::db::Backend;
use partner_billing::store::Store;

use crate::report::{RunReport, round};

/// How long [`since`] waits for the run's connections to be gone before it reads.
const BACKENDS_GONE_WITHIN: Duration = Duration::from_secs(10);

/// PostgreSQL's "undefined column" and "undefined table": the checkpoint counters moved from
/// `pg_stat_bgwriter` to `pg_stat_checkpointer` in version 17.
const MOVED_VIEW_CODES: [&str; 2] = ["42703", "42P01"];

/// Where the log stood when a run began (PostgreSQL).
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// `pg_current_wal_insert_lsn()`, as bytes since the log's start: exact at once.
    lsn: i64,
    /// `pg_stat_wal.wal_fpi`: reported by each backend as it goes idle or exits.
    full_page_images: i64,
    /// Checkpoints requested or timed, read before the run's own `CHECKPOINT`.
    checkpoints: i64,
}

/// What the log took during one run, with the requests it served (warm-up included).
#[derive(Debug, Clone, Copy)]
pub struct WalDelta {
    pub bytes: i64,
    pub full_page_images: i64,
    /// Checkpoints begun during the run, beyond the one that started it.
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

    pub fn json(&self) -> Value {
        json!({
            "requests": self.requests,
            "bytes": self.bytes,
            "fullPageImages": self.full_page_images,
            "checkpointsBegun": self.checkpoints,
            "bytesPerRequest": round(self.bytes_per_request(), 0),
            "fullPageImagesPerRequest": round(self.full_page_images_per_request(), 3),
        })
    }
}

/// Writes out every dirty page and returns where the log stands (PostgreSQL `CHECKPOINT`;
/// SQLite folds its WAL into the database file and reports nothing). A role that may not
/// checkpoint (neither superuser nor `pg_checkpoint`) is warned about and measured without.
pub async fn checkpoint(url: &str) -> anyhow::Result<Option<Start>> {
    if Backend::from_url(url)? == Backend::Sqlite {
        let store = Store::connect(url, Clock::system()).await?;
        let done = store.checkpoint().await.context("wal_checkpoint failed");
        store.close().await;
        return done.map(|()| None);
    }
    let mut conn = PgConnection::connect(url).await?;
    let checkpoints = checkpoints(&mut conn).await?;
    if let Err(err) = sqlx::query("CHECKPOINT").execute(&mut conn).await {
        eprintln!("loadbench: CHECKPOINT refused ({err}); runs are measured without one");
        return Ok(None);
    }
    let (lsn, full_page_images) = log_position(&mut conn).await?;
    conn.close().await?;
    Ok(Some(Start {
        lsn,
        full_page_images,
        checkpoints,
    }))
}

/// What the log took since `start`, over `requests` requests. Waits first for every other
/// connection to the database to be gone: a backend reports its full-page images for certain
/// only when it exits, which may be after the pool that held it has closed.
pub async fn since(
    url: &str,
    start: Option<Start>,
    requests: u64,
) -> anyhow::Result<Option<WalDelta>> {
    let Some(start) = start else {
        return Ok(None);
    };
    let mut conn = PgConnection::connect(url).await?;
    others_gone(&mut conn).await?;
    let (lsn, full_page_images) = log_position(&mut conn).await?;
    let checkpoints = checkpoints(&mut conn).await?;
    conn.close().await?;
    Ok(Some(WalDelta {
        bytes: lsn - start.lsn,
        full_page_images: full_page_images - start.full_page_images,
        checkpoints: checkpoints - start.checkpoints - 1,
        requests,
    }))
}

async fn others_gone(conn: &mut PgConnection) -> anyhow::Result<()> {
    let deadline = Instant::now() + BACKENDS_GONE_WITHIN;
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND backend_type = 'client backend'",
        )
        .fetch_one(&mut *conn)
        .await
        .context("cannot read pg_stat_activity")?;
        if others == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            eprintln!(
                "loadbench: {others} connections still open {BACKENDS_GONE_WITHIN:?} after the \
                 run; its full-page images may be undercounted"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn log_position(conn: &mut PgConnection) -> anyhow::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint, \
                (SELECT wal_fpi FROM pg_stat_wal)",
    )
    .fetch_one(conn)
    .await
    .context("cannot read the write-ahead log's position")
}

async fn checkpoints(conn: &mut PgConnection) -> anyhow::Result<i64> {
    let moved = |err: &sqlx::Error| {
        err.as_database_error()
            .and_then(|db| db.code())
            .is_some_and(|code| MOVED_VIEW_CODES.contains(&&*code))
    };
    match sqlx::query_scalar("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
        .fetch_one(&mut *conn)
        .await
    {
        Err(err) if moved(&err) => {
            sqlx::query_scalar("SELECT num_timed + num_requested FROM pg_stat_checkpointer")
                .fetch_one(conn)
                .await
                .context("cannot read the checkpoint counters")
        }
        other => other.context("cannot read the checkpoint counters"),
    }
}

/// The report's table of what the log took per request in each run (PostgreSQL), warm-up
/// included; nothing when no run was measured.
pub fn table(runs: &[RunReport], out: &mut String) {
    let rows: Vec<_> = runs
        .iter()
        .flat_map(|run| run.scenarios.iter().map(move |s| (run, s)))
        .filter_map(|(run, s)| Some((run, s, s.wal[0]?, s.wal[1]?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nWrite-ahead log per request, each run started right after a CHECKPOINT (warm-up \
         included):\n\n\
         | database | clients | scenario | HTTP bytes | HTTP full-page images | HTTP checkpoints begun | raw bytes | raw full-page images | raw checkpoints begun |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|"
    );
    for (run, s, http, raw) in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {} | {:.0} | {:.2} | {} |",
            run.label(),
            run.clients,
            s.scenario.name(),
            http.bytes_per_request(),
            http.full_page_images_per_request(),
            http.checkpoints,
            raw.bytes_per_request(),
            raw.full_page_images_per_request(),
            raw.checkpoints,
        );
    }
}
