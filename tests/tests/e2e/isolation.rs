//! Tenants never touch each other: an idempotency key is scoped to its account, a replay never
//! returns another account's codes, nothing in a body selects the charged account, and every
//! endpoint called with account B's credentials against account A's resources answers 401 or
//! 404 and leaves A exactly as it was.

use base64::Engine as _;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Row as _;

both_databases!(
    idempotency_keys_and_batches_are_per_account,
    every_endpoint_with_another_accounts_credentials
);

/// Everything the database holds about one account, as text: its standing, keys (with their
/// last use), sessions, balances, ledger, licenses, batches and idempotency records. Each
/// query names its one column `state`.
async fn account_state(app: &TestApp, r: &Reseller) -> Vec<String> {
    let queries = [
        "SELECT a.standing || '|' || a.name || '|' || a.password_hash AS state \
         FROM accounts a WHERE a.id = $1",
        "SELECT k.api_key_id || '|' || k.status || '|' || COALESCE(CAST(k.last_used_utc AS TEXT), '-') \
         || '|' || COALESCE(k.name, '-') AS state FROM api_keys k WHERE k.account_id = $1 ORDER BY k.api_key_id",
        "SELECT CAST(COUNT(*) AS TEXT) AS state FROM panel_sessions WHERE account_id = $1",
        "SELECT CAST(plan_id AS TEXT) || '|' || CAST(remaining AS TEXT) AS state FROM balances \
         WHERE account_id = $1 ORDER BY plan_id",
        "SELECT CAST(COUNT(*) AS TEXT) AS state FROM ledger_entries WHERE account_id = $1",
        "SELECT CAST(COUNT(*) AS TEXT) AS state FROM licenses WHERE account_id = $1",
        "SELECT batch_id AS state FROM promo_batches WHERE account_id = $1 ORDER BY batch_id",
        "SELECT idempotency_key || '|' || response_body AS state FROM idempotency_records \
         WHERE account_id = $1 ORDER BY idempotency_key",
    ];
    let account_id: i64 = sqlx::query("SELECT id FROM accounts WHERE client_id = $1")
        .bind(&r.client_id)
        .fetch_one(app.store.pool())
        .await
        .unwrap()
        .get("id");
    let mut state = Vec::new();
    for query in queries {
        let rows = sqlx::query(query)
            .bind(account_id)
            .fetch_all(app.store.pool())
            .await
            .unwrap();
        state.extend(rows.iter().map(|row| row.get::<String, _>("state")));
    }
    state
}

/// Sends `method path` with exactly `headers` and an optional JSON body.
async fn call(
    app: &TestApp,
    method: &Method,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&Value>,
) -> reqwest::Response {
    let mut request = app.http.request(method.clone(), app.url(path));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.unwrap()
}

