//! Direct license issue: the response, idempotent replay, and every refusal leaving the balance
//! as it was.

use partner_billing_client::{Credentials, Error, PartnerClient};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    issue_replay_and_reuse,
    a_reused_key_is_told_before_any_other_check,
    a_reused_key_is_told_before_any_other_check_without_group_commit,
    refusals_change_nothing,
    validation_failures_change_nothing
);

const LICENSES: &str = "/v1/billing/partner/licenses";

fn client(app: &TestApp, r: &Reseller) -> PartnerClient {
    PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap()
}

async fn issue_replay_and_reuse(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan("basic").await;
    app.user("alice@example.com").await;
    app.user("bob").await;
    app.credit(&r, "pro", 3).await;
    app.credit(&r, "basic", 1).await;

    let body = json!({"planSlug":"pro","login":"alice@example.com","idempotencyKey":"order-0001"});
    let first = app
        .partner(Method::POST, LICENSES, &r)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let license: Value = first.json().await.unwrap();
    let keys: Vec<&str> = {
        let mut k: Vec<&str> = license
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        k.sort_unstable();
        k
    };
    assert_eq!(
        keys,
        [
            "createdUtc",
            "expiresUtc",
            "licenseId",
            "login",
            "planSlug",
            "remainingBalance",
            "revokedUtc",
            "startsUtc"
        ]
    );
    assert!(uuid::Uuid::parse_str(license["licenseId"].as_str().unwrap()).is_ok());
    partner_billing_tests::assert_time_ordered_id(license["licenseId"].as_str().unwrap());
    assert_eq!(license["planSlug"], "pro");
    assert_eq!(license["login"], "alice@example.com");
    assert_eq!(license["remainingBalance"], 2);
    let created = license["createdUtc"].as_i64().unwrap();
    assert_eq!(license["expiresUtc"].as_i64(), Some(created + 30 * 86_400));

    // Replay: identical body, flagged, no charge.
    let replay = app
        .partner(Method::POST, LICENSES, &r)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(replay.json::<Value>().await.unwrap(), license);
    assert_eq!(app.balance(&r, "pro").await, Some(2));

    // Same key, different request.
    for other in [
        json!({"planSlug":"pro","login":"bob","idempotencyKey":"order-0001"}),
        json!({"planSlug":"basic","login":"alice@example.com","idempotencyKey":"order-0001"}),
    ] {
        let response = app
            .partner(Method::POST, LICENSES, &r)
            .json(&other)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422);
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Reseller.IdempotencyKeyReused");
    }
    assert_eq!(app.balance(&r, "pro").await, Some(2));
    assert_eq!(app.balance(&r, "basic").await, Some(1));

    // Through the SDK: a plan without subscription length has a null expiry.
    let sdk = client(&app, &r);
    let issued = sdk
        .issue_license("basic", "bob", Some("order-0002"))
        .await
        .unwrap();
    assert!(!issued.replayed);
    partner_billing_tests::assert_time_ordered_id(&issued.value.license_id);
    assert!(
        issued.value.license_id.as_str() > license["licenseId"].as_str().unwrap(),
        "a license issued later has a later id"
    );
    assert_eq!(issued.value.expires_utc, None);
    assert_eq!(issued.value.remaining_balance, 0);
    let again = sdk
        .issue_license("basic", "bob", Some("order-0002"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.value, issued.value);
    let balances = sdk.balances().await.unwrap();
    let listed: Vec<(String, i64)> = balances
        .balances
        .into_iter()
        .map(|b| (b.product_slug, b.remaining_balance))
        .collect();
    assert_eq!(listed, [("basic".to_owned(), 0), ("pro".to_owned(), 2)]);
    app.assert_audit_clean().await;
    app.stop().await;
}

/// A key already used answers `IdempotencyKeyReused` for any other body, whatever that body
/// names (an unknown login, an unknown plan) and whatever the balance: the key is checked
/// before the plan, the balance and the login. Nothing is charged.
async fn a_reused_key_is_told_before_any_other_check_on(app: TestApp) {
    let r = app.reseller().await;
    app.plan("pro").await;
    app.plan("never-credited").await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 1).await;
    let issue = |plan: &'static str, login: &'static str| {
        app.partner(Method::POST, LICENSES, &r)
            .json(&json!({"planSlug": plan, "login": login, "idempotencyKey": "used-key-01"}))
            .send()
    };
    assert_eq!(issue("pro", "alice").await.unwrap().status(), 200);
    let reused = [
        ("pro", "mallory"),
        ("nope", "alice"),
        ("nope", "mallory"),
        ("pro", "bob"),
        ("never-credited", "alice"),
    ];
    // At a zero balance, then with units left.
    for round in 0..2 {
        for (plan, login) in reused {
            let response = issue(plan, login).await.unwrap();
            let status = response.status().as_u16();
            let problem: Value = response.json().await.unwrap();
            assert_eq!(
                (status, problem["code"].as_str().unwrap_or_default()),
                (422, "Reseller.IdempotencyKeyReused"),
                "round {round}: {plan} for {login}"
            );
        }
        assert_eq!(app.balance(&r, "pro").await, Some(round));
        if round == 0 {
            app.credit(&r, "pro", 1).await;
        }
    }
    let replay = issue("pro", "alice").await.unwrap();
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    assert_eq!(app.balance(&r, "never-credited").await, None);
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn a_reused_key_is_told_before_any_other_check(db: Db) {
    a_reused_key_is_told_before_any_other_check_on(TestApp::spawn(&db).await).await;
}

