//! PostgreSQL stopped under load and started again: while it is down every write answers
//! `503 Service.Unavailable` with `Retry-After` within a bounded time and `/healthz` says so;
//! afterwards the same server resumes, every acknowledged write replays unchanged, and every
//! write retried with its key is charged exactly once.
//!
//! It stops the machine's PostgreSQL, so it is ignored by default and run on its own:
//! `cargo test -p partner-billing-tests --test e2e outage -- --ignored` (`.ci/run` does).

use std::process::Command;
use std::time::{Duration, Instant};

use partner_billing_tests::{Db, TestApp};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "stops the machine's PostgreSQL; run alone with --ignored"]
async fn service_survives_a_database_outage() {
    let Some(db @ Db::Postgres(_)) = Db::postgres() else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 100).await;
    let body = |key: String| json!({"planSlug":"pro","login":"alice","idempotencyKey":key});

    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let key = format!("before-outage-{i:03}");
        let response = app
            .partner(Method::POST, LICENSES, &r)
            .json(&body(key.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        acknowledged.push((key, response.json::<Value>().await.unwrap()));
    }

    let restart = Restart;
    cluster("stop");
    // Five writes at once while the database is down.
    let unknown: Vec<String> = (0..5).map(|i| format!("during-outage-{i:03}")).collect();
    let requests: Vec<_> = unknown
        .iter()
        .map(|key| {
            let request = app
                .partner(Method::POST, LICENSES, &r)
                .json(&body(key.clone()));
            tokio::spawn(async move {
                let started = Instant::now();
                let response = request.send().await.unwrap();
                (started.elapsed(), response)
            })
        })
        .collect();
    for request in requests {
        let (elapsed, response) = request.await.unwrap();
        assert!(
            elapsed < Duration::from_secs(15),
            "answered within a bounded time"
        );
        assert_eq!(response.status(), 503);
        assert!(response.headers().contains_key("retry-after"));
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Service.Unavailable");
    }
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 503, "/healthz reports the outage");

    drop(restart);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = app.http.get(app.url("/healthz")).send().await.unwrap();
        if health.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the service resumes without a restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for (key, license) in &acknowledged {
        let replay = app
            .partner(Method::POST, LICENSES, &r)
            .json(&body(key.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(replay.status(), 200);
        assert_eq!(
            &replay.json::<Value>().await.unwrap(),
            license,
            "nothing acknowledged is lost"
        );
    }
    for key in &unknown {
        let retry = app
            .partner(Method::POST, LICENSES, &r)
            .json(&body(key.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(
            retry.status(),
            200,
            "a retry with the same key settles the unknown outcome"
        );
    }
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(90),
        "each key charged exactly once"
    );
    app.assert_audit_clean().await;
    app.stop().await;
}
