//! Hostile text in every parameter and body string the published document declares: a NUL byte
//! or another control character never reaches the database (PostgreSQL refuses a NUL in text
//! with an error that used to answer 500), and a path segment that is not UTF-8 is answered as
//! a malformed one, after the credentials, as a problem body. The operations are read from the
//! document itself, so a new one is covered the day it is published.

use std::collections::BTreeMap;

use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::{Value, json};

use crate::panel::{get as panel_get, sign_in};

both_databases!(
    no_parameter_or_body_string_takes_a_control_character_to_the_database,
    a_path_segment_that_is_not_utf8_answers_as_a_malformed_id,
    a_parameter_outside_its_declared_pattern_is_refused_naming_it
);

/// Percent-encoded values no parameter accepts: NUL alone and inside text, other C0 controls,
/// DEL and a C1 control.
const HOSTILE: [&str; 6] = ["%00", "abc%00def", "%01", "%1F", "%7F", "%C2%9B"];

/// Path segments whose percent-escapes are not UTF-8.
const NOT_UTF8: [&str; 3] = ["%FF", "%FF%FEabcdefgh", "abc%C3def"];

/// Percent-encoded values that each pattern the document declares refuses, besides the
/// control characters every parameter refuses (`HOSTILE`). A pattern missing here fails the
/// test until its refused values are listed.
const OUTSIDE_PATTERN: [(&str, &[&str]); 3] = [
    // Visible ASCII: a space, a non-ASCII letter.
    ("^[!-~]+$", &["with%20space-key", "%C3%A9t%C3%A9-2026-key"]),
    // Slugs: capitals, a space, a non-ASCII letter.
    ("^[a-z0-9._-]+$", &["Pro", "pro%20plan", "pr%C3%B6"]),
    // Logins: anything but control characters, which `HOSTILE` covers.
    ("^[^\\u0000-\\u001F\\u007F-\\u009F]*$", &[]),
];

/// Who calls what: an API key for the partner API, an operator token for the product API, a
/// panel session for the rest.
struct Callers {
    reseller: Reseller,
    panel_token: String,
    operator_token: String,
}

impl Callers {
    async fn new(app: &TestApp) -> Self {
        let reseller = app.reseller().await;
        let panel_token = app.session(&reseller.client_id, &reseller.password).await;
        let operator_token = app.operator_token("backend").await;
        Self {
            reseller,
            panel_token,
            operator_token,
        }
    }

    /// The request with the caller's own credentials.
    fn request(&self, app: &TestApp, method: Method, path: &str) -> RequestBuilder {
        if path.starts_with("/v1/billing/partner") {
            app.partner(method, path, &self.reseller)
        } else if path.starts_with("/v1/billing/product") {
            app.product(method, path, &self.operator_token)
        } else {
            app.http
                .request(method, app.url(path))
                .bearer_auth(&self.panel_token)
        }
    }

    /// The request with credentials of the right kind that are wrong.
    fn wrong_credentials(&self, app: &TestApp, method: Method, path: &str) -> RequestBuilder {
        if path.starts_with("/v1/billing/partner") {
            let wrong = Reseller {
                secret: format!("{}x", self.reseller.secret),
                ..self.reseller.clone()
            };
            app.partner(method, path, &wrong)
        } else {
            let token = format!("rps_{}", "0".repeat(43));
            app.http.request(method, app.url(path)).bearer_auth(token)
        }
    }
}

/// One operation of the document.
struct Operation {
    method: Method,
    template: String,
    /// `(name, in)` of each parameter.
    parameters: Vec<(String, String)>,
    /// `(name, in, pattern)` of each parameter whose schema declares the characters it takes.
    patterns: Vec<(String, String, String)>,
    has_body: bool,
}

async fn operations(app: &TestApp) -> Vec<Operation> {
    let document: Value = app
        .http
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut operations = Vec::new();
    for (template, methods) in document["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            let parameters = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_owned(),
                        p["in"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let patterns = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    Some((
                        p["name"].as_str()?.to_owned(),
                        p["in"].as_str()?.to_owned(),
                        p["schema"]["pattern"].as_str()?.to_owned(),
                    ))
                })
                .collect();
            operations.push(Operation {
                method: method.to_ascii_uppercase().parse().unwrap(),
                template: template.clone(),
                parameters,
                patterns,
                has_body: operation.get("requestBody").is_some(),
            });
        }
    }
    operations
}

