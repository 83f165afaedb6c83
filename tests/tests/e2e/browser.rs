//! Browsers are refused before credentials are looked at; no response carries CORS headers.

use partner_billing_tests::{Db, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    browser_requests_are_refused_and_charge_nothing,
    no_response_carries_cors_headers
);

async fn browser_requests_are_refused_and_charge_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 3).await;
    for (i, (name, value)) in [
        ("Origin", "https://shop.example"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-origin"),
        ("Origin", "null"),
    ]
    .into_iter()
    .enumerate()
    {
        let response = app
            .partner(Method::POST, "/v1/billing/partner/licenses", &r)
            .header(name, value)
            .json(&json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("browser-{i:03}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{name}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Request.BrowserOriginForbidden");
        // Before credentials: even without any key the answer is 403, not 401.
        let anonymous = app
            .http
            .get(app.url("/v1/billing/partner/balances"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 403, "{name} without credentials");
    }
    assert_eq!(app.balance(&r, "pro").await, Some(3));
    // `Sec-Fetch-Mode` alone is no browser: Node.js's fetch sends it on every request.
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .header("Sec-Fetch-Mode", "cors")
        .json(&json!({"planSlug":"pro","login":"alice","idempotencyKey":"node-mode-only"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "Sec-Fetch-Mode alone");
    assert_eq!(app.balance(&r, "pro").await, Some(2));
    // The panel refuses cross-site requests.
    let response = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .header("Origin", "https://evil.example")
        .json(&json!({"clientId": r.client_id, "password": r.password}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let response = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .header("Sec-Fetch-Site", "cross-site")
        .json(&json!({"clientId": r.client_id, "password": r.password}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // `Sec-Fetch-Site: none` (a request made directly) passes, unless it names a foreign origin.
    for (origin, status) in [(None, 201), (Some("https://evil.example"), 403)] {
        let mut request = app
            .http
            .post(app.url("/v1/billing/resellers/sessions"))
            .header("Sec-Fetch-Site", "none");
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        let response = request
            .json(&json!({"clientId": r.client_id, "password": r.password}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            status,
            "Sec-Fetch-Site: none, Origin {origin:?}"
        );
    }
    app.stop().await;
}

async fn no_response_carries_cors_headers(db: Db) {
    let app = TestApp::spawn(&db).await;
    // A method a path does not take: 405 naming the ones it does.
    let trace = app
        .http
        .request(Method::TRACE, app.url("/v1/billing/partner/balances"))
        .send()
        .await
        .unwrap();
    assert_eq!(trace.status(), 405);
    assert_eq!(trace.headers()["allow"], "GET");
    let delete = app
        .http
        .delete(app.url("/v1/billing/resellers/me/api-keys"))
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 405);
    assert_eq!(delete.headers()["allow"], "GET, POST");
    // The panel's routes, the document and its UI too (RFC 9110: a 405 names what the path
    // takes); an id in the path matches its route's parameter.
    for (method, path, allow) in [
        (Method::DELETE, "/panel/ledger", "GET"),
        (Method::DELETE, "/panel/login", "GET, POST"),
        (
            Method::PUT,
            "/panel/licenses/5f0c7a2e-0000-4000-8000-000000000000/revoke",
            "POST",
        ),
        (
            Method::DELETE,
            "/panel/promo-batches/5f0c7a2e-0000-4000-8000-000000000000/void",
            "GET, POST",
        ),
        (Method::POST, "/openapi.json", "GET"),
        (Method::DELETE, "/docs", "GET"),
    ] {
        let response = app
            .http
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], allow, "{method} {path}");
    }
    // The document served, and the one Swagger UI embeds, both declare the secret header.
    for path in ["/openapi.json", "/docs"] {
        let text = app
            .http
            .get(app.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("X-Client-Secret"),
            "{path} lacks the ClientSecret scheme"
        );
    }
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let requests = vec![
        app.http.get(app.url("/healthz")),
        app.http.get(app.url("/openapi.json")),
        app.http.get(app.url("/docs")),
        app.http.get(app.url("/nope")),
        app.http
            .request(Method::OPTIONS, app.url("/v1/billing/partner/licenses"))
            .header("Origin", "https://x.example")
            .header("Access-Control-Request-Method", "POST"),
        app.http
            .request(Method::OPTIONS, app.url("/v1/billing/resellers/me")),
        app.http.get(app.url("/v1/billing/partner/balances")),
        app.partner(Method::GET, "/v1/billing/partner/balances", &r),
        app.partner(Method::GET, "/v1/billing/partner/balances", &r)
            .header("Origin", "https://x.example"),
        app.http
            .get(app.url("/v1/billing/resellers/me"))
            .bearer_auth(&token),
        app.http
            .get(app.url("/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&token),
    ];
    for request in requests {
        let response = request.send().await.unwrap();
        let cors: Vec<_> = response
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "{} carries {cors:?}", response.url());
    }
    app.stop().await;
}
