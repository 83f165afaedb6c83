//! The product API's door and its lookups: operator tokens (one empty 401 for every other
//! credential, revocation on the next request), browsers refused, login registration, and the
//! license listing with direct and redeemed licenses.

use base64::Engine;
use partner_billing::domain::Secret;
use partner_billing::operators;
use partner_billing_client::{Error, ProductClient};
use partner_billing_tests::{Db, TestApp, both_databases, expect_empty_401};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    users_register_idempotently,
    every_rejection_is_the_same_empty_401,
    revoked_operator_token_is_refused_on_the_next_request,
    browser_requests_are_refused,
    listing_shows_direct_and_redeemed_licenses,
);

const USERS: &str = "/v1/billing/product/users";

fn licenses_path(login: &str) -> String {
    format!("{USERS}/{login}/licenses")
}

async fn users_register_idempotently(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let register = |body: Value| app.product(Method::POST, USERS, &token).json(&body).send();
    let first = register(json!({"login": "alice@example.com"}))
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let user: Value = first.json().await.unwrap();
    let mut keys: Vec<&String> = user.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["createdUtc", "login"]);
    assert_eq!(user["login"], "alice@example.com");
    app.store.clock().advance(10);
    let again = register(json!({"login": "alice@example.com"}))
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        user,
        "the first registration"
    );

    for (body, field) in [
        (json!({"login": ""}), "login"),
        (json!({"login": "a\u{7}b"}), "login"),
        (json!({"login": "x".repeat(255)}), "login"),
        (json!({}), "login"),
        (json!({"login": "bob", "admin": true}), "admin"),
    ] {
        let response = register(body.clone()).await.unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Request.ValidationFailed");
        assert_eq!(problem["field"], field, "{body}");
    }

    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let registration = sdk.register_user("bob").await.unwrap();
    assert!(registration.created);
    assert_eq!(registration.user.login, "bob");
    let again = sdk.register_user("bob").await.unwrap();
    assert!(!again.created);
    assert_eq!(again.user, registration.user);
    app.stop().await;
}

async fn every_rejection_is_the_same_empty_401(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let r = app.reseller().await;
    let session = app.session(&r.client_id, &r.password).await;
    app.user("alice").await;
    let url = app.url(&licenses_path("alice"));
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", r.client_id, r.secret));
    let unknown_token = format!("rso_{}", "A".repeat(43));
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("no credentials", app.http.get(&url)),
        ("garbage bearer", app.http.get(&url).bearer_auth("garbage")),
        (
            "unknown operator token",
            app.http.get(&url).bearer_auth(&unknown_token),
        ),
        (
            "reseller API key in the dedicated headers",
            app.http
                .get(&url)
                .header("X-Client-Id", &r.client_id)
                .header("X-Client-Secret", &r.secret),
        ),
        (
            "reseller API key as HTTP Basic",
            app.http
                .get(&url)
                .header("Authorization", format!("Basic {basic}")),
        ),
        (
            "reseller secret as bearer",
            app.http.get(&url).bearer_auth(&r.secret),
        ),
        ("panel session", app.http.get(&url).bearer_auth(&session)),
        (
            "operator token as HTTP Basic",
            app.http.get(&url).basic_auth("operator", Some(&token)),
        ),
        (
            "operator token with a stray suffix",
            app.http.get(&url).bearer_auth(format!("{token}x")),
        ),
    ];
    let mut shapes = Vec::new();
    for (what, request) in cases {
        shapes.push((
            what,
            expect_empty_401(what, request.send().await.unwrap()).await,
        ));
    }
    for (what, headers) in &shapes {
        assert_eq!(headers, &shapes[0].1, "{what} differs from {}", shapes[0].0);
    }
    // A reseller key cannot redeem either, and nothing happens.
    let (_, codes) = {
        app.plan("pro").await;
        app.credit(&r, "pro", 1).await;
        app.promo_batch(&r, "pro", 1).await
    };
    let response = app
        .partner(Method::POST, "/v1/billing/product/promo-redemptions", &r)
        .json(&json!({"code": codes[0], "login": "alice", "idempotencyKey": "with-api-key"}))
        .send()
        .await
        .unwrap();
    expect_empty_401("redemption with an API key", response).await;
    let licenses = app
        .product(Method::GET, &licenses_path("alice"), &token)
        .send()
        .await
        .unwrap();
    assert_eq!(licenses.status(), 200);
    assert_eq!(
        licenses.json::<Value>().await.unwrap()["licenses"],
        json!([])
    );
    app.stop().await;
}

