//! After a scenario: balances equal their ledgers, and neither the database nor the debug log
//! holds a secret, token or password in clear; canary secrets, tokens, passwords and promo
//! codes never show in logs, error bodies, panic answers or `Debug` output.

use partner_billing::operators;
use partner_billing::store::FaultPoint;
use partner_billing_client::{Credentials, PanelClient, PartnerClient, ProductClient};
use partner_billing_tests::{Db, TestApp, both_databases, logs};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Column, Connection, Row};

both_databases!(
    no_secret_in_database_or_log,
    canaries_never_leak,
    a_finished_app_leaves_no_database_behind
);

/// Every text value of every table, as one string.
async fn dump(app: &TestApp) -> String {
    let tables = [
        "plans",
        "users",
        "accounts",
        "api_keys",
        "panel_sessions",
        "balances",
        "ledger_entries",
        "licenses",
        "idempotency_records",
        "promo_batches",
        "promo_codes",
        "promo_recovery_payloads",
        "operator_tokens",
        "promo_redemptions",
        "operator_idempotency_records",
        "abuse_attempts",
        "master_key_check",
    ];
    let mut out = String::new();
    for table in tables {
        let rows = sqlx::query(AssertSqlSafe(format!("SELECT * FROM {table}")))
            .fetch_all(app.store.pool())
            .await
            .unwrap();
        for row in rows {
            for column in row.columns() {
                if let Ok(Some(text)) = row.try_get::<Option<String>, _>(column.name()) {
                    out.push_str(&text);
                    out.push('\n');
                }
            }
        }
    }
    out
}

