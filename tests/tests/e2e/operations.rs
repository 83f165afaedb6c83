//! Operations (docs/operations.md): metrics on their own listener, request ids, JSON logs, and the
//! graceful stop of the real binary with a batch in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use partner_billing::domain::Secret;
use partner_billing::idempotency::Outcome;
use partner_billing::keys::{self, PartnerAccount};
use partner_billing::licenses::{self, IssueLicense};
use partner_billing::request_scope;
use partner_billing::store::{Hold, HoldPoint};
use partner_billing::wire::{IssueLicenseRequest, License};
use partner_billing_tests::process::ServerProcess;
use partner_billing_tests::{Db, Reseller, TempDir, TestApp, both_databases, logs};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    metrics_count_requests_by_template_and_units_charged,
    request_ids_are_echoed_logged_and_in_problems,
    sigterm_lets_a_batch_in_flight_finish,
    a_license_whose_caller_went_away_is_still_logged,
    a_license_answered_but_never_read_is_still_logged,
);

/// The value of the sample whose line starts with `series` (name and labels), if any.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn scrape(app: &TestApp) -> String {
    let response = app.http.get(&app.metrics_url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// `promtool check metrics` on a scrape. CI installs promtool (`.ci/run`); elsewhere the check
/// is skipped with a note, unless `CI` is set.
fn promtool_accepts(scrape: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(_) if std::env::var_os("CI").is_none() => {
            eprintln!("promtool is not installed: `promtool check metrics` skipped");
            return;
        }
        Err(err) => panic!("promtool is required in CI: {err}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The request counter's sample with `labels`.
fn series_of(text: &str, labels: &str) -> Option<f64> {
    sample(text, &format!("http_server_requests_total{{{labels}}}"))
}

async fn metrics_count_requests_by_template_and_units_charged(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice@example.com").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 20).await;

    let license =
        json!({"planSlug":"pro","login":"alice@example.com","idempotencyKey":"ops-license-1"});
    for _ in 0..2 {
        let response = app
            .partner(Method::POST, "/v1/billing/partner/licenses", &r)
            .json(&license)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let batch = json!({"planSlug":"pro","count":5,"idempotencyKey":"ops-batch-1"});
    for _ in 0..2 {
        let response = app
            .partner(Method::POST, "/v1/billing/partner/promo-batches", &r)
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // A refused request charges nothing and is counted under its status.
    let too_big = json!({"planSlug":"pro","count":100,"idempotencyKey":"ops-batch-2"});
    let response = app
        .partner(Method::POST, "/v1/billing/partner/promo-batches", &r)
        .json(&too_big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 402);
    // An id in the path is never a label: the template is.
    let token = app.session(&r.client_id, &r.password).await;
    let response = app
        .http
        .delete(app.url("/v1/billing/resellers/me/api-keys/rsk_000000000000000000000000"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let response = app
        .http
        .get(app.url("/no/such/path/with-an-id-123"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // A method that is no HTTP method is counted as `other`, never as sent (any token could
    // be sent, an id included: each would make new series).
    let odd = Method::from_bytes(r.client_id.as_bytes()).unwrap();
    let response = app
        .http
        .request(odd, app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(app.balance(&r, "pro").await, Some(14));

    let text = scrape(&app).await;
    assert!(!text.contains(&r.client_id), "{text}");
    assert_eq!(
        series_of(&text, r#"method="other",route="/healthz",status="405""#),
        Some(1.0),
        "{text}"
    );
    let series = |labels: &str| series_of(&text, labels);
    assert_eq!(
        series(r#"method="POST",route="/v1/billing/partner/licenses",status="200""#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        series(r#"method="POST",route="/v1/billing/partner/promo-batches",status="402""#),
        Some(1.0)
    );
    assert_eq!(
        series(
            r#"method="DELETE",route="/v1/billing/resellers/me/api-keys/{apiKeyId}",status="404""#
        ),
        Some(1.0)
    );
    assert_eq!(
        series(r#"method="GET",route="unmatched",status="404""#),
        Some(1.0)
    );
    // Units charged: one license and five codes; the replays and the 402 charged nothing.
    assert_eq!(
        sample(
            &text,
            r#"partner_billing_units_charged_total{kind="license"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"partner_billing_units_charged_total{kind="promo_batch"}"#
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, "partner_billing_license_group_size_count"),
        Some(1.0),
        "one committed group transaction"
    );
    assert!(
        sample(&text, r#"partner_billing_db_pool_connections{state="max"}"#)
            .is_some_and(|max| max >= 1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                r#"partner_billing_build_info{{version="{}"}}"#,
                env!("CARGO_PKG_VERSION")
            )
        ),
        Some(1.0)
    );
    for name in [
        "http_server_request_duration_seconds_bucket",
        "partner_billing_webhook_deliveries_total",
        "partner_billing_webhook_outbox_pending",
        "partner_billing_panel_logins_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {}", name.trim_end_matches("_bucket"))),
            "{name}: {text}"
        );
    }
    for secret in [
        r.client_id.as_str(),
        r.secret.as_str(),
        r.api_key_id.as_str(),
        "alice@example.com",
        "rsk_000000000000000000000000",
        "with-an-id-123",
    ] {
        assert!(!text.contains(secret), "the scrape holds {secret}");
    }
    // The API's listener has no /metrics.
    let response = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    promtool_accepts(&text);
    app.stop().await;
}

async fn request_ids_are_echoed_logged_and_in_problems(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;

    // A caller's id is kept, on a success and in a problem body.
    let response = app
        .partner(Method::GET, "/v1/billing/partner/balances", &r)
        .header("X-Request-Id", "ops-req-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "ops-req-0001");

    let id = format!("ops-{}", uuid::Uuid::new_v4().simple());
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .header("X-Request-Id", &id)
        .json(&json!({"planSlug":"pro","login":"nobody","idempotencyKey":"short"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["x-request-id"], id.as_str());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["requestId"], id.as_str(), "{body}");
    assert_eq!(body["code"], "Request.ValidationFailed");
    assert!(
        logs::captured()
            .lines()
            .any(|line| line.contains(&format!("request_id={id}")) && line.contains("request")),
        "the access log line carries the request id"
    );

    // An id that is empty, too long or not visible ASCII is replaced by a new UUID.
    for bad in ["", &"x".repeat(65), "has space"] {
        let response = app
            .http
            .get(app.url("/v1/billing/partner/no-such"))
            .header("X-Request-Id", bad)
            .send()
            .await
            .unwrap();
        let echoed = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            uuid::Uuid::parse_str(&echoed).is_ok(),
            "{bad:?} -> {echoed}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["requestId"], echoed.as_str());
    }
    // No header: a new UUID, also on the empty 401.
    let response = app
        .http
        .get(app.url("/v1/billing/partner/balances"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let echoed = response.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(echoed).is_ok());
    assert_eq!(response.content_length(), Some(0));

    // On the metrics listener too: the scrape, and a path it does not serve.
    let metrics_base = app.metrics_url.trim_end_matches("/metrics");
    for (url, status) in [
        (app.metrics_url.clone(), 200),
        (format!("{metrics_base}/no-such"), 404),
    ] {
        let response = app
            .http
            .get(&url)
            .header("X-Request-Id", "ops-scrape-01")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{url}");
        assert_eq!(response.headers()["x-request-id"], "ops-scrape-01", "{url}");
        let response = app.http.get(&url).send().await.unwrap();
        let echoed = response.headers()["x-request-id"].to_str().unwrap();
        assert!(uuid::Uuid::parse_str(echoed).is_ok(), "{url}: {echoed}");
    }
    app.stop().await;
}

async fn sigterm_lets_a_batch_in_flight_finish(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 1000).await;
    let dir = TempDir::new();
    let key_file = dir.path.join("master.key");
    partner_billing_tests::write_private(&key_file, hex::encode(app.master_key()).as_bytes());
    let key_file = key_file.display().to_string();
    let mut server = ServerProcess::start(
        &app.database_url,
        &dir.path,
        &[
            ("PARTNER_BILLING_MASTER_KEY_FILE", &key_file),
            (
                "PARTNER_BILLING_LOG",
                "info,partner_billing_server::access_log=debug",
            ),
        ],
    );
    let request = partner_billing_tests::partner_request(
        &app.http,
        &server.base_url,
        Method::POST,
        "/v1/billing/partner/promo-batches",
        &r,
    )
    .json(&json!({"planSlug":"pro","count":1000,"idempotencyKey":"ops-sigterm-1"}));
    let in_flight = tokio::spawn(request.send());
    // The handler has started once the server logs the request's start.
    let started = tokio::task::block_in_place(|| {
        server.wait_for_log("request started", Duration::from_secs(30))
    });
    assert!(
        started.is_some_and(|line| line.contains("promo-batches")),
        "the batch request reached the server"
    );
    let status = tokio::task::block_in_place(|| server.terminate(Duration::from_secs(35)))
        .expect("the server exits within the drain time");
    assert!(status.success(), "SIGTERM exits 0, got {status}");
    let response = in_flight.await.unwrap().expect("the batch is answered");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["codes"].as_array().map(Vec::len), Some(1000));
    assert_eq!(app.balance(&r, "pro").await, Some(0));
    app.assert_audit_clean().await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_the_request_id() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.path.join("billing.db").display());
    let mut server = ServerProcess::start(
        &url,
        &dir.path,
        &[
            ("PARTNER_BILLING_LOG_FORMAT", "json"),
            ("PARTNER_BILLING_LISTEN", "127.0.0.1:0"),
        ],
    );
    let response = reqwest::Client::new()
        .get(format!("{}/healthz", server.base_url))
        .header("X-Request-Id", "json-log-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let line =
        tokio::task::block_in_place(|| server.wait_for_log("json-log-1", Duration::from_secs(10)))
            .expect("a log line with the request id");
    let object: Value = serde_json::from_str(&line).expect("one JSON object per line");
    assert_eq!(object["requestId"], "json-log-1");
    assert_eq!(object["level"], "info");
    assert_eq!(object["message"], "request");
    assert_eq!(object["fields"]["route"], "/healthz");
    assert_eq!(object["fields"]["status"], 200);
    assert!(
        object["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let status =
        tokio::task::block_in_place(|| server.terminate(Duration::from_secs(15))).expect("exits");
    assert!(status.success());
    // The log's writer gathers lines before writing them: a normal stop writes out the last.
    let last = server
        .wait_for_log("\"message\":\"stopped\"", Duration::from_secs(10))
        .expect("the last line, written out at the stop");
    assert!(serde_json::from_str::<Value>(&last).is_ok(), "{last}");
}

/// A license written by the group commit (the default), in a task of its own: its "license
/// issued" line still carries the request's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_commits_lines_carry_the_request_id() {
    let app = TestApp::spawn(&Db::Sqlite).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 1).await;
    let dir = TempDir::new();
    let key = dir.path.join("master.key");
    partner_billing_tests::write_private(&key, hex::encode(app.master_key()).as_bytes());
    let server = ServerProcess::start(
        &app.database_url,
        &dir.path,
        &[
            ("PARTNER_BILLING_LOG_FORMAT", "json"),
            (
                "PARTNER_BILLING_MASTER_KEY_FILE",
                &key.display().to_string(),
            ),
        ],
    );
    let response = partner_billing_tests::partner_request(
        &app.http,
        &server.base_url,
        Method::POST,
        "/v1/billing/partner/licenses",
        &r,
    )
    .header("X-Request-Id", "group-line-1")
    .json(&json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "group-line-0001"}))
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let line = tokio::task::block_in_place(|| {
        server.wait_for_log("license issued", Duration::from_secs(10))
    })
    .expect("the license issued line");
    let object: Value = serde_json::from_str(&line).expect("one JSON object per line");
    assert_eq!(object["requestId"], "group-line-1", "{line}");
    assert_eq!(object["fields"]["plan"], "pro", "{line}");
    drop(server);
    app.stop().await;
}

/// A reseller with one unit of `pro`, the login `alice`, and its account as the engine knows it.
async fn one_unit_of_pro(db: &Db) -> (TestApp, Reseller, PartnerAccount) {
    let app = TestApp::spawn(db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 1).await;
    let secret = Secret::from_presented(r.secret.clone());
    let account = keys::authenticate_api_key(&app.store, &r.client_id, &secret)
        .await
        .unwrap();
    (app, r, account)
}

/// A license of `pro` for `alice`, asked for in the scope of request `id`.
fn issue_in_scope(
    app: &TestApp,
    account: PartnerAccount,
    id: &str,
) -> impl Future<Output = partner_billing::Result<Outcome<License>>> + Send + 'static {
    let request = IssueLicense::try_from(&IssueLicenseRequest {
        plan_slug: "pro".to_owned(),
        login: "alice".to_owned(),
        idempotency_key: "went-away-0001".to_owned(),
    })
    .unwrap();
    let store = app.store.clone();
    request_scope::serve(Arc::from(id), async move {
        licenses::issue_license(&store, &account, request).await
    })
}

/// Waits (bounded) until the held group's first request has arrived at the hold.
async fn arrived(hold: &Hold) {
    tokio::time::timeout(Duration::from_secs(10), hold.wait_for_arrivals(1))
        .await
        .expect("the license request reached its group");
}

/// Waits (bounded) until no license group runs: the released group has answered, or found no
/// one to answer.
async fn groups_ended(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.store.license_group_stats().1 > 0 {
        assert!(Instant::now() < deadline, "the held group never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The unit was charged, the license is listed, and exactly one "license issued" line names
/// it, with request id `id`.
async fn issued_and_logged_once(app: &TestApp, r: &Reseller, id: &str) {
    let balances = app.partner(Method::GET, "/v1/billing/partner/balances", r);
    let body: Value = balances.send().await.unwrap().json().await.unwrap();
    assert_eq!(body["balances"][0]["remainingBalance"], 0, "{body}");
    let licenses = app.partner(Method::GET, "/v1/billing/partner/licenses", r);
    let body: Value = licenses.send().await.unwrap().json().await.unwrap();
    let license_id = body["licenses"][0]["licenseId"]
        .as_str()
        .expect("the license");
    let logged = logs::captured();
    let lines: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("license issued") && line.contains(license_id))
        .collect();
    assert_eq!(lines.len(), 1, "one line for the license: {lines:?}");
    assert!(
        lines[0].contains(&format!("request_id={id}")),
        "in its caller's scope: {}",
        lines[0]
    );
}

/// A caller that goes away while its license group is held (a client that hung up): the
/// license still commits, and the group writes its "license issued" line, with the caller's
/// request id, since the caller is no longer there to write it.
async fn a_license_whose_caller_went_away_is_still_logged(db: Db) {
    let (app, r, account) = one_unit_of_pro(&db).await;
    let hold = app
        .store
        .hold(HoldPoint::LicenseGroupTaken, account.account_id);
    let id = format!("gone-{}", uuid::Uuid::new_v4().simple());
    let caller = tokio::spawn(issue_in_scope(&app, account, &id));
    arrived(&hold).await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    hold.release();
    groups_ended(&app).await;
    issued_and_logged_once(&app, &r, &id).await;
    app.stop().await;
}

/// A caller that goes away after its group sent the answer but before reading it (a client
/// that hung up as the answer came): the line is written as the caller's end of the answer is
/// dropped, with the caller's request id.
async fn a_license_answered_but_never_read_is_still_logged(db: Db) {
    let (app, r, account) = one_unit_of_pro(&db).await;
    let hold = app
        .store
        .hold(HoldPoint::LicenseGroupTaken, account.account_id);
    let id = format!("unread-{}", uuid::Uuid::new_v4().simple());
    let mut caller = Box::pin(issue_in_scope(&app, account, &id));
    // Polled until it waits in its group, then never again.
    tokio::select! {
        _ = &mut caller => panic!("answered while its group was held"),
        () = arrived(&hold) => {}
    }
    hold.release();
    groups_ended(&app).await;
    drop(caller);
    issued_and_logged_once(&app, &r, &id).await;
    app.stop().await;
}
