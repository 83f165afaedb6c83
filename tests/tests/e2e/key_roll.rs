//! Key roll with a grace period: the new key at once, the old key until its `expiresUtc` and
//! refused (the empty 401, on every replica) from then on, listed `expired`; the cap of five;
//! validation and unknown keys changing nothing; the CLI's `keys roll` and `admin key list`.
//! Time moves with the harness's test clock, never by sleeping.
//!
//! Over 450 lines on purpose: one scenario per rule of a roll (grace, expiry on every replica, the
//! cap, validation, the CLI), each spelling out its requests and clock moves.

use std::process::{Command, Stdio};

use partner_billing::wire::ApiKeyList;
use partner_billing_client::{Credentials, Error, PanelClient, PartnerClient};
use partner_billing_tests::process::binary;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases, expect_empty_401};
use reqwest::Method;
use serde_json::Value;

both_databases!(
    old_key_works_until_expiry_then_gets_the_empty_401_everywhere,
    roll_now_refuses_the_old_key_at_once,
    default_grace_is_one_day_with_or_without_a_body,
    out_of_range_grace_is_refused_and_changes_nothing,
    unknown_revoked_expired_or_foreign_keys_are_not_found,
    new_key_counts_toward_five_and_expired_keys_do_not,
    rolling_again_never_lengthens_the_grace,
    cli_rolls_and_lists_expiry
);

async fn panel(app: &TestApp, r: &Reseller) -> PanelClient {
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    panel.login(&r.client_id, &r.password).await.unwrap();
    panel
}

fn partner(app: &TestApp, client_id: &str, secret: &str) -> PartnerClient {
    PartnerClient::new(
        &app.base_url,
        Credentials::new(client_id.to_owned(), secret.to_owned()),
    )
    .unwrap()
}

/// The key `id` in `list`.
fn key<'a>(list: &'a ApiKeyList, id: &str) -> &'a partner_billing::wire::ApiKeyInfo {
    list.api_keys
        .iter()
        .find(|k| k.api_key_id == id)
        .unwrap_or_else(|| panic!("{id} not listed: {list:?}"))
}

/// `GET /v1/billing/partner/balances` with the raw key headers on `base_url`.
async fn raw_balances(app: &TestApp, base_url: &str, r: &Reseller) -> reqwest::Response {
    partner_billing_tests::partner_request(
        &app.http,
        base_url,
        Method::GET,
        "/v1/billing/partner/balances",
        r,
    )
    .send()
    .await
    .unwrap()
}

async fn old_key_works_until_expiry_then_gets_the_empty_401_everywhere(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let r = app.reseller().await; // key "test"
    let panel = panel(&app, &r).await;
    let before = app.store.now_utc();
    let new = panel.roll_api_key(&r.api_key_id, Some(3600)).await.unwrap();
    let after = app.store.now_utc();
    assert!(new.secret.starts_with("rss_") && new.api_key_id.starts_with("rsk_"));
    assert_ne!(new.api_key_id, r.api_key_id);
    assert_eq!(new.client_id, r.client_id);
    assert_eq!(
        new.name.as_deref(),
        Some("test"),
        "the new key keeps the name"
    );
    assert!((before..=after).contains(&new.created_utc));

    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(list.api_keys.len(), 2);
    let old = key(&list, &r.api_key_id);
    assert_eq!(old.status, "active");
    let expires = old.expires_utc.expect("the rolled key has expiresUtc");
    assert!(
        (before + 3600..=after + 3600).contains(&expires),
        "{expires}"
    );
    assert_eq!(old.revoked_utc, None);
    let fresh = key(&list, &new.api_key_id);
    assert_eq!((fresh.status.as_str(), fresh.expires_utc), ("active", None));
    assert_eq!(fresh.name.as_deref(), Some("test"));

    // Both keys work during the grace period, on both replicas.
    let old_client = partner(&app, &r.client_id, &r.secret);
    let new_client = partner(&app, &new.client_id, &new.secret);
    old_client.balances().await.unwrap();
    new_client.balances().await.unwrap();
    assert_eq!(
        raw_balances(&app, &replica.base_url, &r).await.status(),
        200
    );

    // Shortly before expiry (the test clock, shared by both replicas): still accepted. The test
    // clock is the wall clock plus an offset, so "one second before" could tick over into the
    // expiry second between the advance and the request; ten seconds of margin cannot.
    app.store
        .clock()
        .advance(expires - 10 - app.store.now_utc());
    old_client.balances().await.unwrap();
    assert_eq!(
        key(&panel.list_api_keys().await.unwrap(), &r.api_key_id).status,
        "active"
    );

    // From expiresUtc on: the identical empty 401 on every replica, listed `expired`.
    app.store.clock().advance(expires - app.store.now_utc());
    assert!(matches!(
        old_client.balances().await.unwrap_err(),
        Error::Unauthorized
    ));
    let expired_shape =
        expect_empty_401("expired key", raw_balances(&app, &app.base_url, &r).await).await;
    let on_replica = expect_empty_401(
        "expired key on another replica",
        raw_balances(&app, &replica.base_url, &r).await,
    )
    .await;
    let unknown = Reseller {
        secret: format!("rss_{}", "A".repeat(43)),
        ..r.clone()
    };
    let unknown_shape = expect_empty_401(
        "unknown secret",
        raw_balances(&app, &app.base_url, &unknown).await,
    )
    .await;
    assert_eq!(expired_shape, unknown_shape, "one 401 for every rejection");
    assert_eq!(on_replica, unknown_shape);
    new_client.balances().await.unwrap();

    let list = panel.list_api_keys().await.unwrap();
    let old = key(&list, &r.api_key_id);
    assert_eq!(old.status, "expired");
    assert_eq!(old.expires_utc, Some(expires));
    assert_eq!(key(&list, &new.api_key_id).status, "active");
    replica.stop().await;
    app.stop().await;
}