/// What a malformed value of a parameter is answered with: the 404 of its resource for an id
/// (a malformed id names nothing), else a 400 naming the parameter.
fn malformed_answer(parameter: &str) -> (u16, &'static str, Option<&str>) {
    match parameter {
        "licenseId" => (404, "License.NotFound", None),
        "batchId" => (404, "Reseller.PromoBatchNotFound", None),
        "apiKeyId" => (404, "Reseller.ApiKeyNotFound", None),
        "webhookEndpointId" => (404, "Reseller.WebhookEndpointNotFound", None),
        // A key no write could carry has no record, as an unknown one.
        "idempotencyKey" => (404, "Reseller.RequestNotFound", None),
        other => (400, "Request.ValidationFailed", Some(other)),
    }
}

/// A well-formed body of each operation that takes one (`method path-template`).
fn valid_bodies(reseller: &Reseller) -> BTreeMap<&'static str, Value> {
    BTreeMap::from([
        (
            "POST /v1/billing/partner/licenses",
            json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "hostile-license-1"}),
        ),
        (
            "POST /v1/billing/partner/promo-batches",
            json!({"planSlug": "pro", "count": 1, "idempotencyKey": "hostile-batch-1"}),
        ),
        (
            "POST /v1/billing/partner/promo-codes/void",
            json!({"codes": ["AAAA-BBBB-CCCC-DDDD"]}),
        ),
        (
            "POST /v1/billing/product/promo-redemptions",
            json!({"code": "AAAA-BBBB-CCCC-DDDD", "login": "alice", "idempotencyKey": "hostile-redeem-1"}),
        ),
        ("POST /v1/billing/product/users", json!({"login": "bob"})),
        (
            "PUT /v1/billing/resellers/me/alerts/{productSlug}",
            json!({"lowBalanceThreshold": 3}),
        ),
        (
            "POST /v1/billing/resellers/me/api-keys",
            json!({"name": "hostile"}),
        ),
        (
            "POST /v1/billing/resellers/me/api-keys/{apiKeyId}/roll",
            json!({"expiresInSeconds": 60}),
        ),
        (
            "PUT /v1/billing/resellers/me/password",
            // The longest new password: made hostile, it is too long, so no variant changes it.
            json!({"currentPassword": reseller.password, "newPassword": "n".repeat(128)}),
        ),
        (
            "POST /v1/billing/resellers/me/webhook-endpoints",
            json!({"url": "http://127.0.0.1:9/hook", "eventTypes": ["balance.low"], "description": "hostile"}),
        ),
        (
            "POST /v1/billing/resellers/sessions",
            json!({"clientId": reseller.client_id, "password": reseller.password}),
        ),
    ])
}

/// Every copy of `body` with one string (a member or an array element) made hostile: NUL in
/// place of it, inside it, and after it (a URL parser drops trailing controls; the stored text
/// would keep them).
fn hostile_bodies(body: &Value) -> Vec<(String, Value)> {
    fn walk(
        value: &Value,
        at: &str,
        out: &mut Vec<(String, Value)>,
        rebuild: &dyn Fn(Value) -> Value,
    ) {
        match value {
            Value::String(text) => {
                let middle = text
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(text.chars().count() / 2)
                    .unwrap_or(0);
                for hostile in [
                    "a\u{0}b".to_owned(),
                    format!("{}\u{0}{}", &text[..middle], &text[middle..]),
                    format!("{text}\u{0}"),
                    format!("{text}\u{1}"),
                ] {
                    out.push((at.to_owned(), rebuild(Value::String(hostile))));
                }
            }
            Value::Object(members) => {
                for (name, member) in members {
                    let rebuild_member = |new: Value| {
                        let mut copy = members.clone();
                        copy.insert(name.clone(), new);
                        rebuild(Value::Object(copy))
                    };
                    walk(member, &format!("{at}.{name}"), out, &rebuild_member);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let rebuild_item = |new: Value| {
                        let mut copy = items.clone();
                        copy[i] = new;
                        rebuild(Value::Array(copy))
                    };
                    walk(item, &format!("{at}[{i}]"), out, &rebuild_item);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, "body", &mut out, &|v| v);
    out
}

/// The path of an operation with each path parameter set: `value` for `target`, a
/// well-formed one for the others.
fn fill(template: &str, target: Option<&str>, value: &str) -> String {
    let mut path = String::new();
    for segment in template.split('/').skip(1) {
        path.push('/');
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) if Some(name) == target => path.push_str(value),
            Some("productSlug") => path.push_str("pro"),
            Some(_) => path.push_str("00000000-0000-0000-0000-000000000000"),
            None => path.push_str(segment),
        }
    }
    path
}

fn is_problem(response: &Response) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/problem+json"))
}

