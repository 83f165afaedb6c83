//! Abuse resistance (docs/security.md): sign-in throttling and the hashing bound, no oracle of
//! registered logins, caching and sniffing headers, Node.js clients, fair promo generation,
//! and redemption retries before limits.
//!
//! Over 450 lines on purpose: one scenario per abuse limit of docs/security.md, each spelling out
//! the attempts that reach it and the answers past it.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use partner_billing::limits::PROMO_BATCHES_PER_ACCOUNT;
use partner_billing::store::HoldPoint;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::{Method, Response};
use serde_json::{Value, json};

both_databases!(
    sign_in_failures_are_limited_per_client_id_across_replicas,
    a_wrong_current_password_counts_as_a_failed_sign_in,
    waiting_out_retry_after_is_enough,
    sign_in_failures_are_limited_per_address,
    sign_in_storm_stays_bounded_and_api_keys_are_served,
    a_zero_balance_answers_402_for_registered_and_unknown_logins,
    unknown_logins_are_limited_per_account,
    unknown_logins_are_limited_per_account_without_group_commit,
    v1_answers_are_never_cached_or_sniffed,
    docs_allow_only_their_own_inline_assets,
    node_fetch_headers_are_not_a_browser,
    a_real_node_fetch_is_served,
    one_account_cannot_hold_every_promo_slot,
    a_redemption_retry_is_replayed_before_the_attempt_limit,
);

const SESSIONS: &str = "/v1/billing/resellers/sessions";

async fn sign_in(
    http: &reqwest::Client,
    base_url: &str,
    client_id: &str,
    password: &str,
) -> Response {
    http.post(format!("{base_url}{SESSIONS}"))
        .json(&json!({"clientId": client_id, "password": password}))
        .send()
        .await
        .expect("sign in")
}

/// Asserts `429 Request.RateLimited` with a `Retry-After` of at most `max_seconds`.
async fn assert_rate_limited(what: &str, response: Response, max_seconds: u64) {
    assert_eq!(response.status(), 429, "{what}");
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: Retry-After in seconds"));
    assert!(
        (1..=max_seconds).contains(&retry_after),
        "{what}: Retry-After {retry_after}"
    );
    let problem: Value = response.json().await.expect("problem body");
    assert_eq!(problem["code"], "Request.RateLimited", "{what}");
    assert_eq!(problem["status"], 429, "{what}");
}

async fn sessions(app: &TestApp) -> i64 {
    app.count_rows("SELECT COUNT(*) FROM panel_sessions").await
}

async fn sign_in_failures_are_limited_per_client_id_across_replicas(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let r = app.reseller().await;
    // Ten wrong passwords, spread over two replicas: each is the plain 401.
    for i in 0..10 {
        let server = if i % 2 == 0 { &app } else { &replica };
        let response = sign_in(
            &server.http,
            &server.base_url,
            &r.client_id,
            "wrong password",
        )
        .await;
        assert_eq!(response.status(), 401, "failure {i}");
    }
    let before = sessions(&app).await;
    // The eleventh attempt is refused without checking the password: the right one too.
    let response = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    assert_rate_limited("right password past the limit", response, 15 * 60).await;
    let response = sign_in(&replica.http, &replica.base_url, &r.client_id, &r.password).await;
    assert_rate_limited("on the other replica", response, 15 * 60).await;
    assert_eq!(sessions(&app).await, before, "no session was created");
    // Another account signs in from the same address.
    let other = app.reseller().await;
    let token = app.session(&other.client_id, &other.password).await;
    assert!(token.starts_with("rps_"));
    replica.stop().await;
    app.stop().await;
}

