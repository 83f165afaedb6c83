//! Disagreements between the published document and the server that contract fuzzing
//! (`.ci/schemathesis`) found, pinned: what the document declares is what the server enforces.

use partner_billing_tests::{Db, TestApp, both_databases, expect_empty_401};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    listing_licenses_refuses_a_login_out_of_its_declared_bounds,
    panel_login_refuses_values_out_of_their_declared_bounds,
);

async fn expect_validation_failed(what: &str, response: reqwest::Response, field: &str) {
    assert_eq!(response.status(), 400, "{what}");
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "Request.ValidationFailed", "{what}");
    assert_eq!(problem["field"], field, "{what}");
}

/// `GET /v1/billing/product/users/{login}/licenses`: the path parameter is declared as 1–254
/// characters without control characters (it was undeclared, so a schema-valid login of 255
/// characters got a 400).
async fn listing_licenses_refuses_a_login_out_of_its_declared_bounds(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let longest = "x".repeat(254);
    app.user(&longest).await;
    let list = |login: String| {
        app.product(
            Method::GET,
            &format!("/v1/billing/product/users/{login}/licenses"),
            &token,
        )
        .send()
    };
    let response = list(longest.clone()).await.unwrap();
    assert_eq!(response.status(), 200, "254 characters");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["login"], longest.as_str());
    let unknown = list("y".repeat(254)).await.unwrap();
    assert_eq!(unknown.status(), 422, "a well-formed unknown login");
    for (what, login) in [
        ("255 characters", "x".repeat(255)),
        ("a control character", "a%07b".to_owned()),
        ("a C1 control character", "a%C2%9Bb".to_owned()),
    ] {
        expect_validation_failed(what, list(login).await.unwrap(), "login").await;
    }
    app.stop().await;
}

/// `POST /v1/billing/resellers/sessions`: `clientId` is declared with `maxLength: 64` and
/// `password` with `maxLength: 1024`; longer values are malformed (400), not a failed login
/// (they were an empty 401).
async fn panel_login_refuses_values_out_of_their_declared_bounds(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let login = |client_id: String, password: String| {
        app.http
            .post(app.url("/v1/billing/resellers/sessions"))
            .json(&json!({"clientId": client_id, "password": password}))
            .send()
    };
    let response = login("c".repeat(65), r.password.clone()).await.unwrap();
    expect_validation_failed("a 65-character client id", response, "clientId").await;
    let response = login(r.client_id.clone(), "p".repeat(1025)).await.unwrap();
    expect_validation_failed("a 1025-character password", response, "password").await;
    // Multibyte characters count once: 64 and 1024 characters are within bounds.
    let response = login("é".repeat(64), "p".repeat(10)).await.unwrap();
    expect_empty_401("an unknown 64-character client id", response).await;
    let response = login(r.client_id.clone(), "ü".repeat(1024)).await.unwrap();
    expect_empty_401("a wrong 1024-character password", response).await;
    let response = login(r.client_id.clone(), r.password.clone())
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "the right password");
    app.stop().await;
}