/// Sends `op` (with `body`, if it takes one) with the parameter `name` (in `place`) set to the
/// percent-encoded `value` and every other path parameter well-formed, and checks that it is
/// answered as a malformed value of that parameter.
async fn send_parameter(
    app: &TestApp,
    callers: &Callers,
    op: &Operation,
    body: Option<&Value>,
    name: &str,
    place: &str,
    value: &str,
) -> Result<(), String> {
    let (path, what) = match place {
        "path" => (
            fill(&op.template, Some(name), value),
            format!("{} {} with {name}={value}", op.method, op.template),
        ),
        "query" => (
            format!("{}?{name}={value}", fill(&op.template, None, "")),
            format!("{} {}?{name}={value}", op.method, op.template),
        ),
        other => panic!("{name} in {other}: this test sends only paths and queries"),
    };
    let mut request = callers.request(app, op.method.clone(), &path);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    check_problem(&what, response, malformed_answer(name)).await
}

/// Checks that the answer is the problem `expected`, with a request id.
async fn check_problem(
    what: &str,
    response: Response,
    expected: (u16, &str, Option<&str>),
) -> Result<(), String> {
    let (status, code, field) = expected;
    let problem_body = is_problem(&response);
    let got = response.status().as_u16();
    let text = response.text().await.unwrap();
    let problem: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let right = got == status
        && problem_body
        && problem["code"] == code
        && field.is_none_or(|field| problem["field"] == field)
        && problem["requestId"].is_string();
    if right {
        Ok(())
    } else {
        Err(format!("{what}: {got} {text:?}, expected {status} {code}"))
    }
}

/// Fails with every wrong answer at once.
fn assert_none(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} wrong answers:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