/// A wrong current password in a password change is a failed sign-in of the account: ten of
/// them, from a session, use up the client id's limit, for the change (JSON and panel form)
/// and the sign-in alike. Nothing changed: once the window has passed, the old password still
/// signs in.
async fn a_wrong_current_password_counts_as_a_failed_sign_in(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let cookie = crate::panel::sign_in(&app, &r.client_id, &r.password).await;
    let change = |current: &str| {
        app.http
            .put(app.url("/v1/billing/resellers/me/password"))
            .bearer_auth(&token)
            .json(&json!({"currentPassword": current, "newPassword": "a brand new password"}))
            .send()
    };
    for i in 0..10 {
        let response = change("wrong password").await.expect("change");
        assert_eq!(response.status(), 400, "failure {i}");
        let problem: Value = response.json().await.expect("problem");
        assert_eq!(problem["field"], "currentPassword", "failure {i}");
    }
    let response = change(&r.password).await.expect("change");
    assert_rate_limited(
        "the right current password past the limit",
        response,
        15 * 60,
    )
    .await;
    let response = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    assert_rate_limited("a sign-in past the limit", response, 15 * 60).await;
    // The panel's form says so on its page.
    let settings = crate::panel::get(&app, "/panel/settings", &cookie).await;
    let refused = crate::panel::post(
        &app,
        "/panel/settings/password",
        &cookie,
        &[
            ("csrf", &crate::panel::csrf(&settings)),
            ("current_password", &r.password),
            ("new_password", "a brand new password"),
        ],
    )
    .await;
    assert_eq!(refused.status, 429);
    assert!(
        refused.body.contains("Too many wrong passwords."),
        "{}",
        refused.body
    );
    assert!(refused.headers.contains_key("retry-after"));
    assert!(
        !refused.body.contains(&r.password) && !refused.body.contains("a brand new password"),
        "the page never shows a password"
    );

    app.store.clock().advance(16 * 60);
    let response = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    assert_eq!(response.status(), 201, "the password is unchanged");
    let response = sign_in(
        &app.http,
        &app.base_url,
        &r.client_id,
        "a brand new password",
    )
    .await;
    assert_eq!(response.status(), 401);
    app.stop().await;
}

/// `Retry-After` is exact: one second early is still refused, and waiting it out is enough,
/// even when a success earlier in the window left its minute's count at zero.
async fn waiting_out_retry_after_is_enough(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    // A success is counted and taken back: its minute stays, with no attempt in it.
    let signed_in = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    assert_eq!(signed_in.status(), 201);
    app.store.clock().advance(180);
    for i in 0..10 {
        let response = sign_in(&app.http, &app.base_url, &r.client_id, "wrong password").await;
        assert_eq!(response.status(), 401, "failure {i}");
    }
    let refused = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    let retry_after: i64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_rate_limited("past the limit", refused, 15 * 60).await;
    assert_retry_after_is_enough(&app, retry_after, || {
        sign_in(&app.http, &app.base_url, &r.client_id, &r.password)
    })
    .await;
    app.stop().await;
}

/// After a refusal that said `Retry-After: retry_after`, the same sign-in is still refused a
/// little early and served once that time has passed. The test clock runs with real time
/// (plus what the test adds), so "a little early" is two seconds: a real second may tick
/// between the refusal and the next request.
async fn assert_retry_after_is_enough<F, Fut>(app: &TestApp, retry_after: i64, attempt: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    app.store.clock().advance(retry_after - 2);
    assert_rate_limited("two seconds early", attempt().await, 2).await;
    app.store.clock().advance(2);
    assert_eq!(attempt().await.status(), 201, "after Retry-After");
}

/// A client whose connections come from `127.0.0.<last>`.
fn client_from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
        .build()
        .expect("client")
}

async fn sign_in_failures_are_limited_per_address(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let attacker = client_from(66);
    // Fifty failures from one address, each against another (unknown) client id.
    for i in 0..50 {
        let client_id = format!("rsc_unknown{i:013}");
        let response = sign_in(&attacker, &app.base_url, &client_id, "guess").await;
        assert_eq!(response.status(), 401, "failure {i}");
    }
    let before = sessions(&app).await;
    let response = sign_in(&attacker, &app.base_url, &r.client_id, &r.password).await;
    let retry_after: i64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_rate_limited("51st attempt from the address", response, 15 * 60).await;
    assert_eq!(sessions(&app).await, before, "no session was created");
    assert_retry_after_is_enough(&app, retry_after, || {
        sign_in(&attacker, &app.base_url, &r.client_id, &r.password)
    })
    .await;
    // The same account from another address is not affected.
    let response = sign_in(&client_from(67), &app.base_url, &r.client_id, &r.password).await;
    assert_eq!(response.status(), 201);
    app.stop().await;
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmHWM")
}

