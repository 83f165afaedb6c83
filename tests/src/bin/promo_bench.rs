//! Times 1000-code promo batches through the real server, next to the plain-SQL insert of 1000
//! rows of the same shape on the same database (20 runs each; p50 and p99).
//!
//! `cargo run --release -p partner-billing-tests --bin promo_bench` (SQLite), with
//! `PARTNER_BILLING_TEST_POSTGRES_URL` set for PostgreSQL too. `--runs N` changes the count.
//! Not a test: it prints figures and never fails on them.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use partner_billing::store::Backend;
use partner_billing_tests::{Db, TestApp};
use reqwest::Method;
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// 1000 batches of the real endpoint.
async fn via_api(app: &TestApp, runs: usize) -> Vec<Duration> {
    let reseller = app.reseller().await;
    app.plan("bench").await;
    app.credit(&reseller, "bench", i64::try_from(runs * 1000).unwrap())
        .await;
    let mut times = Vec::with_capacity(runs);
    for run in 0..runs {
        let body = json!({"planSlug": "bench", "count": 1000, "idempotencyKey": format!("bench-run-{run:04}")});
        let started = Instant::now();
        let response = app
            .partner(Method::POST, "/v1/billing/partner/promo-batches", &reseller)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.bytes().await.unwrap();
        times.push(started.elapsed());
    }
    times
}

/// The same rows inserted into the same table with one plain statement in one transaction, no
/// HTTP, no charge: 1000 random 256-bit hex hashes (as HMAC output is) referencing a batch
/// the API made.
async fn raw_insert(app: &TestApp, runs: usize) -> Vec<Duration> {
    let batch_row_id: i64 = sqlx::query_scalar("SELECT MIN(id) FROM promo_batches")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let hashes: Vec<String> = (0..1000)
            .map(|_| hex::encode(rand::random::<[u8; 32]>()))
            .collect();
        // The fastest plain form on each database, as the service uses it: positional `?` on
        // SQLite (its `$n` name lookup is quadratic), `$n` with a shared batch id on PostgreSQL.
        let sqlite = app.store.backend() == Backend::Sqlite;
        let mut sql = String::from("INSERT INTO promo_codes (code_hash, batch_row_id) VALUES ");
        for n in 0..hashes.len() {
            let sep = if n == 0 { "" } else { ", " };
            if sqlite {
                let _ = write!(sql, "{sep}(?, ?)");
            } else {
                let _ = write!(sql, "{sep}(${}, $1)", n + 2);
            }
        }
        let batch = batch_row_id;
        let started = Instant::now();
        let mut tx = app.store.begin_write().await.unwrap();
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        if !sqlite {
            query = query.bind(batch);
        }
        for hash in &hashes {
            query = query.bind(hash.as_str());
            if sqlite {
                query = query.bind(batch);
            }
        }
        query.execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        times.push(started.elapsed());
    }
    times
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Warnings only: the harness's debug-level log capture would tax the measured path.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .try_init();
    let runs = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20usize);
    let mut databases = vec![("sqlite", Db::Sqlite)];
    if let Ok(url) = std::env::var("PARTNER_BILLING_TEST_POSTGRES_URL") {
        databases.push(("postgres", Db::Postgres(url)));
    }
    let mut report = Vec::new();
    println!("1000-code promo batch, {runs} runs each (ms)");
    println!(
        "{:<10} {:<28} {:>8} {:>8}",
        "database", "path", "p50", "p99"
    );
    for (name, db) in databases {
        let app = TestApp::spawn(&db).await;
        let mut api = via_api(&app, runs).await;
        let mut raw = raw_insert(&app, runs).await;
        api.sort();
        raw.sort();
        let rows = [
            ("POST /promo-batches", &api),
            ("raw INSERT of 1000 rows", &raw),
        ];
        for (path, times) in rows {
            println!(
                "{name:<10} {path:<28} {:>8.2} {:>8.2}",
                ms(percentile(times, 50.0)),
                ms(percentile(times, 99.0))
            );
        }
        let ratio = ms(percentile(&api, 50.0)) / ms(percentile(&raw, 50.0));
        println!("{name:<10} {:<28} {ratio:>8.2}", "p50 ratio API / raw");
        report.push(json!({
            "database": name,
            "runs": runs,
            "apiP50Ms": ms(percentile(&api, 50.0)),
            "apiP99Ms": ms(percentile(&api, 99.0)),
            "rawInsertP50Ms": ms(percentile(&raw, 50.0)),
            "rawInsertP99Ms": ms(percentile(&raw, 99.0)),
            "p50Ratio": ratio,
        }));
        app.stop().await;
    }
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
