//! The committed OpenAPI document must match the code: integrators generate clients from it.

use std::path::PathBuf;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi/partner-billing.json")
}

#[test]
fn committed_openapi_document_matches_the_code() {
    let generated = partner_billing_server::openapi_document();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(committed_path(), &generated).expect("write openapi/partner-billing.json");
        return;
    }
    let committed = std::fs::read_to_string(committed_path()).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi/partner-billing.json is out of date with the code. Regenerate it with:\n\n    \
         UPDATE_OPENAPI=1 cargo test -p partner-billing-server --test openapi\n\n\
         (or: cargo run -p partner-billing-server -- --print-openapi > openapi/partner-billing.json)"
    );
}

#[test]
fn partner_operations_require_both_headers_or_basic() {
    let doc: serde_json::Value =
        serde_json::from_str(&partner_billing_server::openapi_document()).unwrap();
    let security = &doc["paths"]["/v1/billing/partner/licenses"]["post"]["security"];
    assert_eq!(
        security,
        &serde_json::json!([{"ClientId": [], "ClientSecret": []}, {"Basic": []}])
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["ClientSecret"]["name"],
        "X-Client-Secret"
    );
    assert_eq!(
        doc["components"]["schemas"]["License"]["properties"]["expiresUtc"]["nullable"],
        true
    );
    for request in [
        "IssueLicenseRequest",
        "GeneratePromoBatchRequest",
        "SessionRequest",
        "CreateApiKeyRequest",
    ] {
        assert_eq!(
            doc["components"]["schemas"][request]["additionalProperties"], false,
            "{request} refuses unknown fields"
        );
    }
}

#[test]
fn product_operations_take_the_operator_token_only() {
    let doc: serde_json::Value =
        serde_json::from_str(&partner_billing_server::openapi_document()).unwrap();
    for (path, method) in [
        ("/v1/billing/product/users", "post"),
        ("/v1/billing/product/promo-redemptions", "post"),
        ("/v1/billing/product/users/{login}/licenses", "get"),
    ] {
        let operation = &doc["paths"][path][method];
        assert_eq!(
            operation["security"],
            serde_json::json!([{"OperatorToken": []}]),
            "{method} {path}"
        );
        assert_eq!(operation["tags"], serde_json::json!(["Product"]));
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["OperatorToken"]["scheme"],
        "bearer"
    );
    let redemption = &doc["paths"]["/v1/billing/product/promo-redemptions"]["post"]["responses"];
    assert!(redemption["429"].is_object());
}

/// Every bound the server enforces is declared, so a schema-valid value is never refused as
/// malformed (found by `.ci/schemathesis`).
#[test]
fn declared_bounds_match_what_the_server_enforces() {
    let doc: serde_json::Value =
        serde_json::from_str(&partner_billing_server::openapi_document()).unwrap();
    let parameters =
        &doc["paths"]["/v1/billing/product/users/{login}/licenses"]["get"]["parameters"];
    let login = parameters
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "login" && p["in"] == "path")
        .expect("the login path parameter");
    assert_eq!(login["schema"]["minLength"], 1);
    assert_eq!(login["schema"]["maxLength"], 254);
    assert_eq!(
        login["schema"]["pattern"],
        doc["components"]["schemas"]["RegisterUserRequest"]["properties"]["login"]["pattern"]
    );
    let session = &doc["components"]["schemas"]["SessionRequest"]["properties"];
    assert_eq!(session["clientId"]["maxLength"], 64);
    assert_eq!(session["password"]["maxLength"], 1024);
}

/// `Retry-After` is declared where the server sends it, so clients (and schemathesis'
/// response-header check) know its type: always on 429 and 503, on 409 with
/// `Reseller.RequestInProgress` only.
#[test]
fn retry_after_is_declared_where_it_is_sent() {
    let doc: serde_json::Value =
        serde_json::from_str(&partner_billing_server::openapi_document()).unwrap();
    let responses = &doc["paths"]["/v1/billing/product/promo-redemptions"]["post"]["responses"];
    for (status, required) in [("409", false), ("429", true), ("503", true)] {
        let header = &responses[status]["headers"]["Retry-After"];
        assert_eq!(header["schema"]["type"], "integer", "{status}");
        assert_eq!(
            header["required"].as_bool().unwrap_or(false),
            required,
            "{status}"
        );
    }
    assert!(responses["400"]["headers"]["Retry-After"].is_null());
    let health = &doc["paths"]["/healthz"]["get"]["responses"]["503"]["headers"];
    assert!(health["Retry-After"].is_object());
}

/// Every error code is answered by some operation and documented there with an example, but
/// the two that answer requests matching no operation (no such route, wrong method).
#[test]
fn every_code_is_documented_by_the_operations_that_answer_it() {
    use partner_billing::wire::ErrorCode;
    let doc: serde_json::Value =
        serde_json::from_str(&partner_billing_server::openapi_document()).unwrap();
    let mut documented = std::collections::BTreeSet::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            for response in operation["responses"].as_object().unwrap().values() {
                let examples = &response["content"]["application/problem+json"]["examples"];
                for example in examples.as_object().into_iter().flatten().map(|e| e.1) {
                    documented.insert(example["value"]["code"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    let expected: std::collections::BTreeSet<String> = ErrorCode::ALL
        .into_iter()
        .filter(|c| !matches!(c, ErrorCode::RouteNotFound | ErrorCode::MethodNotAllowed))
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(documented, expected);
}