async fn sign_in_storm_stays_bounded_and_api_keys_are_served(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", 5).await;
    // The real server binary, so that its memory is its own.
    let replicas = app.process_replicas(1);
    let base_url = replicas.base_urls()[0].clone();
    let pid = replicas.servers[0].pid();
    eprintln!(
        "server peak RSS before the storm: {} MiB",
        peak_rss_kib(pid) / 1024
    );
    let clients: Vec<reqwest::Client> = (0..50).map(|k| client_from(100 + k)).collect();
    let statuses = tokio::time::timeout(Duration::from_secs(180), async {
        // 500 sign-ins at once, from 50 addresses, each for another client id (so that no
        // counter stops them before the password hash).
        let sign_ins: Vec<_> = (0..500)
            .map(|i| {
                let http = clients[i % clients.len()].clone();
                let base_url = base_url.clone();
                tokio::spawn(async move {
                    let client_id = format!("rsc_storm{i:015}");
                    sign_in(&http, &base_url, &client_id, "a wrong password")
                        .await
                        .status()
                        .as_u16()
                })
            })
            .collect();
        // Meanwhile, API-key requests are served.
        for _ in 0..10 {
            let response = partner_billing_tests::partner_request(
                &app.http,
                &base_url,
                Method::GET,
                "/v1/billing/partner/balances",
                &r,
            )
            .send()
            .await
            .expect("balances during the storm");
            assert_eq!(
                response.status(),
                200,
                "API keys are served during the storm"
            );
        }
        let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
        for sign_in in sign_ins {
            *statuses.entry(sign_in.await.expect("task")).or_default() += 1;
        }
        statuses
    })
    .await
    .expect("the storm ends within three minutes");
    eprintln!("sign-in storm statuses: {statuses:?}");
    assert!(
        statuses.keys().all(|s| [401, 429, 503].contains(s)),
        "only refusals: {statuses:?}"
    );
    assert!(statuses.get(&401).is_some_and(|n| *n > 0), "{statuses:?}");
    let peak = peak_rss_kib(pid);
    eprintln!(
        "server peak RSS during 500 concurrent sign-ins: {} MiB",
        peak / 1024
    );
    assert!(peak < 256 * 1024, "peak RSS {} MiB", peak / 1024);
    drop(replicas);
    app.stop().await;
}

async fn issue(app: &TestApp, r: &Reseller, login: &str, key: &str) -> Response {
    app.partner(Method::POST, "/v1/billing/partner/licenses", r)
        .json(&json!({"planSlug": "pro", "login": login, "idempotencyKey": key}))
        .send()
        .await
        .expect("issue license")
}