async fn roll_now_refuses_the_old_key_at_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r).await;
    let old_client = partner(&app, &r.client_id, &r.secret);
    old_client.balances().await.unwrap();
    let new = panel.roll_api_key(&r.api_key_id, Some(0)).await.unwrap();
    expect_empty_401(
        "key rolled with 0 seconds",
        raw_balances(&app, &app.base_url, &r).await,
    )
    .await;
    partner(&app, &new.client_id, &new.secret)
        .balances()
        .await
        .unwrap();
    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(key(&list, &r.api_key_id).status, "expired");
    app.stop().await;
}

async fn default_grace_is_one_day_with_or_without_a_body(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let panel = panel(&app, &r).await;
    let second = panel.create_api_key(Some("second")).await.unwrap();
    let roll_url = |id: &str| app.url(&format!("/v1/billing/resellers/me/api-keys/{id}/roll"));

    // No body at all, `{}`, and the SDK's `None`: all mean 86400 seconds.
    let before = app.store.now_utc();
    let no_body = app
        .http
        .post(roll_url(&r.api_key_id))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(no_body.status(), 201);
    let body: Value = no_body.json().await.unwrap();
    assert_eq!(body["name"], "test");
    for field in ["apiKeyId", "clientId", "secret", "createdUtc"] {
        assert!(!body[field].is_null(), "{field} missing: {body}");
    }
    let empty_object = app
        .http
        .post(roll_url(&second.api_key_id))
        .bearer_auth(&token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(empty_object.status(), 201);
    // The key the first roll made, rolled in turn: five active now.
    let third = body["apiKeyId"].as_str().unwrap().to_owned();
    panel.roll_api_key(&third, None).await.unwrap();
    let after = app.store.now_utc();

    let list = panel.list_api_keys().await.unwrap();
    for id in [&r.api_key_id, &second.api_key_id, &third] {
        let k = key(&list, id);
        assert_eq!(k.status, "active");
        let expires = k.expires_utc.expect("expiresUtc");
        assert!(
            (before + 86_400..=after + 86_400).contains(&expires),
            "{id}: {expires}"
        );
    }
    app.stop().await;
}

async fn out_of_range_grace_is_refused_and_changes_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let panel = panel(&app, &r).await;
    let before = panel.list_api_keys().await.unwrap();

    for seconds in [-1, 604_801, i64::MAX] {
        let err = panel
            .roll_api_key(&r.api_key_id, Some(seconds))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ValidationFailed { .. }), "{err:?}");
        assert_eq!(err.status(), Some(400));
        let problem = err.problem().expect("problem");
        assert_eq!(
            problem.field.as_deref(),
            Some("expiresInSeconds"),
            "{seconds}"
        );
        assert_eq!(panel.list_api_keys().await.unwrap(), before, "{seconds}");
    }
    // Malformed bodies: a string, a fraction, an unknown member, not JSON.
    let url = app.url(&format!(
        "/v1/billing/resellers/me/api-keys/{}/roll",
        r.api_key_id
    ));
    for body in [
        r#"{"expiresInSeconds":"1h"}"#,
        r#"{"expiresInSeconds":1.5}"#,
        r#"{"expiresInSeconds":60,"name":"x"}"#,
        r#"{"expiresInSeconds":"#,
    ] {
        let response = app
            .http
            .post(&url)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Request.ValidationFailed", "{body}");
        assert_eq!(panel.list_api_keys().await.unwrap(), before, "{body}");
    }
    // The edges are accepted.
    let a = panel
        .roll_api_key(&r.api_key_id, Some(604_800))
        .await
        .unwrap();
    panel.roll_api_key(&a.api_key_id, Some(0)).await.unwrap();
    app.stop().await;
}