async fn revoked_operator_token_is_refused_on_the_next_request(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let created = operators::create_operator_token(
        &app.store,
        "backend",
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert!(
        created
            .token
            .has_shape(partner_billing::domain::SecretKind::OperatorToken)
    );
    assert!(!format!("{created:?}").contains(created.token.expose()));
    let token = created.token.expose().to_owned();
    let spare = app.operator_token("backend-2").await;
    app.user("alice").await;
    let path = licenses_path("alice");
    for server in [&app, &replica] {
        let response = server
            .product(Method::GET, &path, &token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // Stored only as its SHA-256.
    let hashes: Vec<String> = sqlx::query_scalar("SELECT token_hash FROM operator_tokens")
        .fetch_all(app.store.pool())
        .await
        .unwrap();
    assert!(hashes.contains(&Secret::from_presented(token.clone()).hash()));
    assert!(
        hashes
            .iter()
            .all(|h| !h.contains(&token) && !h.contains(&spare))
    );

    operators::revoke_operator_token(
        &app.store,
        "backend",
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    for server in [&app, &replica] {
        let response = server
            .product(Method::GET, &path, &token)
            .send()
            .await
            .unwrap();
        expect_empty_401("revoked token", response).await;
        let response = server
            .product(Method::GET, &path, &spare)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "the other token keeps working");
    }
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let error = sdk.user_licenses("alice").await.unwrap_err();
    assert!(matches!(error, Error::Unauthorized), "{error}");
    assert!(!error.to_string().contains(&token));

    let listed = operators::list_operator_tokens(&app.store).await.unwrap();
    let states: Vec<(&str, &str, bool)> = listed
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.status.as_str(),
                t.last_used_utc.is_some(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("backend", "revoked", true), ("backend-2", "active", true)]
    );
    assert!(listed[0].revoked_utc.is_some());
    operators::revoke_operator_token(
        &app.store,
        "backend",
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert!(matches!(
        operators::revoke_operator_token(
            &app.store,
            "nobody",
            &partner_billing::audit::Origin::cli()
        )
        .await,
        Err(partner_billing::Error::NotFound(_))
    ));
    assert!(matches!(
        operators::create_operator_token(
            &app.store,
            "backend",
            &partner_billing::audit::Origin::cli()
        )
        .await,
        Err(partner_billing::Error::AlreadyExists(_))
    ));
    replica.stop().await;
    app.stop().await;
}

async fn browser_requests_are_refused(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    for (name, value) in [
        ("Origin", "https://shop.example.com"),
        ("Sec-Fetch-Site", "same-origin"),
    ] {
        let response = app
            .product(Method::POST, USERS, &token)
            .header(name, value)
            .json(&json!({"login": "alice"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{name}");
        assert!(
            response
                .headers()
                .keys()
                .all(|h| !h.as_str().starts_with("access-control-"))
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Request.BrowserOriginForbidden");
    }
    let registered: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(registered, 0, "nothing registered");
    app.stop().await;
}

async fn listing_shows_direct_and_redeemed_licenses(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let direct_seller = app.reseller().await;
    let promo_seller = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan("basic").await;
    app.credit(&direct_seller, "pro", 5).await;
    app.credit(&promo_seller, "basic", 5).await;
    sdk.register_user("alice@example.com").await.unwrap();

    let direct = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &direct_seller)
        .json(&json!({"planSlug": "pro", "login": "alice@example.com", "idempotencyKey": "direct-0001"}))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    let direct: Value = direct.json().await.unwrap();
    app.store.clock().advance(5);
    let (batch_id, codes) = app.promo_batch(&promo_seller, "basic", 2).await;
    let redeemed = sdk
        .redeem_promo_code(&codes[0], "alice@example.com", None)
        .await
        .unwrap();

    let listed = sdk.user_licenses("alice@example.com").await.unwrap();
    assert_eq!(listed.login, "alice@example.com");
    assert_eq!(listed.licenses.len(), 2);
    let first = &listed.licenses[0];
    assert_eq!(first.license_id, direct["licenseId"].as_str().unwrap());
    assert_eq!(
        (first.source.as_str(), first.plan_slug.as_str()),
        ("direct", "pro")
    );
    assert_eq!(
        first.client_id.as_deref(),
        Some(direct_seller.client_id.as_str())
    );
    assert_eq!(first.batch_id, None);
    assert_eq!(first.created_utc, direct["createdUtc"].as_i64().unwrap());
    assert_eq!(first.expires_utc, Some(first.created_utc + 30 * 86_400));
    let second = &listed.licenses[1];
    assert_eq!(second.license_id, redeemed.value.license_id);
    assert_eq!(
        (second.source.as_str(), second.plan_slug.as_str()),
        ("promo", "basic")
    );
    assert_eq!(
        second.client_id.as_deref(),
        Some(promo_seller.client_id.as_str())
    );
    assert_eq!(second.batch_id.as_deref(), Some(batch_id.as_str()));
    assert_eq!(second.created_utc, redeemed.value.created_utc);
    assert_eq!(second.expires_utc, None);

    // The raw shape, with nulls sent explicitly.
    let raw = app
        .product(Method::GET, &licenses_path("alice@example.com"), &token)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let raw: Value = raw.json().await.unwrap();
    let mut keys: Vec<&String> = raw["licenses"][0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "batchId",
            "clientId",
            "createdUtc",
            "expiresUtc",
            "licenseId",
            "planSlug",
            "revokedUtc",
            "source",
            "startsUtc"
        ]
    );
    assert!(raw["licenses"][0]["batchId"].is_null());

    // A login that needs percent-encoding, and one never registered.
    let odd = "bob smith/ü?#%";
    sdk.register_user(odd).await.unwrap();
    let none = sdk.user_licenses(odd).await.unwrap();
    assert_eq!((none.login.as_str(), none.licenses.len()), (odd, 0));
    let error = sdk.user_licenses("carol").await.unwrap_err();
    assert!(matches!(error, Error::UnknownLogin { .. }), "{error}");

    // Each reseller paid once, for its own purchase; redemption charged nothing.
    assert_eq!(app.balance(&direct_seller, "pro").await, Some(4));
    assert_eq!(app.balance(&promo_seller, "basic").await, Some(3));
    app.assert_audit_clean().await;
    app.stop().await;
}