async fn code_of(response: Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

async fn a_zero_balance_answers_402_for_registered_and_unknown_logins(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    // Never credited, then credited and spent: both zero.
    for round in 0..2 {
        let registered =
            code_of(issue(&app, &r, "alice", &format!("known-{round}-0001")).await).await;
        let unknown =
            code_of(issue(&app, &r, "mallory", &format!("unknown-{round}-001")).await).await;
        assert_eq!(registered, (402, "Reseller.InsufficientQuota".to_owned()));
        assert_eq!(unknown, registered, "the same answer for an unknown login");
        if round == 0 {
            app.credit(&r, "pro", 1).await;
            assert_eq!(
                issue(&app, &r, "alice", "spend-the-unit").await.status(),
                200
            );
        }
    }
    assert_eq!(app.balance(&r, "pro").await, Some(0));
    // With a unit left, an unknown login is named as such, and nothing is charged.
    app.credit(&r, "pro", 1).await;
    let unknown = code_of(issue(&app, &r, "mallory", "unknown-funded").await).await;
    assert_eq!(unknown, (422, "Reseller.UnknownLogin".to_owned()));
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn unknown_logins_are_limited(app: TestApp) {
    let r = app.reseller().await;
    let other = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    app.credit(&other, "pro", 5).await;
    for i in 0..100 {
        let answer =
            code_of(issue(&app, &r, &format!("nobody-{i}"), &format!("probe-{i:04}")).await).await;
        assert_eq!(
            answer,
            (422, "Reseller.UnknownLogin".to_owned()),
            "probe {i}"
        );
    }
    let response = issue(&app, &r, "nobody-else", "probe-past-limit").await;
    assert_rate_limited("101st unknown login", response, 3600).await;
    assert_eq!(app.balance(&r, "pro").await, Some(5), "nothing charged");
    // Registered logins still get their licenses; other accounts are not affected.
    assert_eq!(issue(&app, &r, "alice", "real-license").await.status(), 200);
    let answer = code_of(issue(&app, &other, "nobody-0", "other-probe").await).await;
    assert_eq!(answer, (422, "Reseller.UnknownLogin".to_owned()));
    assert_eq!(app.balance(&r, "pro").await, Some(4));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn unknown_logins_are_limited_per_account(db: Db) {
    unknown_logins_are_limited(TestApp::spawn(&db).await).await;
}

async fn unknown_logins_are_limited_per_account_without_group_commit(db: Db) {
    unknown_logins_are_limited(TestApp::spawn_without_group_commit(&db).await).await;
}

fn assert_no_store_nosniff(what: &str, response: &Response) {
    let headers = response.headers();
    assert_eq!(
        headers.get("cache-control").map(|v| v.to_str().unwrap()),
        Some("no-store"),
        "{what}"
    );
    assert_eq!(
        headers
            .get("x-content-type-options")
            .map(|v| v.to_str().unwrap()),
        Some("nosniff"),
        "{what}"
    );
}

async fn v1_answers_are_never_cached_or_sniffed(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let ok = app
        .partner(Method::GET, "/v1/billing/partner/balances", &r)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_no_store_nosniff("200", &ok);
    let unauthorized = app
        .http
        .get(app.url("/v1/billing/partner/balances"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    assert_no_store_nosniff("401", &unauthorized);
    let session = sign_in(&app.http, &app.base_url, &r.client_id, &r.password).await;
    assert_eq!(session.status(), 201);
    assert_no_store_nosniff("session", &session);
    let not_found = app
        .http
        .get(app.url("/v1/billing/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(not_found.status(), 404);
    assert_no_store_nosniff("404", &not_found);
    let invalid = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .json(&json!({"planSlug": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(invalid.status(), 400);
    assert_no_store_nosniff("400", &invalid);
    // A refusal made before routing (a browser on the partner API) carries the same headers,
    // and the request id, in its header and its problem body.
    let refused = app
        .partner(Method::GET, "/v1/billing/partner/balances", &r)
        .header("Origin", "https://evil.example")
        .header("X-Request-Id", "browser-refusal-1")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert_no_store_nosniff("403 before routing", &refused);
    assert_eq!(refused.headers()["x-request-id"], "browser-refusal-1");
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["code"], "Request.BrowserOriginForbidden",
        "{problem}"
    );
    assert_eq!(problem["requestId"], "browser-refusal-1", "{problem}");
    app.stop().await;
}

async fn docs_allow_only_their_own_inline_assets(db: Db) {
    use base64::Engine as _;
    use sha2::Digest as _;
    let app = TestApp::spawn(&db).await;
    let docs = app.http.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    let csp = docs
        .headers()
        .get("content-security-policy")
        .expect("a Content-Security-Policy on /docs")
        .to_str()
        .unwrap()
        .to_owned();
    let html = docs.text().await.unwrap();
    // Swagger UI is served whole from the binary: nothing in the page comes from elsewhere.
    for attribute in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
        assert!(!html.contains(attribute), "/docs loads {attribute}…");
    }
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-eval"), "{csp}");
    assert!(!csp.contains("http:") && !csp.contains("https:"), "{csp}");
    let script_src = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .expect("script-src");
    assert!(!script_src.contains("unsafe-inline"), "{csp}");
    // Every inline script of the page is allowed by its hash, and nothing else is.
    let mut rest = html.as_str();
    let mut scripts = 0;
    while let Some(start) = rest.find("<script") {
        let body_start = start + rest[start..].find('>').unwrap() + 1;
        let end = body_start + rest[body_start..].find("</script>").unwrap();
        let digest = sha2::Sha256::digest(&rest.as_bytes()[body_start..end]);
        let hash = base64::engine::general_purpose::STANDARD.encode(digest);
        assert!(
            script_src.contains(&format!("'sha256-{hash}'")),
            "script {scripts} allowed"
        );
        scripts += 1;
        rest = &rest[end..];
    }
    assert!(scripts >= 2, "the page's scripts were found");
    assert_eq!(script_src.matches("'sha256-").count(), scripts);
    app.stop().await;
}

/// The headers Node.js's built-in `fetch` (undici) sends on every request.
const NODE_FETCH_HEADERS: [(&str, &str); 5] = [
    ("accept", "*/*"),
    ("accept-language", "*"),
    ("sec-fetch-mode", "cors"),
    ("user-agent", "node"),
    ("accept-encoding", "gzip, deflate"),
];

async fn node_fetch_headers_are_not_a_browser(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 2).await;
    let mut request = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .json(&json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "node-fetch-001"}));
    for (name, value) in NODE_FETCH_HEADERS {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    // A browser mark beside them is still refused, before credentials.
    let mut request = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "node-fetch-002"}));
    for (name, value) in NODE_FETCH_HEADERS {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 403);
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    app.stop().await;
}

async fn a_real_node_fetch_is_served(db: Db) {
    let node_found = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_found {
        // Only where node is not installed at all; wherever it is, the test runs.
        eprintln!("node is not installed: the real Node.js fetch scenario is skipped");
        return;
    }
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 2).await;
    let script = r#"
        const [url, clientId, secret] = process.argv.slice(1);
        fetch(url, {
            method: "POST",
            headers: {"X-Client-Id": clientId, "X-Client-Secret": secret, "Content-Type": "application/json"},
            body: JSON.stringify({planSlug: "pro", login: "alice", idempotencyKey: "node-real-0001"}),
        }).then(async (r) => { console.log(r.status); console.log(await r.text()); })
          .catch((e) => { console.error(e); process.exit(2); });
    "#;
    let url = app.url("/v1/billing/partner/licenses");
    let (client_id, secret) = (r.client_id.clone(), r.secret.clone());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .args(["-e", script, &url, &client_id, &secret])
            .output()
            .expect("run node")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("200"), "{stdout}");
    let license: Value = serde_json::from_str(lines.next().unwrap_or_default()).unwrap();
    assert_eq!(license["login"], "alice");
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    app.stop().await;
}

async fn one_account_cannot_hold_every_promo_slot(db: Db) {
    let app = TestApp::spawn(&db).await;
    let busy = app.reseller().await;
    let other = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&busy, "pro", 8000).await;
    app.credit(&other, "pro", 1).await;
    let busy_account = app
        .count_rows(&format!(
            "SELECT id FROM accounts WHERE client_id = '{}'",
            busy.client_id
        ))
        .await;
    // Every busy batch that gets a turn is held there, so they hold their slots for as long
    // as this test needs: no race decides what finishes first.
    let hold = app.store.hold(HoldPoint::PromoTurnTaken, busy_account);
    // One account sends eight 1000-code batches at once: as many as every slot there is.
    let batches: Vec<_> = (0..8)
        .map(|i| {
            let request = app
                .partner(Method::POST, "/v1/billing/partner/promo-batches", &busy)
                .json(&json!({"planSlug": "pro", "count": 1000, "idempotencyKey": format!("busy-batch-{i:03}")}));
            tokio::spawn(async move { request.send().await.unwrap().status() })
        })
        .collect();
    tokio::time::timeout(
        Duration::from_secs(60),
        hold.wait_for_arrivals(PROMO_BATCHES_PER_ACCOUNT),
    )
    .await
    .expect("the busy account's batches take their turns");
    // Another account's small batch is served while the busy account's turns are held. Were
    // the busy account able to take every slot, this request would wait for the release,
    // which only comes after it: the timeout turns that into a failure instead of a hang.
    let response = tokio::time::timeout(
        Duration::from_secs(60),
        app.partner(Method::POST, "/v1/billing/partner/promo-batches", &other)
            .json(&json!({"planSlug": "pro", "count": 1, "idempotencyKey": "other-batch-001"}))
            .send(),
    )
    .await
    .expect("the other account's batch is not queued behind the busy account's")
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(app.balance(&other, "pro").await, Some(0));
    // Only the account's own slots were taken; its other batches wait without a turn, and
    // nothing of the busy account was charged yet.
    assert_eq!(hold.arrived(), PROMO_BATCHES_PER_ACCOUNT);
    assert!(batches.iter().all(|batch| !batch.is_finished()));
    assert_eq!(app.balance(&busy, "pro").await, Some(8000));
    hold.release();
    for batch in batches {
        assert_eq!(batch.await.unwrap(), 200);
    }
    assert_eq!(app.balance(&busy, "pro").await, Some(0));
    app.stop().await;
}