/// B's credentials, alone or mixed with A's, on every endpoint, aimed at A's key, A's
/// idempotency keys, A's batch and A's plan: each answer is 401 or 404 (or, where B acts on
/// B's own account, that answer), and A's state is unchanged.
async fn every_endpoint_with_another_accounts_credentials(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = app.reseller().await;
    let b = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("only-a", Some(30)).await;
    app.user("alice").await;
    app.credit(&a, "pro", 10).await;
    app.credit(&a, "only-a", 5).await;
    app.credit(&b, "pro", 10).await;
    let license_a = json!({"planSlug":"only-a","login":"alice","idempotencyKey":"a-license-0001"});
    let batch_a = json!({"planSlug":"only-a","count":2,"idempotencyKey":"a-batch-0001"});
    for (path, body) in [
        ("/v1/billing/partner/licenses", &license_a),
        ("/v1/billing/partner/promo-batches", &batch_a),
    ] {
        let response = app
            .partner(Method::POST, path, &a)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let session_b = app.session(&b.client_id, &b.password).await;
    let before = account_state(&app, &a).await;

    let basic = |user: &str, secret: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"))
        )
    };
    // Credentials that mix A's and B's parts, or use B's in the wrong place.
    let partner_credentials: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "A's client id with B's secret",
            vec![
                ("X-Client-Id", a.client_id.clone()),
                ("X-Client-Secret", b.secret.clone()),
            ],
        ),
        (
            "B's client id with A's secret",
            vec![
                ("X-Client-Id", b.client_id.clone()),
                ("X-Client-Secret", a.secret.clone()),
            ],
        ),
        (
            "Basic A:B's secret",
            vec![("Authorization", basic(&a.client_id, &b.secret))],
        ),
        (
            "Basic B:A's secret",
            vec![("Authorization", basic(&b.client_id, &a.secret))],
        ),
        (
            "B's panel session as an API key",
            vec![("Authorization", format!("Bearer {session_b}"))],
        ),
    ];
    let partner_calls = [
        (Method::GET, "/v1/billing/partner/balances", None),
        (
            Method::POST,
            "/v1/billing/partner/licenses",
            Some(license_a.clone()),
        ),
        (
            Method::POST,
            "/v1/billing/partner/promo-batches",
            Some(batch_a.clone()),
        ),
    ];
    for (what, headers) in &partner_credentials {
        for (method, path, body) in &partner_calls {
            let response = call(&app, method, path, headers, body.as_ref()).await;
            assert_eq!(response.status(), 401, "{what} on {method} {path}");
        }
    }

    // B's own key, aimed at A's idempotency keys and A's plan: B's own outcome or 402, never
    // A's stored answer and never A's quota.
    for (path, body) in [
        ("/v1/billing/partner/licenses", &license_a),
        ("/v1/billing/partner/promo-batches", &batch_a),
    ] {
        let response = app
            .partner(Method::POST, path, &b)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 402, "B holds no only-a quota: {path}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Reseller.InsufficientQuota");
    }

    // The panel: B's session against A's key, and sessions from mixed credentials.
    let revoke = app
        .http
        .delete(app.url(&format!(
            "/v1/billing/resellers/me/api-keys/{}",
            a.api_key_id
        )))
        .bearer_auth(&session_b)
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 404, "A's key is not found for B");
    for panel_credential in [
        format!("Bearer {}", b.secret),
        basic(&b.client_id, &b.password),
        basic(&a.client_id, &b.password),
    ] {
        for (method, path) in [
            (Method::GET, "/v1/billing/resellers/me".to_owned()),
            (Method::GET, "/v1/billing/resellers/me/api-keys".to_owned()),
            (Method::POST, "/v1/billing/resellers/me/api-keys".to_owned()),
            (
                Method::DELETE,
                format!("/v1/billing/resellers/me/api-keys/{}", a.api_key_id),
            ),
        ] {
            let headers = [("Authorization", panel_credential.clone())];
            let response = call(&app, &method, &path, &headers, None).await;
            // API-key-shaped credentials on the panel: 403 PanelSessionRequired (docs/design.md),
            // before any lookup.
            assert_eq!(response.status(), 403, "{method} {path}");
            let problem: Value = response.json().await.unwrap();
            assert_eq!(problem["code"], "Reseller.PanelSessionRequired");
        }
    }
    let login_as_a = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .json(&json!({"clientId": a.client_id, "password": b.password}))
        .send()
        .await
        .unwrap();
    assert_eq!(login_as_a.status(), 401, "B's password does not open A");
    let me: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me"))
        .bearer_auth(&session_b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["clientId"], b.client_id.as_str(), "B's session is B");
    let keys_b: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&session_b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        !keys_b.to_string().contains(&a.api_key_id),
        "B's list never shows A's key"
    );

    // The product API: no reseller credential of B's opens it.
    for credential in [
        format!("Bearer {session_b}"),
        format!("Bearer {}", b.secret),
        basic(&b.client_id, &b.secret),
    ] {
        for (method, path, body) in [
            (
                Method::POST,
                "/v1/billing/product/users",
                Some(json!({"login":"mallory"})),
            ),
            (
                Method::POST,
                "/v1/billing/product/promo-redemptions",
                Some(
                    json!({"code":"AAAA-AAAA-AAAA-AAAA","login":"alice","idempotencyKey":"steal-0001"}),
                ),
            ),
            (
                Method::GET,
                "/v1/billing/product/users/alice/licenses",
                None,
            ),
        ] {
            let headers = [("Authorization", credential.clone())];
            let response = call(&app, &method, path, &headers, body.as_ref()).await;
            assert_eq!(response.status(), 401, "{method} {path}");
        }
    }

    assert_eq!(
        account_state(&app, &a).await,
        before,
        "nothing of A changed"
    );
    // A's own credentials still work and see A's untouched balance.
    let balances_a: Value = app
        .partner(Method::GET, "/v1/billing/partner/balances", &a)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(balances_a.to_string().contains("\"remainingBalance\":2"));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn idempotency_keys_and_batches_are_per_account(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = app.reseller().await;
    let b = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("only-a", Some(30)).await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&a, "pro", 10).await;
    app.credit(&a, "only-a", 1).await;
    app.credit(&b, "pro", 10).await;

    // The same key and body from two accounts: two batches, each charged to its own account.
    let body = json!({"planSlug":"pro","count":3,"idempotencyKey":"shared-key-0001"});
    let send = |r, body: &Value| {
        app.partner(Method::POST, "/v1/billing/partner/promo-batches", r)
            .json(body)
            .send()
    };
    let batch_a: Value = send(&a, &body).await.unwrap().json().await.unwrap();
    let response_b = send(&b, &body).await.unwrap();
    assert_eq!(response_b.status(), 200);
    assert!(
        response_b.headers().get("idempotent-replayed").is_none(),
        "B's request is not A's replay"
    );
    let batch_b: Value = response_b.json().await.unwrap();
    assert_ne!(batch_a["batchId"], batch_b["batchId"]);
    assert_ne!(batch_a["codes"], batch_b["codes"], "B never sees A's codes");
    assert_eq!(app.balance(&a, "pro").await, Some(7));
    assert_eq!(app.balance(&b, "pro").await, Some(7));
    // Each replay returns its own account's batch.
    assert_eq!(
        send(&a, &body)
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
        batch_a
    );
    assert_eq!(
        send(&b, &body)
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
        batch_b
    );

    // A key A used for a batch is free for B to use for a license, and vice versa.
    let license = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &b)
        .json(&json!({"planSlug":"pro","login":"bob","idempotencyKey":"shared-key-0001-x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(license.status(), 200);
    let reuse_by_a = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &a)
        .json(&json!({"planSlug":"pro","login":"alice","idempotencyKey":"shared-key-0001-x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reuse_by_a.status(), 200, "B's key does not bind A");
    assert_eq!(app.balance(&a, "pro").await, Some(6));
    assert_eq!(app.balance(&b, "pro").await, Some(6));

    // Balances are the caller's own.
    let balances_b: Value = app
        .partner(Method::GET, "/v1/billing/partner/balances", &b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        balances_b,
        json!({"balances":[{"productSlug":"pro","remainingBalance":6}]})
    );

    // B cannot spend A's quota on a plan only A holds, whatever the body says.
    for extra in [json!({"clientId": a.client_id}), json!({"accountId": 1})] {
        let mut body =
            json!({"planSlug":"only-a","login":"bob","idempotencyKey":"steal-attempt-1"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = app
            .partner(Method::POST, "/v1/billing/partner/licenses", &b)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
    }
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &b)
        .json(&json!({"planSlug":"only-a","login":"bob","idempotencyKey":"steal-attempt-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 402, "B holds no only-a quota");
    assert_eq!(app.balance(&a, "only-a").await, Some(1));
    app.assert_audit_clean().await;
    app.stop().await;
}
