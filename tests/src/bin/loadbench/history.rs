//! `--history N`: the database grown by N licenses on one account before the scenarios run again,
//! so one run reports the fresh figures and the figures after a year's worth of history.
//!
//! The history is grown the way a reseller grows it: through the server's API (`POST
//! /licenses` on the hot account from 64 clients), so every license comes with its ledger entry,
//! its idempotency record and its subscription period, as the service writes them. Statistics
//! are then as the service would find them without maintenance: on PostgreSQL the bench
//! database's tables have autovacuum off (so nothing is ever analyzed unless we say so, as on a
//! server whose autovacuum is off), and on SQLite no `ANALYZE` has run. [`analyze`] refreshes
//! them for the second pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};

use partner_billing::clock::Clock;
use partner_billing::store::{Backend, Store};

use crate::Scenario;
use crate::http::HttpTarget;
use crate::seed::{FreshDb, Seeded};
use crate::server::Server;

/// Clients that grow the history at once.
const GROWERS: usize = 64;

/// A failed request is retried; this many failures in all stop the growth.
const MAX_FAILURES: u64 = 1000;

/// Turns autovacuum off on every table of the bench database (PostgreSQL; SQLite never analyzes
/// on its own), so the history is measured with the statistics its growth left: none.
pub async fn never_analyze(fresh: &FreshDb) -> anyhow::Result<()> {
    let store = Store::connect(&fresh.url, Clock::system()).await?;
    if store.backend() == Backend::Postgres {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
        )
        .fetch_all(store.pool())
        .await?;
        for table in tables {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER TABLE \"{table}\" SET (autovacuum_enabled = off, \
                 toast.autovacuum_enabled = off)"
            )))
            .execute(store.pool())
            .await
            .with_context(|| format!("cannot turn autovacuum off on {table}"))?;
        }
    }
    store.close().await;
    Ok(())
}

/// Issues `licenses` licenses on the hot account through a server on `fresh`'s database; returns
/// the seconds it took.
pub async fn grow(
    server: &Server,
    seeded: &Seeded,
    licenses: u64,
    label: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let target = HttpTarget::new(&server.base_url, GROWERS, seeded)?;
    let issued = Arc::new(AtomicU64::new(0));
    let claimed = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let label = Arc::new(label.to_owned());
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..GROWERS {
        let (target, issued, claimed, failures, label) = (
            target.clone(),
            Arc::clone(&issued),
            Arc::clone(&claimed),
            Arc::clone(&failures),
            Arc::clone(&label),
        );
        tasks.spawn(async move {
            let mut seq = 0_u64;
            while claimed.fetch_add(1, Ordering::Relaxed) < licenses {
                loop {
                    seq += 1;
                    match target.request(Scenario::LicenseHot, worker, seq).await {
                        Ok(_) => break,
                        Err(err) if failures.fetch_add(1, Ordering::Relaxed) >= MAX_FAILURES => {
                            return Err(err);
                        }
                        Err(_) => {}
                    }
                }
                let done = issued.fetch_add(1, Ordering::Relaxed) + 1;
                if worker == 0 && done % 100_000 < GROWERS as u64 {
                    eprintln!("loadbench: {label}: history {done} of {licenses} licenses");
                }
            }
            Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(err) = joined.context("a history task panicked")? {
            bail!("growing the history failed more than {MAX_FAILURES} times: {err}");
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Gathers the planner's statistics (`ANALYZE`), as autovacuum or an operator would.
pub async fn analyze(fresh: &FreshDb) -> anyhow::Result<f64> {
    let started = Instant::now();
    let store = Store::connect(&fresh.url, Clock::system()).await?;
    sqlx::query("ANALYZE").execute(store.pool()).await?;
    store.close().await;
    Ok(started.elapsed().as_secs_f64())
}