async fn a_redemption_retry_is_replayed_before_the_attempt_limit(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_policy("pro", Some(30), None, None).await;
    app.credit(&r, "pro", 5).await;
    let token = app.operator_token("backend").await;
    app.user("alice").await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    let first = app
        .redeem(&token, &codes[0], "alice", "redeem-key-0001")
        .await;
    assert_eq!(first.status(), 200);
    let license: Value = first.json().await.unwrap();
    // The login then uses up its failed attempts.
    for i in 0..10 {
        let response = app
            .redeem(
                &token,
                "AAAA-AAAA-AAAA-AAAA",
                "alice",
                &format!("guess-{i:04}"),
            )
            .await;
        assert_eq!(response.status(), 404, "guess {i}");
    }
    let limited = app
        .redeem(&token, "AAAA-AAAA-AAAA-AAAA", "alice", "guess-past-limit")
        .await;
    assert_eq!(limited.status(), 429);
    // The retry of the success is still answered from its record.
    let retry = app
        .redeem(&token, &codes[0], "alice", "redeem-key-0001")
        .await;
    assert_eq!(retry.status(), 200);
    assert_eq!(
        retry
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    let replayed: Value = retry.json().await.unwrap();
    assert_eq!(replayed["licenseId"], license["licenseId"]);
    assert_eq!(
        app.count_rows("SELECT COUNT(*) FROM licenses WHERE source = 'promo'")
            .await,
        1
    );
    app.stop().await;
}
