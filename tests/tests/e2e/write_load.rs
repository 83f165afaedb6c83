//! Writes under load (docs/operations.md, "SQLite under load"): a slow write makes the others
//! wait their turn, not fail, and reads are served meanwhile.

use std::time::{Duration, Instant};

use partner_billing::store::HoldPoint;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::json;

both_databases!(a_slow_write_queues_the_others_and_reads_are_served);

const BATCHES: &str = "/v1/billing/partner/promo-batches";
const LICENSES: &str = "/v1/billing/partner/licenses";
const BALANCES: &str = "/v1/billing/partner/balances";

/// Longer than a request waits for a pooled database connection (5 s) before it answers 503.
const SLOW_WRITE: Duration = Duration::from_secs(7);

async fn account_id(app: &TestApp, r: &Reseller) -> i64 {
    app.count_rows(&format!(
        "SELECT id FROM accounts WHERE client_id = '{}'",
        r.client_id
    ))
    .await
}

/// Any request with the reseller's key, so that its once-a-minute "last used" write is done.
async fn warm_up(app: &TestApp, r: &Reseller) {
    let response = app.partner(Method::GET, BALANCES, r).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

async fn a_slow_write_queues_the_others_and_reads_are_served(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let slow = app.reseller().await;
    app.credit(&slow, "pro", 1000).await;
    let mut writers = Vec::new();
    for i in 0..4 {
        app.user(&format!("user{i}")).await;
        let r = app.reseller().await;
        app.credit(&r, "pro", 1001).await;
        warm_up(&app, &r).await;
        writers.push(r);
    }
    let reader = app.reseller().await;
    app.credit(&reader, "pro", 1).await;
    warm_up(&app, &reader).await;
    warm_up(&app, &slow).await;

    // One batch is held inside its write transaction, holding the write lock on SQLite.
    let hold = app
        .store
        .hold(HoldPoint::PromoWriteOpen, account_id(&app, &slow).await);
    let slow_batch = {
        let request = app
            .partner(Method::POST, BATCHES, &slow)
            .json(&json!({"planSlug": "pro", "count": 1000, "idempotencyKey": "slow-batch-001"}));
        tokio::spawn(async move { request.send().await.unwrap().status() })
    };
    hold.wait_for_arrivals(1).await;
    // Eight writers of other accounts: a 1000-code batch and a license each.
    let mut answers = Vec::new();
    for (i, r) in writers.iter().enumerate() {
        let batch = app.partner(Method::POST, BATCHES, r).json(
            &json!({"planSlug": "pro", "count": 1000, "idempotencyKey": format!("batch-{i:04}")}),
        );
        let license = app
            .partner(Method::POST, LICENSES, r)
            .json(&json!({"planSlug": "pro", "login": format!("user{i}"), "idempotencyKey": format!("license-{i:04}")}));
        answers.push(tokio::spawn(
            async move { batch.send().await.unwrap().status() },
        ));
        answers.push(tokio::spawn(async move {
            license.send().await.unwrap().status()
        }));
    }
    // For longer than a request waits for a connection, a reader keeps asking: every read is
    // served while the writes wait.
    let started = Instant::now();
    let mut reads = 0;
    while started.elapsed() < SLOW_WRITE {
        let response = app
            .partner(Method::GET, BALANCES, &reader)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "read {reads} while a write is slow: {}",
            response.text().await.unwrap_or_default()
        );
        reads += 1;
    }
    hold.release();
    assert_eq!(slow_batch.await.unwrap(), 200);
    for (i, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer.await.unwrap(), 200, "writer {i} waited its turn");
    }
    assert_eq!(app.balance(&slow, "pro").await, Some(0));
    for r in &writers {
        assert_eq!(app.balance(r, "pro").await, Some(0));
    }
    app.assert_audit_clean().await;
    app.stop().await;
}

/// The WAL bound the load test holds SQLite to.
const WAL_BOUND_BYTES: u64 = 64 * 1024 * 1024;

/// How long the load runs.
const LOAD_FOR: Duration = Duration::from_secs(20);

/// Four clients generating 1000-code batches back to back while a fifth reads balances: the
/// readers never let the WAL start over by themselves, so only checkpoints driven by its size
/// keep it bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_wal_stays_bounded_under_batch_load() {
    let app = TestApp::spawn(&Db::Sqlite).await;
    app.plan("pro").await;
    let wal = format!(
        "{}-wal",
        app.database_url
            .strip_prefix("sqlite://")
            .expect("a SQLite file URL")
    );
    let mut clients = Vec::new();
    for _ in 0..5 {
        let r = app.reseller().await;
        app.credit(&r, "pro", 1_000_000).await;
        clients.push(r);
    }
    let reader = clients.pop().expect("a reader");
    let started = Instant::now();
    let mut load = Vec::new();
    for (n, r) in clients.iter().enumerate() {
        let app_url = app.base_url.clone();
        let http = app.http.clone();
        let r = r.clone();
        load.push(tokio::spawn(async move {
            let mut batches = 0u64;
            while started.elapsed() < LOAD_FOR {
                let response = partner_billing_tests::partner_request(
                    &http,
                    &app_url,
                    Method::POST,
                    BATCHES,
                    &r,
                )
                .json(&json!({"planSlug": "pro", "count": 1000, "idempotencyKey": format!("load-{n}-{batches:06}")}))
                .send()
                .await
                .unwrap();
                assert_eq!(response.status(), 200, "batch {batches} of client {n}");
                batches += 1;
            }
            batches
        }));
    }
    let reads = {
        let app_url = app.base_url.clone();
        let http = app.http.clone();
        tokio::spawn(async move {
            let mut reads = 0u64;
            while started.elapsed() < LOAD_FOR {
                let response = partner_billing_tests::partner_request(
                    &http,
                    &app_url,
                    Method::GET,
                    BALANCES,
                    &reader,
                )
                .send()
                .await
                .unwrap();
                assert_eq!(response.status(), 200, "read {reads}");
                reads += 1;
            }
            reads
        })
    };
    // The WAL's size, sampled while the load runs (the sampling is the measurement: nothing
    // waits on it).
    let mut largest = 0;
    while started.elapsed() < LOAD_FOR {
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut batches = 0;
    for client in load {
        batches += client.await.unwrap();
    }
    let reads = reads.await.unwrap();
    largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    eprintln!(
        "WAL under load: {batches} batches of 1000 codes and {reads} reads in {:?}; largest WAL {} KiB",
        started.elapsed(),
        largest / 1024
    );
    assert!(batches >= 8, "the load ran: {batches} batches");
    assert!(
        largest < WAL_BOUND_BYTES,
        "the WAL reached {} MiB (bound {} MiB)",
        largest / (1024 * 1024),
        WAL_BOUND_BYTES / (1024 * 1024)
    );
    app.assert_audit_clean().await;
    app.stop().await;
}
