//! Disagreements between the published document and the server that contract fuzzing
//! (`.ci/schemathesis`) found, pinned: what the document declares is what the server enforces.
//!
//! Over 450 lines on purpose: one pinned disagreement per scenario, each spelling out the request
//! the fuzzer sent and the answer the document promises.

use partner_billing_tests::{Db, TestApp, both_databases, expect_empty_401};
use reqwest::Method;
use std::collections::BTreeSet;

use serde_json::{Value, json};

both_databases!(
    listing_licenses_refuses_a_login_out_of_its_declared_bounds,
    panel_login_refuses_values_out_of_their_declared_bounds,
    the_document_says_what_each_operation_returns,
    each_challenge_is_the_scheme_of_its_route,
    members_the_document_requires_are_always_sent,
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

async fn document(app: &TestApp) -> Value {
    let response = app.http.get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn statuses(doc: &Value, path: &str, method: &str) -> BTreeSet<String> {
    doc["paths"][path][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} has responses"))
        .keys()
        .cloned()
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Every string member is bounded (`maxLength`) or a closed set (`enum`); every array has
/// `maxItems` except the lists that grow with an account's history or a login's plans.
fn assert_bounded(schema_name: &str, name: &str, property: &Value) {
    match property["type"].as_str() {
        Some("string") => assert!(
            property["maxLength"].is_u64() || property["enum"].is_array(),
            "{schema_name}.{name} has no maxLength: {property}"
        ),
        Some("array") => {
            let unbounded = [
                ("ApiKeyList", "apiKeys"),
                ("Balances", "balances"),
                ("UserLicenses", "licenses"),
                // One entry per plan the login holds.
                ("Entitlements", "entitlements"),
            ];
            assert!(
                property["maxItems"].is_u64() || unbounded.contains(&(schema_name, name)),
                "{schema_name}.{name} has no maxItems"
            );
            if property["items"]["type"] == "string" {
                assert_bounded(schema_name, name, &property["items"]);
            }
        }
        Some("integer") => {
            let format = property["format"].as_str().unwrap_or_default();
            assert!(
                format == "int32" || format == "int64",
                "{schema_name}.{name}: {format}"
            );
            assert!(
                property["minimum"].is_number(),
                "{schema_name}.{name} has no minimum"
            );
        }
        _ => {}
    }
}

/// The published OpenAPI document as integrators and generators read it: per-operation errors
/// with an example each, `security: []` where no credential is taken, plain `application/json`,
/// standard formats, enums, bounds.
async fn the_document_says_what_each_operation_returns(db: Db) {
    let app = TestApp::spawn(&db).await;
    let doc = document(&app).await;
    let text = doc.to_string();
    assert!(
        !text.contains("charset=utf-8"),
        "plain application/json only"
    );
    assert!(!text.contains("\"uint"), "no uint formats");
    assert!(doc["servers"].as_array().is_some_and(|s| !s.is_empty()));

    for (path, method) in [
        ("/healthz", "get"),
        ("/v1/billing/resellers/sessions", "post"),
    ] {
        assert_eq!(doc["paths"][path][method]["security"], json!([]), "{path}");
    }
    // Each operation lists what it can answer, not one list for all.
    assert_eq!(
        statuses(&doc, "/healthz", "get"),
        set(&["200", "500", "503"])
    );
    assert_eq!(
        statuses(&doc, "/v1/billing/partner/balances", "get"),
        set(&["200", "401", "403", "500", "503"])
    );
    assert_eq!(
        statuses(&doc, "/v1/billing/partner/licenses", "post"),
        set(&[
            "200", "400", "401", "402", "403", "409", "413", "422", "429", "500", "503"
        ])
    );
    assert_eq!(
        statuses(
            &doc,
            "/v1/billing/resellers/me/api-keys/{apiKeyId}",
            "delete"
        ),
        set(&["204", "400", "401", "403", "404", "500", "503"])
    );
    let license_errors = &doc["paths"]["/v1/billing/partner/licenses"]["post"]["responses"];
    let conflict = &license_errors["409"];
    assert!(
        conflict["description"]
            .as_str()
            .unwrap()
            .contains("Reseller.RequestInProgress")
    );
    assert!(
        !conflict["description"]
            .as_str()
            .unwrap()
            .contains("ApiKeyLimitReached")
    );
    assert_eq!(
        license_errors["422"]["content"]["application/problem+json"]["examples"]
            .as_object()
            .unwrap()
            .len(),
        3,
        "one example per code: UnknownPlan, UnknownLogin, IdempotencyKeyReused"
    );
    let retry_429 = &license_errors["429"]["headers"]["Retry-After"]["description"];
    let retry_409 = &license_errors["409"]["headers"]["Retry-After"]["description"];
    assert_ne!(
        retry_429, retry_409,
        "Retry-After says what it means on each status"
    );

    // Every error response of every operation has an example per code, each of its status.
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let what = format!("{method} {path}");
            assert!(
                operation["security"].is_array(),
                "{what} declares its security"
            );
            for (status, response) in operation["responses"].as_object().unwrap() {
                assert!(
                    !response["description"]
                        .as_str()
                        .unwrap_or_default()
                        .is_empty(),
                    "{what} {status} has a description"
                );
                let media = &response["content"]["application/problem+json"];
                if status.starts_with('4') || status.starts_with('5') {
                    if status == "401" {
                        assert!(media.is_null(), "{what}: the 401 has no body");
                        continue;
                    }
                    let examples = media["examples"]
                        .as_object()
                        .unwrap_or_else(|| panic!("{what} {status} has examples"));
                    for example in examples.values() {
                        assert_eq!(example["value"]["status"].to_string(), *status, "{what}");
                    }
                }
                for media in response["content"].as_object().into_iter().flatten() {
                    assert!(
                        media.0 == "application/json" || media.0 == "application/problem+json",
                        "{what} {status}: {}",
                        media.0
                    );
                }
            }
        }
    }
    assert_eq!(operations, 31);

    let schemas = &doc["components"]["schemas"];
    let codes: Vec<&str> = schemas["Problem"]["properties"]["code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        codes.contains(&"Reseller.InsufficientQuota")
            && codes.len() == partner_billing::wire::ErrorCode::ALL.len(),
        "{codes:?}"
    );
    for (schema, member, values) in [
        (
            "ApiKeyInfo",
            "status",
            json!(["active", "revoked", "expired"]),
        ),
        ("ResellerAccount", "standing", json!(["good", "suspended"])),
        ("UserLicense", "source", json!(["direct", "promo"])),
        ("RedeemedLicense", "source", json!(["promo"])),
        ("WebhookEndpoint", "status", json!(["enabled", "disabled"])),
    ] {
        assert_eq!(
            schemas[schema]["properties"][member]["enum"], values,
            "{schema}.{member}"
        );
    }
    for (name, schema) in schemas.as_object().unwrap() {
        for (member, property) in schema["properties"].as_object().into_iter().flatten() {
            assert_bounded(name, member, property);
        }
    }
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let schema = &parameter["schema"];
                assert!(
                    schema["maxLength"].is_u64()
                        || (schema["minimum"].is_number() && schema["maximum"].is_number()),
                    "{parameter}"
                );
            }
        }
    }
    // Sent always, null when there is no value: required and nullable.
    let key = &schemas["ApiKeyInfo"];
    for member in ["name", "lastUsedUtc", "revokedUtc", "expiresUtc"] {
        assert!(
            key["required"].as_array().unwrap().contains(&json!(member)),
            "ApiKeyInfo.{member} is required"
        );
        assert_eq!(
            key["properties"][member]["nullable"], true,
            "ApiKeyInfo.{member}"
        );
    }
    // Sent only for some codes: optional.
    let problem = &schemas["Problem"];
    assert!(
        !problem["required"]
            .as_array()
            .unwrap()
            .contains(&json!("field"))
    );
    assert!(
        problem["required"]
            .as_array()
            .unwrap()
            .contains(&json!("requestId"))
    );
    assert_eq!(
        doc["paths"]["/v1/billing/partner/promo-batches"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/GeneratePromoBatchRequest"
    );
    assert_eq!(
        schemas["GeneratePromoBatchRequest"]["properties"]["count"]["maximum"],
        1000
    );
    assert_eq!(
        schemas["IssueLicenseRequest"]["properties"]["planSlug"]["maxLength"],
        64
    );
    assert_eq!(
        schemas["PromoBatch"]["properties"]["codes"]["maxItems"],
        1000
    );
    let docs_note = doc["info"]["description"].as_str().unwrap();
    assert!(
        docs_note.contains("Try it out") && docs_note.contains("curl"),
        "{docs_note}"
    );
    app.stop().await;
}