async fn unknown_revoked_expired_or_foreign_keys_are_not_found(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let other = app.reseller().await;
    let panel = panel(&app, &r).await;
    let revoked = panel.create_api_key(Some("revoked")).await.unwrap();
    panel.revoke_api_key(&revoked.api_key_id).await.unwrap();
    let rolled = panel.create_api_key(Some("rolled")).await.unwrap();
    panel
        .roll_api_key(&rolled.api_key_id, Some(60))
        .await
        .unwrap();
    app.store.clock().advance(60);
    let before = panel.list_api_keys().await.unwrap();
    assert_eq!(key(&before, &rolled.api_key_id).status, "expired");

    let unknown = format!("rsk_{}", "A".repeat(22));
    for id in [
        unknown.as_str(),
        "not-a-key-id",
        other.api_key_id.as_str(),
        revoked.api_key_id.as_str(),
        rolled.api_key_id.as_str(),
    ] {
        let err = panel.roll_api_key(id, Some(60)).await.unwrap_err();
        assert!(matches!(err, Error::ApiKeyNotFound { .. }), "{id}: {err:?}");
        assert_eq!(err.status(), Some(404));
        assert_eq!(panel.list_api_keys().await.unwrap(), before, "{id}");
    }
    // The other account's key is untouched and still works.
    let others = PanelClient::new(&app.base_url).unwrap();
    let mut others = others;
    others
        .login(&other.client_id, &other.password)
        .await
        .unwrap();
    let listed = others.list_api_keys().await.unwrap();
    assert_eq!(listed.api_keys.len(), 1);
    assert_eq!(listed.api_keys[0].expires_utc, None);
    partner(&app, &other.client_id, &other.secret)
        .balances()
        .await
        .unwrap();
    app.stop().await;
}

async fn new_key_counts_toward_five_and_expired_keys_do_not(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r).await;
    for i in 0..3 {
        panel.create_api_key(Some(&format!("k{i}"))).await.unwrap();
    }
    // Four active: the roll brings a fifth, the rolled key stays active for its grace period.
    let new = panel.roll_api_key(&r.api_key_id, Some(600)).await.unwrap();
    let full = panel.list_api_keys().await.unwrap();
    assert_eq!(
        full.api_keys
            .iter()
            .filter(|k| k.status == "active")
            .count(),
        5
    );
    // Five active: a roll with a grace period is refused and changes nothing, and so is a
    // creation.
    for id in [&new.api_key_id, &r.api_key_id] {
        let err = panel.roll_api_key(id, Some(1)).await.unwrap_err();
        assert!(matches!(err, Error::ApiKeyLimitReached { .. }), "{err:?}");
        assert_eq!(err.status(), Some(409));
        assert_eq!(panel.list_api_keys().await.unwrap(), full);
    }
    assert!(matches!(
        panel.create_api_key(None).await.unwrap_err(),
        Error::ApiKeyLimitReached { .. }
    ));
    // Rolled now, the old key is expired before the new one is counted: a full account can
    // still replace a key, and stays at five.
    let k0 = full
        .api_keys
        .iter()
        .find(|k| k.name.as_deref() == Some("k0"))
        .expect("k0")
        .api_key_id
        .clone();
    let replaced = panel.roll_api_key(&k0, Some(0)).await.unwrap();
    let after = panel.list_api_keys().await.unwrap();
    assert_eq!(key(&after, &k0).status, "expired");
    assert_eq!(key(&after, &replaced.api_key_id).status, "active");
    let active = |list: &ApiKeyList| {
        list.api_keys
            .iter()
            .filter(|k| k.status == "active")
            .count()
    };
    assert_eq!(active(&after), 5);
    // Once the rolled key expires it no longer counts: a slot is free again.
    app.store.clock().advance(600);
    assert_eq!(
        key(&panel.list_api_keys().await.unwrap(), &r.api_key_id).status,
        "expired"
    );
    panel.roll_api_key(&new.api_key_id, Some(60)).await.unwrap();
    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(list.api_keys.len(), 7);
    assert_eq!(
        list.api_keys
            .iter()
            .filter(|k| k.status == "active")
            .count(),
        5
    );
    // The operator's reseller summary counts the same way.
    let summary = partner_billing::accounts::show_reseller(
        &app.store,
        &partner_billing::domain::ClientId::parse("clientId", &r.client_id).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(summary.active_api_keys, 5);
    app.store.clock().advance(60);
    let summary = partner_billing::accounts::show_reseller(
        &app.store,
        &partner_billing::domain::ClientId::parse("clientId", &r.client_id).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(summary.active_api_keys, 4);
    let listed = partner_billing::accounts::list_resellers(&app.store)
        .await
        .unwrap();
    let listed = listed
        .iter()
        .find(|s| s.client_id == r.client_id)
        .expect("listed");
    assert_eq!(listed.active_api_keys, 4);
    app.stop().await;
}

async fn rolling_again_never_lengthens_the_grace(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r).await;
    panel.roll_api_key(&r.api_key_id, Some(60)).await.unwrap();
    let first = key(&panel.list_api_keys().await.unwrap(), &r.api_key_id)
        .expires_utc
        .unwrap();
    // Still active, so it may be rolled again: a longer grace keeps the earlier expiry...
    panel.roll_api_key(&r.api_key_id, Some(3600)).await.unwrap();
    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(key(&list, &r.api_key_id).expires_utc, Some(first));
    assert_eq!(list.api_keys.len(), 3);
    // ...and a shorter one shortens it.
    panel.roll_api_key(&r.api_key_id, Some(0)).await.unwrap();
    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(key(&list, &r.api_key_id).status, "expired");
    expect_empty_401("rolled now", raw_balances(&app, &app.base_url, &r).await).await;
    app.stop().await;
}

