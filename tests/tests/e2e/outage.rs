//! PostgreSQL stopped under sustained load (eight clients writing licenses and promo batches
//! throughout) and started again: while it is down every write answers
//! `503 Service.Unavailable` with `Retry-After` within a bounded time and `/healthz` says so;
//! afterwards the same server resumes, every acknowledged write replays unchanged, and every
//! write retried with its key is charged exactly once.
//!
//! It stops the machine's PostgreSQL, so it is ignored by default and run on its own:
//! `cargo test -p partner-billing-tests --test e2e outage -- --ignored` (`.ci/run` does).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use partner_billing_tests::{Db, TestApp, partner_request};
use reqwest::Method;
use serde_json::{Value, json};

/// `pg_ctlcluster` on the machine's one cluster.
fn cluster(action: &str) {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("a Debian PostgreSQL cluster")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .expect("a cluster version");
    let mut command = Command::new("pg_ctlcluster");
    command.args(["--skip-systemctl-redirect", &version, "main", action]);
    if action == "stop" {
        command.args(["-m", "fast"]);
    }
    let status = command.status().expect("run pg_ctlcluster");
    assert!(status.success(), "pg_ctlcluster {action} failed");
}

/// Starts PostgreSQL again however the test ends.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        cluster("start");
    }
}

const LICENSES: &str = "/v1/billing/partner/licenses";
const BATCHES: &str = "/v1/billing/partner/promo-batches";
/// Concurrent clients writing throughout: before, during and after the outage.
const CLIENTS: usize = 8;
const CREDIT: i64 = 100_000;
/// No answer may take longer than this, database down or not.
const BOUND: Duration = Duration::from_secs(15);

/// One write and what the service answered first.
struct Write {
    path: &'static str,
    body: Value,
    units: i64,
    /// The 200 body, when the first answer was a success.
    acknowledged: Option<Value>,
}

/// Shared tallies of the load.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    unavailable: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "stops the machine's PostgreSQL; run alone with --ignored"]
async fn service_survives_a_database_outage() {
    let Some(db @ Db::Postgres(_)) = Db::postgres() else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", CREDIT).await;

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let app_url = app.base_url.clone();
            let r = r.clone();
            let tally = tally.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut writes = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let key = format!("outage-{client}-{i:05}");
                    let mut write = if i % 4 == 0 {
                        Write {
                            path: BATCHES,
                            body: json!({"planSlug":"pro","count":3,"idempotencyKey":key}),
                            units: 3,
                            acknowledged: None,
                        }
                    } else {
                        Write {
                            path: LICENSES,
                            body: json!({"planSlug":"pro","login":"alice","idempotencyKey":key}),
                            units: 1,
                            acknowledged: None,
                        }
                    };
                    let started = Instant::now();
                    let response = partner_request(&http, &app_url, Method::POST, write.path, &r)
                        .json(&write.body)
                        .send()
                        .await
                        .expect("the server stays up");
                    assert!(started.elapsed() < BOUND, "answered within {BOUND:?}");
                    match response.status().as_u16() {
                        200 => {
                            write.acknowledged = Some(response.json().await.unwrap());
                            tally.ok.fetch_add(1, Ordering::SeqCst);
                        }
                        503 => {
                            assert!(response.headers().contains_key("retry-after"));
                            let problem: Value = response.json().await.unwrap();
                            assert_eq!(problem["code"], "Service.Unavailable");
                            tally.unavailable.fetch_add(1, Ordering::SeqCst);
                        }
                        status => panic!("unexpected {status} under the outage"),
                    }
                    writes.push(write);
                }
                writes
            })
        })
        .collect();

    // Waits (bounded) until `done` holds; polls the load's tallies and the health check.
    async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !done().await {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let health = |app: &TestApp| {
        let request = app.http.get(app.url("/healthz"));
        async move { request.send().await.unwrap().status().as_u16() }
    };

    until("load before the outage", async || {
        tally.ok.load(Ordering::SeqCst) >= 50
    })
    .await;
    let restart = Restart;
    cluster("stop");
    let ok_at_stop = tally.ok.load(Ordering::SeqCst);
    until("503s during the outage", async || {
        tally.unavailable.load(Ordering::SeqCst) >= 3 * CLIENTS
    })
    .await;
    assert_eq!(health(&app).await, 503, "/healthz reports the outage");

    drop(restart);
    until("/healthz recovers without a restart", async || {
        health(&app).await == 200
    })
    .await;
    let ok_after = tally.ok.load(Ordering::SeqCst);
    until("writes succeed again", async || {
        tally.ok.load(Ordering::SeqCst) >= ok_after + 50
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut writes = Vec::new();
    for worker in workers {
        writes.extend(worker.await.unwrap());
    }
    let acknowledged = writes.iter().filter(|w| w.acknowledged.is_some()).count();
    eprintln!(
        "outage under {CLIENTS} clients: {} writes, {acknowledged} acknowledged \
         ({ok_at_stop} before the stop), {} answered 503",
        writes.len(),
        tally.unavailable.load(Ordering::SeqCst)
    );

    // Every write retried with its key: acknowledged ones replay unchanged, the 503s settle;
    // each key is charged exactly once.
    let mut charged = 0;
    for write in &writes {
        let retry = app
            .partner(Method::POST, write.path, &r)
            .json(&write.body)
            .send()
            .await
            .unwrap();
        assert_eq!(retry.status(), 200, "{}", write.body);
        let body: Value = retry.json().await.unwrap();
        if let Some(original) = &write.acknowledged {
            assert_eq!(&body, original, "nothing acknowledged is lost");
        }
        charged += write.units;
    }
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(CREDIT - charged),
        "each key charged exactly once"
    );
    app.assert_audit_clean().await;
    app.stop().await;
}