/// A 401 challenges with the scheme of its route: `Basic` where an API key goes, `Bearer` on
/// the panel and product APIs; the document says the same.
async fn each_challenge_is_the_scheme_of_its_route(db: Db) {
    let app = TestApp::spawn(&db).await;
    let doc = document(&app).await;
    for (path, method, template, challenge) in [
        (
            "/v1/billing/partner/balances",
            Method::GET,
            "/v1/billing/partner/balances",
            r#"Basic realm="partner-billing""#,
        ),
        (
            "/v1/billing/resellers/me",
            Method::GET,
            "/v1/billing/resellers/me",
            r#"Bearer realm="partner-billing""#,
        ),
        (
            "/v1/billing/resellers/me/api-keys/rsk_x",
            Method::DELETE,
            "/v1/billing/resellers/me/api-keys/{apiKeyId}",
            r#"Bearer realm="partner-billing""#,
        ),
        (
            "/v1/billing/product/users/alice/licenses",
            Method::GET,
            "/v1/billing/product/users/{login}/licenses",
            r#"Bearer realm="partner-billing""#,
        ),
    ] {
        let response = app
            .http
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        let headers = expect_empty_401(path, response).await;
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "www-authenticate" && v == challenge),
            "{path}: {headers:?}"
        );
        let declared = &doc["paths"][template][method.as_str().to_ascii_lowercase()]["responses"]["401"]
            ["headers"]["WWW-Authenticate"];
        assert_eq!(declared["required"], true, "{template}");
        assert_eq!(declared["schema"]["enum"], json!([challenge]), "{template}");
    }
    // A failed panel sign-in is the panel's 401.
    let response = app
        .http
        .post(app.url("/v1/billing/resellers/sessions"))
        .json(&json!({"clientId": "rsc_nobody", "password": "wrong password"}))
        .send()
        .await
        .unwrap();
    let headers = expect_empty_401("sign-in", response).await;
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "www-authenticate" && v.starts_with("Bearer ")),
        "{headers:?}"
    );
    app.stop().await;
}