async fn set_up(db: &Db) -> (TestApp, Callers) {
    let app = TestApp::spawn(db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let callers = Callers::new(&app).await;
    app.credit(&callers.reseller, "pro", 10).await;
    (app, callers)
}

async fn no_parameter_or_body_string_takes_a_control_character_to_the_database(db: Db) {
    let (app, callers) = set_up(&db).await;
    let operations = operations(&app).await;
    let bodies = valid_bodies(&callers.reseller);
    let mut with_body: Vec<String> = operations
        .iter()
        .filter(|op| op.has_body)
        .map(|op| format!("{} {}", op.method, op.template))
        .collect();
    with_body.sort();
    assert_eq!(
        with_body,
        bodies.keys().map(|k| k.to_string()).collect::<Vec<_>>(),
        "every operation with a body has a well-formed one here"
    );
    let mut checked = 0;
    let mut failures = Vec::new();
    for op in &operations {
        let body = bodies.get(format!("{} {}", op.method, op.template).as_str());
        for (name, place) in &op.parameters {
            for hostile in HOSTILE {
                let sent = send_parameter(&app, &callers, op, body, name, place, hostile);
                failures.extend(sent.await.err());
                checked += 1;
            }
        }
        let Some(body) = body else { continue };
        let path = fill(&op.template, None, "");
        for (at, hostile) in hostile_bodies(body) {
            let what = format!("{} {} with {at} = {hostile}", op.method, op.template);
            let response = callers
                .request(&app, op.method.clone(), &path)
                .json(&hostile)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let problem = is_problem(&response);
            if status >= 500 || (status >= 400 && status != 401 && !problem) {
                let body = response.text().await.unwrap();
                failures.push(format!("{what}: {status} {body}"));
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} requests");

    // The panel's pages take the same values from their paths and queries.
    let cookie = sign_in(
        &app,
        &callers.reseller.client_id,
        &callers.reseller.password,
    )
    .await;
    for hostile in HOSTILE {
        for path in [
            format!("/panel/licenses?login={hostile}"),
            format!("/panel/ledger?product={hostile}"),
            format!("/panel/promo-batches/{hostile}/void"),
        ] {
            let page = panel_get(&app, &path, &cookie).await;
            if ![200, 400, 404].contains(&page.status) {
                failures.push(format!("{path}: {} {}", page.status, page.body));
            }
        }
    }
    assert_none(&failures);
    app.assert_audit_clean().await;
    app.stop().await;
}

/// A value the parameter's declared pattern refuses is answered `400` naming the parameter,
/// as a problem, and changes nothing.
async fn a_parameter_outside_its_declared_pattern_is_refused_naming_it(db: Db) {
    let (app, callers) = set_up(&db).await;
    let bodies = valid_bodies(&callers.reseller);
    let mut checked = 0;
    let mut failures = Vec::new();
    for op in operations(&app).await {
        let body = bodies.get(format!("{} {}", op.method, op.template).as_str());
        for (name, place, pattern) in &op.patterns {
            let Some((_, refused)) = OUTSIDE_PATTERN.iter().find(|(p, _)| p == pattern) else {
                failures.push(format!(
                    "{} {}: {name} declares {pattern:?}, which OUTSIDE_PATTERN does not list",
                    op.method, op.template
                ));
                continue;
            };
            for value in *refused {
                let sent = send_parameter(&app, &callers, &op, body, name, place, value);
                failures.extend(sent.await.err());
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} requests");
    assert_none(&failures);
    assert_eq!(app.balance(&callers.reseller, "pro").await, Some(10));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn a_path_segment_that_is_not_utf8_answers_as_a_malformed_id(db: Db) {
    let (app, callers) = set_up(&db).await;
    let bodies = valid_bodies(&callers.reseller);
    let mut failures = Vec::new();
    for op in operations(&app).await {
        let body = bodies.get(format!("{} {}", op.method, op.template).as_str());
        for (name, place) in &op.parameters {
            if place != "path" {
                continue;
            }
            for segment in NOT_UTF8 {
                let path = fill(&op.template, Some(name), segment);
                let what = format!("{} {path}", op.method);
                let mut request = callers.request(&app, op.method.clone(), &path);
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request.send().await.unwrap();
                failures.extend(
                    check_problem(&what, response, malformed_answer(name))
                        .await
                        .err(),
                );
                // The credentials come first: with wrong ones, the empty 401 (a parameter the
                // document bounds by a pattern is refused as malformed before that, as any
                // malformed value of it is).
                let mut request = callers.wrong_credentials(&app, op.method.clone(), &path);
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request.send().await.unwrap();
                let what = format!("{what} with wrong credentials");
                match malformed_answer(name) {
                    (404, _, _) => {
                        let status = response.status();
                        let body = response.text().await.unwrap();
                        if status != 401 || !body.is_empty() {
                            failures.push(format!("{what}: {status} {body:?}, expected 401"));
                        }
                    }
                    expected => {
                        if response.status() != 401 {
                            failures.extend(check_problem(&what, response, expected).await.err());
                        }
                    }
                }
            }
        }
    }
    // The panel's pages too: an HTML answer as for an unknown id, not a bare text 400.
    let cookie = sign_in(
        &app,
        &callers.reseller.client_id,
        &callers.reseller.password,
    )
    .await;
    for segment in NOT_UTF8 {
        let path = format!("/panel/promo-batches/{segment}/void");
        let page = panel_get(&app, &path, &cookie).await;
        let html = page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html");
        if page.status != 404 || !html {
            failures.push(format!("{path}: {} {}", page.status, page.body));
        }
    }
    assert_none(&failures);
    app.stop().await;
}