async fn no_secret_in_database_or_log(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    let session = panel.login(&r.client_id, &r.password).await.unwrap();
    let extra = panel.create_api_key(Some("rotation")).await.unwrap();
    let sdk = PartnerClient::new(&app.base_url, Credentials::from(&extra)).unwrap();
    sdk.issue_license("pro", "alice", Some("hygiene-01"))
        .await
        .unwrap();
    sdk.issue_license("pro", "alice", Some("hygiene-01"))
        .await
        .unwrap();
    // Failures too: a wrong secret and a wrong password must not be logged either.
    let wrong = PartnerClient::new(
        &app.base_url,
        Credentials::new(&r.client_id, format!("{}x", r.secret)),
    )
    .unwrap();
    assert!(wrong.balances().await.is_err());
    let mut bad_panel = PanelClient::new(&app.base_url).unwrap();
    assert!(
        bad_panel
            .login(&r.client_id, &format!("{}-wrong", r.password))
            .await
            .is_err()
    );

    let secrets = [
        r.secret.as_str(),
        extra.secret.as_str(),
        session.session_token.as_str(),
        r.password.as_str(),
    ];
    let dumped = dump(&app).await;
    assert!(dumped.contains(&r.client_id), "the dump reads the tables");
    let log = logs::captured();
    assert!(
        log.contains("license issued"),
        "the log captured the scenario"
    );
    for secret in secrets {
        assert!(!dumped.contains(secret), "a secret is stored in clear");
        assert!(!log.contains(secret), "a secret is in the debug log");
        // Not even a long fragment of it.
        assert!(!log.contains(&secret[..20.min(secret.len())]) || secret.len() < 20);
    }
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Asserts that `text` holds no canary, nor a 12-character piece of one.
fn assert_clean(what: &str, text: &str, canaries: &[String]) {
    for canary in canaries {
        let piece = &canary[..12.min(canary.len())];
        assert!(
            !text.contains(canary.as_str()) && !text.contains(piece),
            "{what} holds a canary ({}…)",
            &canary[..4]
        );
    }
}

async fn canaries_never_leak(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 50).await;
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    let session = panel.login(&r.client_id, &r.password).await.unwrap();
    let created_key = panel.create_api_key(Some("canary")).await.unwrap();
    let sdk = PartnerClient::new(&app.base_url, Credentials::from(&created_key)).unwrap();
    let batch = sdk
        .generate_promo_batch("pro", 3, Some("canary-batch-1"))
        .await
        .unwrap();
    let codes: Vec<String> = batch.value.codes.iter().map(|c| c.code.clone()).collect();
    let created_token = operators::create_operator_token(
        &app.store,
        "canary",
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let operator_token = created_token.token.expose().to_owned();
    let product = ProductClient::new(&app.base_url, &operator_token).unwrap();
    let redeemed = product
        .redeem_promo_code(&codes[0].to_lowercase(), "alice", Some("canary-redeem-1"))
        .await
        .unwrap();

    let mut canaries = vec![
        r.secret.clone(),
        r.password.clone(),
        created_key.secret.clone(),
        session.session_token.clone(),
        operator_token.clone(),
    ];
    for code in &codes {
        canaries.push(code.clone());
        canaries.push(code.replace('-', ""));
    }

    // Error bodies: canaries sent where they do not belong are never echoed.
    let mut bodies = Vec::new();
    let license = "/v1/billing/partner/licenses";
    let batches = "/v1/billing/partner/promo-batches";
    for body in [
        json!({"planSlug":"pro","login": format!("{}\u{1}", r.password),"idempotencyKey":"canary-l-1"}),
        json!({"planSlug": r.secret,"login":"alice","idempotencyKey":"canary-l-2"}),
        json!({"planSlug":"pro","login":"alice","idempotencyKey": format!("{} {}", codes[1], r.secret)}),
        json!({"planSlug":"pro","login": codes[1],"idempotencyKey":"canary-l-3"}),
        json!({"planSlug":"pro","login":"alice"}),
        json!({"planSlug":"pro","login":"alice","idempotencyKey":"canary-l-4", "secret": r.secret}),
        json!(session.session_token),
    ] {
        let response = app
            .partner(Method::POST, license, &r)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
        bodies.push(response.text().await.unwrap());
    }
    let response = app
        .partner(Method::POST, batches, &r)
        .json(&json!({"planSlug":"pro","count": operator_token,"idempotencyKey":"canary-b-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    bodies.push(response.text().await.unwrap());
    // A used code for an unregistered login, a malformed code, a code with a wrong digit.
    let mut wrong_digit = codes[1].clone();
    wrong_digit.replace_range(
        0..1,
        if wrong_digit.starts_with('Z') {
            "Y"
        } else {
            "Z"
        },
    );
    for (code, login) in [
        (codes[1].clone(), "nobody-here"),
        (format!("{}!", codes[1]), "alice"),
        (wrong_digit, "alice"),
        (r.secret.clone(), "alice"),
    ] {
        let response = app
            .product(
                Method::POST,
                "/v1/billing/product/promo-redemptions",
                &operator_token,
            )
            .json(&json!({"code": code, "login": login, "idempotencyKey": format!("canary-r-{}", bodies.len())}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
        bodies.push(response.text().await.unwrap());
    }
    // Wrong credentials: a near-miss secret, token and password.
    let near = |s: &str| {
        format!(
            "{}{}",
            &s[..s.len() - 1],
            if s.ends_with('A') { 'B' } else { 'A' }
        )
    };
    let response = app
        .http
        .get(app.url("/v1/billing/partner/balances"))
        .header("X-Client-Id", &r.client_id)
        .header("X-Client-Secret", near(&r.secret))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    bodies.push(response.text().await.unwrap());
    let response = app
        .http
        .get(app.url("/v1/billing/product/users/alice/licenses"))
        .bearer_auth(near(&operator_token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    bodies.push(response.text().await.unwrap());
    let response = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .json(&json!({"clientId": r.client_id, "password": near(&r.password)}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    bodies.push(response.text().await.unwrap());

    // A panic in a handler whose message quotes a fresh code: a plain 500 problem, and the
    // service goes on.
    app.store.inject_fault(FaultPoint::Panic);
    let response = app
        .partner(Method::POST, batches, &r)
        .json(&json!({"planSlug":"pro","count":2,"idempotencyKey":"canary-panic-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "Internal.Error");
    assert!(
        !problem.to_string().contains("fault injection"),
        "the panic message is not sent: {problem}"
    );
    let retried = sdk
        .generate_promo_batch("pro", 2, Some("canary-panic-1"))
        .await
        .unwrap();
    assert!(!retried.replayed, "the panicked request charged nothing");
    for code in &retried.value.codes {
        canaries.push(code.code.clone());
    }
    for (i, body) in bodies.iter().enumerate() {
        assert_clean(&format!("error body {i}: {body}"), body, &canaries);
    }

    // Debug output of everything that carries a secret, and of the SDK's errors.
    let wrong_sdk = PartnerClient::new(
        &app.base_url,
        Credentials::new(&r.client_id, near(&r.secret)),
    )
    .unwrap();
    let sdk_error = wrong_sdk.balances().await.unwrap_err();
    let redeem_error = product
        .redeem_promo_code(&codes[0], "alice", Some("canary-redeem-2"))
        .await
        .unwrap_err();
    let debug = [
        format!("{panel:?}"),
        format!("{sdk:?}"),
        format!("{product:?}"),
        format!("{session:?}"),
        format!("{created_key:?}"),
        format!("{batch:?}"),
        format!("{retried:?}"),
        format!("{created_token:?}"),
        format!("{redeemed:?}"),
        format!("{:?}", Credentials::from(&created_key)),
        format!("{sdk_error:?} {sdk_error}"),
        format!("{redeem_error:?} {redeem_error}"),
    ];
    for (i, text) in debug.iter().enumerate() {
        assert_clean(&format!("Debug output {i}"), text, &canaries);
    }

    // Nothing in the debug-level log, nor in clear in the database.
    let log = logs::captured();
    assert!(log.contains("promo batch generated"));
    assert_clean("the debug log", &log, &canaries);
    assert_clean("the database", &dump(&app).await, &canaries);
    app.assert_audit_clean().await;
    app.stop().await;
}

/// A test's database goes with it, whether the test stops its app or drops it: the SQLite
/// file's directory is removed, the scratch PostgreSQL database dropped (a full run used to
/// leave about 240 behind).
async fn a_finished_app_leaves_no_database_behind(db: Db) {
    let stopped = TestApp::spawn(&db).await;
    let stopped_url = stopped.database_url.clone();
    stopped.stop().await;
    let dropped = TestApp::spawn(&db).await;
    let dropped_url = dropped.database_url.clone();
    drop(dropped);
    for url in [stopped_url, dropped_url] {
        match &db {
            Db::Sqlite => {
                let file = std::path::Path::new(url.trim_start_matches("sqlite://"));
                let dir = file.parent().expect("the database's directory");
                assert!(!dir.exists(), "{} is still there", dir.display());
            }
            Db::Postgres(server) => {
                let name = url.rsplit('/').next().expect("a database name");
                let mut conn = sqlx::PgConnection::connect(server)
                    .await
                    .expect("PostgreSQL reachable");
                let left: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
                        .bind(name)
                        .fetch_one(&mut conn)
                        .await
                        .expect("list databases");
                assert_eq!(left, 0, "database {name} is still on the server");
            }
        }
    }
}