/// `partner-billing` against this app: `keys …` on a session token, `admin …` on the database.
fn cli(app: &TestApp, token: &str, args: &[&str]) -> std::process::Output {
    let home = partner_billing_tests::TempDir::new();
    Command::new(binary("partner-billing"))
        .args(args)
        .env_clear()
        .env("HOME", &home.path)
        .env("PARTNER_BILLING_BASE_URL", &app.base_url)
        .env("PARTNER_BILLING_DATABASE_URL", &app.database_url)
        .env("PARTNER_BILLING_SESSION_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .expect("run partner-billing")
}

fn cli_json(app: &TestApp, token: &str, args: &[&str]) -> Value {
    let output = cli(app, token, args);
    assert!(
        output.status.success(),
        "partner-billing {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

async fn cli_rolls_and_lists_expiry(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;

    let before = app.store.now_utc();
    let new = cli_json(
        &app,
        &token,
        &[
            "--json",
            "keys",
            "roll",
            "--api-key-id",
            &r.api_key_id,
            "--expires-in",
            "30m",
        ],
    );
    assert_eq!(new["name"], "test");
    assert!(new["secret"].as_str().unwrap().starts_with("rss_"));
    let new_id = new["apiKeyId"].as_str().unwrap().to_owned();

    let list = cli_json(&app, &token, &["--json", "keys", "list"]);
    let old = list["apiKeys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["apiKeyId"] == r.api_key_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(old["status"], "active");
    let expires = old["expiresUtc"].as_i64().expect("expiresUtc");
    assert!((before + 1800..=app.store.now_utc() + 1800).contains(&expires));

    // The table shows the expiry column.
    let table = cli(&app, &token, &["keys", "list"]);
    assert!(table.status.success());
    assert!(String::from_utf8_lossy(&table.stdout).contains("EXPIRES"));

    // `0` stops the new key at once. The operator's list (on the database, system clock) shows
    // the first key still in its grace period and the second expired, each with expiresUtc.
    let newest = cli_json(
        &app,
        &token,
        &[
            "--json",
            "keys",
            "roll",
            "--api-key-id",
            &new_id,
            "--expires-in",
            "0",
        ],
    );
    let admin = cli_json(
        &app,
        &token,
        &[
            "admin",
            "--json",
            "key",
            "list",
            "--client-id",
            &r.client_id,
        ],
    );
    let keys = admin["apiKeys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{admin}");
    let status = |id: &str| {
        keys.iter()
            .find(|k| k["apiKeyId"] == id)
            .map(|k| (k["status"].clone(), k["expiresUtc"].clone()))
            .unwrap()
    };
    assert_eq!(
        status(&r.api_key_id),
        (Value::from("active"), Value::from(expires))
    );
    let (new_status, new_expires) = status(&new_id);
    assert_eq!(new_status, "expired");
    assert!(new_expires.is_i64());
    let newest_id = newest["apiKeyId"].as_str().unwrap();
    assert_eq!(status(newest_id), (Value::from("active"), Value::Null));

    // Bad durations are usage errors; nothing is sent.
    for bad in ["8d", "1w", "-5", "soon"] {
        let output = cli(
            &app,
            &token,
            &[
                "keys",
                "roll",
                "--api-key-id",
                newest_id,
                "--expires-in",
                bad,
            ],
        );
        assert_eq!(output.status.code(), Some(2), "{bad}");
    }
    let after = cli_json(&app, &token, &["--json", "keys", "list"]);
    assert_eq!(after["apiKeys"].as_array().unwrap().len(), 3);
    app.stop().await;
}