async fn a_reused_key_is_told_before_any_other_check_without_group_commit(db: Db) {
    a_reused_key_is_told_before_any_other_check_on(TestApp::spawn_without_group_commit(&db).await)
        .await;
}

async fn refusals_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.plan("never-credited").await;
    app.user("alice").await;
    app.credit(&r, "pro", 2).await;
    let sdk = client(&app, &r);

    let err = sdk
        .issue_license("nope", "alice", Some("refusal-01"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownPlan { .. }), "{err:?}");
    assert_eq!(err.status(), Some(422));
    let err = sdk
        .issue_license("pro", "mallory", Some("refusal-02"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownLogin { .. }), "{err:?}");
    assert_eq!(err.status(), Some(422));
    let err = sdk
        .issue_license("never-credited", "alice", Some("refusal-03"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientQuota { .. }), "{err:?}");
    assert_eq!(err.status(), Some(402));
    assert_eq!(app.balance(&r, "pro").await, Some(2));
    assert_eq!(app.balance(&r, "never-credited").await, None);

    // A refusal is not stored: the same key runs again once the login exists.
    app.user("mallory").await;
    let issued = sdk
        .issue_license("pro", "mallory", Some("refusal-02"))
        .await
        .unwrap();
    assert!(!issued.replayed);
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn validation_failures_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let valid = json!({"planSlug":"pro","login":"alice","idempotencyKey":"valid-key-1"});
    let with = |field: &str, value: Value| {
        let mut body = valid.clone();
        body[field] = value;
        body.to_string()
    };
    let without = |field: &str| {
        let mut body = valid.clone();
        body.as_object_mut().unwrap().remove(field);
        body.to_string()
    };
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("missing planSlug", without("planSlug"), 400, "planSlug"),
        ("missing login", without("login"), 400, "login"),
        (
            "missing idempotencyKey",
            without("idempotencyKey"),
            400,
            "idempotencyKey",
        ),
        (
            "key of 7",
            with("idempotencyKey", json!("1234567")),
            400,
            "idempotencyKey",
        ),
        (
            "key of 129",
            with("idempotencyKey", json!("k".repeat(129))),
            400,
            "idempotencyKey",
        ),
        (
            "key with a space",
            with("idempotencyKey", json!("has a space")),
            400,
            "idempotencyKey",
        ),
        ("wrong type", with("login", json!(42)), 400, "login"),
        ("null", with("planSlug", Value::Null), 400, "planSlug"),
        (
            "bad slug",
            with("planSlug", json!("Pro Plan")),
            400,
            "planSlug",
        ),
        ("empty login", with("login", json!("")), 400, "login"),
        (
            "control char in login",
            with("login", json!("al\u{7}ice")),
            400,
            "login",
        ),
        (
            "unknown field",
            with("clientId", json!("rsc_000000000000000000000000")),
            400,
            "clientId",
        ),
        ("malformed JSON", "{\"planSlug\":".to_owned(), 400, "body"),
        ("not an object", "[1,2]".to_owned(), 400, "body"),
        (
            "oversized body",
            with("login", json!("a".repeat(20_000))),
            413,
            "",
        ),
    ];
    for (name, body, status, field) in cases {
        let response = app
            .partner(Method::POST, LICENSES, &r)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{name}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{name}"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["status"], status, "{name}");
        if status == 400 {
            assert_eq!(problem["code"], "Request.ValidationFailed", "{name}");
            assert_eq!(problem["field"], field, "{name}: {problem}");
        }
        for member in ["type", "title", "detail", "code"] {
            assert!(problem[member].is_string(), "{name}: {member} in {problem}");
        }
        assert_eq!(app.balance(&r, "pro").await, Some(5), "{name} charged");
    }
    // Wrong content type.
    let response = app
        .partner(Method::POST, LICENSES, &r)
        .header("Content-Type", "text/plain")
        .body(valid.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(app.balance(&r, "pro").await, Some(5));
    app.assert_audit_clean().await;
    app.stop().await;
}
