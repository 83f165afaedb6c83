//! Every credential failure is the same empty 401; revocation and suspension act at once.

use base64::Engine;
use partner_billing::accounts::{self, Standing};
use partner_billing::domain::ClientId;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases, expect_empty_401};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    last_used_is_written_once_a_minute_and_sessions_last_twelve_hours,
    every_rejection_is_the_same_empty_401,
    revocation_suspension_and_reinstatement_act_on_the_next_request,
    both_credential_forms_authenticate,
    concurrent_key_checks_each_answer_their_own_caller,
    concurrent_operator_token_checks_each_answer_their_own_caller,
    refused_credentials_are_the_empty_401_even_when_the_request_does_not_parse
);

const BALANCES: &str = "/v1/billing/partner/balances";

/// Revokes the reseller's API key from its panel session.
async fn revoke_own_key(app: &TestApp, r: &Reseller) {
    let token = app.session(&r.client_id, &r.password).await;
    let status = app
        .http
        .delete(app.url(&format!(
            "/v1/billing/resellers/me/api-keys/{}",
            r.api_key_id
        )))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
}

/// Suspends the reseller's account, as the operator.
async fn suspend(app: &TestApp, r: &Reseller) {
    accounts::set_standing(
        &app.store,
        &ClientId::parse("c", &r.client_id).unwrap(),
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

async fn every_rejection_is_the_same_empty_401(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = app.reseller().await;
    let b = app.reseller().await;
    let url = app.url(BALANCES);
    let revoked = app.reseller().await;
    revoke_own_key(&app, &revoked).await;
    let suspended = app.reseller().await;
    suspend(&app, &suspended).await;

    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("no credentials", app.http.get(&url)),
        (
            "malformed basic header",
            app.http
                .get(&url)
                .header("Authorization", "Basic !!!not-base64"),
        ),
        (
            "bearer instead of key",
            app.http.get(&url).header("Authorization", "Bearer rss_x"),
        ),
        (
            "client id without secret",
            app.http.get(&url).header("X-Client-Id", &a.client_id),
        ),
        (
            "unknown client id",
            app.http
                .get(&url)
                .header("X-Client-Id", "rsc_000000000000000000000000")
                .header("X-Client-Secret", &a.secret),
        ),
        (
            "wrong secret",
            app.http
                .get(&url)
                .header("X-Client-Id", &a.client_id)
                .header("X-Client-Secret", "rss_wrong"),
        ),
        (
            "another account's secret",
            app.http
                .get(&url)
                .header("X-Client-Id", &a.client_id)
                .header("X-Client-Secret", &b.secret),
        ),
        (
            "wrong secret over basic",
            app.http
                .get(&url)
                .header("Authorization", basic(&a.client_id, "rss_wrong")),
        ),
        (
            "revoked key",
            app.http
                .get(&url)
                .header("X-Client-Id", &revoked.client_id)
                .header("X-Client-Secret", &revoked.secret),
        ),
        (
            "suspended account",
            app.http
                .get(&url)
                .header("X-Client-Id", &suspended.client_id)
                .header("X-Client-Secret", &suspended.secret),
        ),
    ];
    let mut shapes = Vec::new();
    for (name, request) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{name}");
        shapes.push((name, expect_empty_401(name, response).await));
    }
    let first = shapes[0].1.clone();
    assert!(
        first
            .iter()
            .any(|(n, v)| n == "www-authenticate" && v.starts_with("Basic")),
        "{first:?}"
    );
    for (name, headers) in &shapes {
        assert_eq!(
            headers, &first,
            "headers of '{name}' differ from 'no credentials'"
        );
    }
    // The same for a write: nothing charged.
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&a, "pro", 3).await;
    let response = app
        .http
        .post(app.url("/v1/billing/partner/licenses"))
        .header("X-Client-Id", &a.client_id)
        .header("X-Client-Secret", &b.secret)
        .json(&serde_json::json!({"planSlug":"pro","login":"alice","idempotencyKey":"key-00001"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        expect_empty_401("a write with another account's secret", response).await,
        first
    );
    assert_eq!(app.balance(&a, "pro").await, Some(3));
    app.stop().await;
}

async fn revocation_suspension_and_reinstatement_act_on_the_next_request(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let ok = |app: &TestApp, secret: &str| {
        app.http
            .get(app.url(BALANCES))
            .header("X-Client-Id", &r.client_id)
            .header("X-Client-Secret", secret.to_owned())
            .send()
    };
    assert_eq!(ok(&app, &r.secret).await.unwrap().status(), 200);

    let client_id = ClientId::parse("c", &r.client_id).unwrap();
    accounts::set_standing(
        &app.store,
        &client_id,
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(
        ok(&app, &r.secret).await.unwrap().status(),
        401,
        "suspension acts on the next request"
    );
    // A suspended account cannot log in to the panel either.
    let login = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .json(&serde_json::json!({"clientId": r.client_id, "password": r.password}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 401);
    accounts::set_standing(
        &app.store,
        &client_id,
        Standing::Good,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(
        ok(&app, &r.secret).await.unwrap().status(),
        200,
        "reinstatement restores access"
    );

    // Rotation: a second key works beside the first; revoking the first stops it at once.
    let token = app.session(&r.client_id, &r.password).await;
    let second: serde_json::Value = app
        .http
        .post(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let second_secret = second["secret"].as_str().unwrap().to_owned();
    assert_eq!(ok(&app, &second_secret).await.unwrap().status(), 200);
    assert_eq!(ok(&app, &r.secret).await.unwrap().status(), 200);
    let keys: serde_json::Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first = keys["apiKeys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["apiKeyId"] == r.api_key_id.as_str())
        .unwrap();
    assert!(
        first["lastUsedUtc"].as_i64().is_some(),
        "lastUsedUtc is kept: {first}"
    );
    let revoke = app
        .http
        .delete(app.url(&format!(
            "/v1/billing/resellers/me/api-keys/{}",
            r.api_key_id
        )))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 204);
    assert_eq!(
        ok(&app, &r.secret).await.unwrap().status(),
        401,
        "revocation acts on the next request"
    );
    assert_eq!(ok(&app, &second_secret).await.unwrap().status(), 200);
    app.stop().await;
}

/// A request with refused credentials is the empty 401 even when its body or a parameter does
/// not parse (which good credentials get a 400 for), on every authenticated API; nothing moves.
async fn refused_credentials_are_the_empty_401_even_when_the_request_does_not_parse(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 5).await;
    let wrong = Reseller {
        secret: format!("{}x", r.secret),
        ..r.clone()
    };
    let licenses = app.url("/v1/billing/partner/licenses");
    let basic = |who: &Reseller| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", who.client_id, who.secret))
        )
    };
    for (who, expect_401) in [(&wrong, true), (&r, false)] {
        let unparsed_body = app
            .http
            .post(&licenses)
            .header("X-Client-Id", &who.client_id)
            .header("X-Client-Secret", &who.secret)
            .header("Content-Type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        let not_json = app
            .http
            .post(app.url("/v1/billing/partner/promo-codes/void"))
            .header("Authorization", basic(who))
            .header("Content-Type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap();
        let unparsed_limit = app
            .http
            .get(format!("{licenses}?limit=abc"))
            .header("X-Client-Id", &who.client_id)
            .header("X-Client-Secret", &who.secret)
            .send()
            .await
            .unwrap();
        // Over the 16 KiB body limit: refused before it is read.
        let too_large = app
            .http
            .post(&licenses)
            .header("X-Client-Id", &who.client_id)
            .header("X-Client-Secret", &who.secret)
            .header("Content-Type", "application/json")
            .body(format!(r#"{{"planSlug":"{}"}}"#, "p".repeat(17 * 1024)))
            .send()
            .await
            .unwrap();
        for (what, response) in [
            ("a body that is not JSON", unparsed_body),
            ("a body that is not a JSON type", not_json),
            ("a limit that is not a number", unparsed_limit),
            ("a body over the limit", too_large),
        ] {
            if expect_401 {
                expect_empty_401(what, response).await;
            } else {
                assert!(
                    matches!(response.status().as_u16(), 400 | 413 | 415),
                    "{what}: {}",
                    response.status()
                );
            }
        }
    }

    // The product API's token and the panel's session, likewise.
    let token = app.operator_token("backend").await;
    for (bearer, method, path, expect_401) in [
        (
            format!("{token}x"),
            Method::POST,
            "/v1/billing/product/users",
            true,
        ),
        (
            token.clone(),
            Method::POST,
            "/v1/billing/product/users",
            false,
        ),
        (
            "rps_not-a-session".to_owned(),
            Method::PUT,
            "/v1/billing/resellers/me/password",
            true,
        ),
    ] {
        let response = app
            .http
            .request(method, app.url(path))
            .bearer_auth(&bearer)
            .header("Content-Type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        if expect_401 {
            expect_empty_401(path, response).await;
        } else {
            assert_eq!(response.status(), 400, "{path}");
        }
    }
    assert_eq!(app.balance(&r, "pro").await, Some(5));
    app.stop().await;
}

async fn both_credential_forms_authenticate(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", 2).await;
    let via_headers = app.partner(Method::GET, BALANCES, &r).send().await.unwrap();
    assert_eq!(via_headers.status(), 200);
    let via_basic = app
        .http
        .get(app.url(BALANCES))
        .header("Authorization", basic(&r.client_id, &r.secret))
        .send()
        .await
        .unwrap();
    assert_eq!(via_basic.status(), 200);
    let body: serde_json::Value = via_basic.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"balances":[{"productSlug":"pro","remainingBalance":2}]})
    );
    app.stop().await;
}

/// docs/design.md: `lastUsedUtc` moves at most once a minute per key; a panel session lasts 12 hours.
async fn last_used_is_written_once_a_minute_and_sessions_last_twelve_hours(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let last_used = || async {
        let keys: serde_json::Value = app
            .http
            .get(app.url("/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        keys["apiKeys"][0]["lastUsedUtc"].clone()
    };
    assert!(last_used().await.is_null(), "never used yet");
    let call = || app.partner(Method::GET, BALANCES, &r).send();
    assert_eq!(call().await.unwrap().status(), 200);
    let first = last_used().await.as_i64().expect("written on first use");
    app.store.clock().advance(30);
    assert_eq!(call().await.unwrap().status(), 200);
    assert_eq!(
        last_used().await.as_i64(),
        Some(first),
        "not rewritten within the minute"
    );
    app.store.clock().advance(31);
    assert_eq!(call().await.unwrap().status(), 200);
    let later = last_used().await.as_i64().unwrap();
    assert!(
        later >= first + 60,
        "rewritten after a minute: {first} -> {later}"
    );

    // The session from above is 61 s old: still valid until 12 hours have passed, as long as
    // it is used at least once an hour (it ends after an hour idle).
    let me = |token: &str| {
        app.http
            .get(app.url("/v1/billing/resellers/me"))
            .bearer_auth(token.to_owned())
            .send()
    };
    let mut left = 12 * 3600 - 61 - 5;
    while left > 0 {
        let step = left.min(50 * 60);
        app.store.clock().advance(step);
        left -= step;
        assert_eq!(me(&token).await.unwrap().status(), 200);
    }
    app.store.clock().advance(10);
    let expired = me(&token).await.unwrap();
    expect_empty_401("an expired panel session", expired).await;
    app.stop().await;
}

/// Key checks that arrive together are read together (one statement for the keys queued at
/// that moment): each caller still gets its own account's answer, and a revoked key, a
/// suspended account or another account's client id mixed in among valid ones still gets the
/// empty 401, on reads and on writes.
async fn concurrent_key_checks_each_answer_their_own_caller(db: Db) {
    let app = TestApp::spawn(&db).await;
    // Thirty-day licenses: a login may hold several at once.
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let mut valid = Vec::new();
    for i in 0..6 {
        let r = app.reseller().await;
        // A balance unique to each account: a crossed answer shows.
        app.credit(&r, "pro", 1000 * (i + 1)).await;
        valid.push(r);
    }
    let revoked = app.reseller().await;
    app.credit(&revoked, "pro", 50).await;
    revoke_own_key(&app, &revoked).await;
    let suspended = app.reseller().await;
    app.credit(&suspended, "pro", 60).await;
    suspend(&app, &suspended).await;
    // A valid secret presented with another account's client id.
    let crossed = Reseller {
        client_id: valid[1].client_id.clone(),
        ..valid[0].clone()
    };

    const ROUNDS: usize = 20;
    let mut calls = Vec::new();
    for round in 0..ROUNDS {
        for (i, r) in valid.iter().enumerate() {
            let http = app.http.clone();
            let url = app.base_url.clone();
            let r = r.clone();
            // Every other round, a write: the license is charged to the key's own account.
            let write = round % 2 == 1;
            calls.push(tokio::spawn(async move {
                let response = if write {
                    partner_billing_tests::partner_request(
                        &http,
                        &url,
                        Method::POST,
                        "/v1/billing/partner/licenses",
                        &r,
                    )
                    .json(&json!({
                        "planSlug": "pro",
                        "login": "alice",
                        "idempotencyKey": format!("order-{round:04}-{i:04}"),
                    }))
                    .send()
                    .await
                } else {
                    partner_billing_tests::partner_request(&http, &url, Method::GET, BALANCES, &r)
                        .send()
                        .await
                };
                (Some(i), write, response.unwrap())
            }));
        }
        for r in [&revoked, &suspended, &crossed] {
            let request = partner_billing_tests::partner_request(
                &app.http,
                &app.base_url,
                Method::GET,
                BALANCES,
                r,
            );
            calls.push(tokio::spawn(async move {
                (None, false, request.send().await.unwrap())
            }));
        }
    }
    let mut reads = 0;
    for call in calls {
        let (who, write, response) = call.await.unwrap();
        let Some(i) = who else {
            expect_empty_401("a refused key among valid ones", response).await;
            continue;
        };
        assert_eq!(response.status(), 200, "account {i}, write {write}");
        let body: Value = response.json().await.unwrap();
        if !write {
            reads += 1;
            // The balance at the time of the read: the account's own credit less what its
            // writes have charged so far (at most ROUNDS / 2).
            let remaining = body["balances"][0]["remainingBalance"].as_i64().unwrap();
            let credit = 1000 * (i as i64 + 1);
            assert!(
                (credit - ROUNDS as i64 / 2..=credit).contains(&remaining),
                "account {i} read {remaining}, its own credit is {credit}: {body}"
            );
        }
    }
    assert_eq!(reads, valid.len() * ROUNDS / 2);
    for (i, r) in valid.iter().enumerate() {
        assert_eq!(
            app.balance(r, "pro").await,
            Some(1000 * (i as i64 + 1) - ROUNDS as i64 / 2),
            "account {i} was charged for its own licenses only"
        );
    }
    assert_eq!(app.balance(&revoked, "pro").await, Some(50));
    assert_eq!(app.balance(&suspended, "pro").await, Some(60));
    app.stop().await;
}

/// Operator token checks that arrive together are read in one statement, as key checks are:
/// each caller gets its own token's answer (an active token 200, a revoked or unknown one the
/// empty 401), however the statement's rows were ordered.
async fn concurrent_operator_token_checks_each_answer_their_own_caller(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.user("alice").await;
    let mut tokens = Vec::new();
    for i in 0..4 {
        tokens.push((app.operator_token(&format!("backend-{i}")).await, true));
    }
    let revoked = app.operator_token("revoked").await;
    partner_billing::operators::revoke_operator_token(
        &app.store,
        "revoked",
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    tokens.push((revoked, false));
    // The shape of a token, but no token's secret.
    let mut unknown = tokens[0].0.clone();
    let last = if unknown.ends_with('a') { "b" } else { "a" };
    unknown.replace_range(unknown.len() - 1.., last);
    tokens.push((unknown, false));

    let mut calls = Vec::new();
    for _ in 0..20 {
        for (token, active) in &tokens {
            let request = app.product(
                Method::GET,
                "/v1/billing/product/users/alice/entitlements",
                token,
            );
            let active = *active;
            calls.push(tokio::spawn(async move {
                (active, request.send().await.unwrap().status().as_u16())
            }));
        }
    }
    for call in calls {
        let (active, status) = call.await.unwrap();
        assert_eq!(status, if active { 200 } else { 401 });
    }
    app.stop().await;
}