/// What the document marks `required` is in the bytes the server sends, `null` included.
async fn members_the_document_requires_are_always_sent(db: Db) {
    let app = TestApp::spawn(&db).await;
    let doc = document(&app).await;
    let r = app.reseller().await;
    let session = app.session(&r.client_id, &r.password).await;
    let keys: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let required = doc["components"]["schemas"]["ApiKeyInfo"]["required"]
        .as_array()
        .unwrap()
        .clone();
    let key = &keys["apiKeys"][0];
    for member in &required {
        let member = member.as_str().unwrap();
        assert!(key.get(member).is_some(), "{member} is sent: {key}");
    }
    assert!(
        key["revokedUtc"].is_null() && key["expiresUtc"].is_null(),
        "{key}"
    );
    let account: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me"))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(account["standing"], "good");
    // A problem carries every required member, `requestId` included, and no optional one
    // it has no value for.
    let problem: Value = app
        .http
        .delete(app.url("/v1/billing/resellers/me/api-keys/rsk_unknown"))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for member in doc["components"]["schemas"]["Problem"]["required"]
        .as_array()
        .unwrap()
    {
        let member = member.as_str().unwrap();
        assert!(problem.get(member).is_some(), "{member}: {problem}");
    }
    assert!(problem.get("field").is_none(), "{problem}");
    app.stop().await;
}
