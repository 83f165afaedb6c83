//! The audit trail: each change by a person or an operator's tool leaves one entry with who,
//! from where and which request; no entry ever holds a secret; the reseller reads its own trail
//! (JSON and the panel page), the operator reads everyone's. The rules around it (failed
//! changes, refused input, pages, append-only) are in `audit_trail_rules.rs`.

use partner_billing::audit::Origin;
use partner_billing::audit_log;
use partner_billing::domain::ClientId;
use partner_billing::keys;
use partner_billing_tests::{Db, TestApp, both_databases, logs};
use serde_json::{Value, json};

use crate::panel::{get, post, sign_in};

both_databases!(
    panel_api_changes_are_in_the_trail_with_actor_source_and_request_id,
    no_secret_reaches_the_trail_or_the_logs,
    html_panel_changes_are_in_the_trail_and_on_the_activity_page,
    operator_changes_are_in_the_trail_with_the_cli_actor
);

/// `GET /v1/billing/resellers/me/activity` with a query string.
pub(crate) async fn activity(app: &TestApp, token: &str, query: &str) -> (u16, Value) {
    let response = app
        .http
        .get(app.url(&format!("/v1/billing/resellers/me/activity{query}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Every entry of the account's trail, newest first.
pub(crate) async fn all_entries(app: &TestApp, token: &str) -> Vec<Value> {
    let (status, body) = activity(app, token, "?limit=500").await;
    assert_eq!(status, 200, "{body}");
    assert!(body["nextCursor"].is_null());
    body["entries"].as_array().unwrap().clone()
}

pub(crate) fn actions(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect()
}

fn find<'a>(entries: &'a [Value], action: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["action"] == action)
        .unwrap_or_else(|| panic!("no {action} in {entries:#?}"))
}

/// A panel JSON request with a chosen request id.
fn panel_request(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: &str,
    request_id: &str,
) -> reqwest::RequestBuilder {
    app.http
        .request(method, app.url(&format!("/v1/billing/resellers{path}")))
        .bearer_auth(token)
        .header("X-Request-Id", request_id)
}

async fn panel_api_changes_are_in_the_trail_with_actor_source_and_request_id(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let actor = format!("panel:{}", r.client_id);
    use reqwest::Method;

    let created: Value = panel_request(&app, Method::POST, "/me/api-keys", &token, "req-create")
        .json(&json!({"name": "ci"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key_id = created["apiKeyId"].as_str().unwrap().to_owned();
    let rolled: Value = panel_request(
        &app,
        Method::POST,
        &format!("/me/api-keys/{key_id}/roll"),
        &token,
        "req-roll",
    )
    .json(&json!({"expiresInSeconds": 60}))
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let new_key_id = rolled["apiKeyId"].as_str().unwrap().to_owned();
    let revoke = panel_request(
        &app,
        Method::DELETE,
        &format!("/me/api-keys/{new_key_id}"),
        &token,
        "req-revoke",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(revoke.status(), 204);
    // Revoking again changes nothing: no second entry.
    panel_request(
        &app,
        Method::DELETE,
        &format!("/me/api-keys/{new_key_id}"),
        &token,
        "req-revoke-again",
    )
    .send()
    .await
    .unwrap();
    let hook: Value = panel_request(
        &app,
        Method::POST,
        "/me/webhook-endpoints",
        &token,
        "req-hook",
    )
    .json(&json!({"url": "http://127.0.0.1:9/hook", "eventTypes": ["api_key.created"]}))
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let hook_id = hook["webhookEndpointId"].as_str().unwrap().to_owned();
    let deleted = panel_request(
        &app,
        Method::DELETE,
        &format!("/me/webhook-endpoints/{hook_id}"),
        &token,
        "req-unhook",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(deleted.status(), 204);
    let alert = panel_request(&app, Method::PUT, "/me/alerts/pro", &token, "req-alert")
        .json(&json!({"lowBalanceThreshold": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(alert.status(), 200);
    let changed = panel_request(&app, Method::PUT, "/me/password", &token, "req-password")
        .json(&json!({"currentPassword": r.password, "newPassword": "a brand new password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 204);

    let entries = all_entries(&app, &token).await;
    assert_eq!(
        actions(&entries),
        [
            "account.password_changed",
            "alert.set",
            "webhook_endpoint.deleted",
            "webhook_endpoint.created",
            "api_key.revoked",
            "api_key.rolled",
            "api_key.created",
            "session.created",
            "api_key.created",
            "session.created",
            "account.created",
        ],
        "newest first, one entry per change"
    );
    for (action, request_id) in [
        ("account.password_changed", "req-password"),
        ("alert.set", "req-alert"),
        ("webhook_endpoint.deleted", "req-unhook"),
        ("webhook_endpoint.created", "req-hook"),
        ("api_key.revoked", "req-revoke"),
        ("api_key.rolled", "req-roll"),
    ] {
        let entry = find(&entries, action);
        assert_eq!(entry["actor"], actor.as_str(), "{entry}");
        assert_eq!(entry["sourceAddress"], "127.0.0.1", "{entry}");
        assert_eq!(entry["requestId"], request_id, "{entry}");
        assert_eq!(entry["clientId"], r.client_id.as_str(), "{entry}");
        assert!(entry["createdUtc"].as_i64().unwrap() > 0);
    }
    assert_eq!(
        find(&entries, "api_key.revoked")["ids"]["apiKeyId"],
        new_key_id.as_str()
    );
    let roll = find(&entries, "api_key.rolled");
    assert_eq!(roll["ids"]["apiKeyId"], key_id.as_str());
    assert_eq!(roll["ids"]["newApiKeyId"], new_key_id.as_str());
    assert_eq!(
        find(&entries, "webhook_endpoint.deleted")["ids"]["webhookEndpointId"],
        hook_id.as_str()
    );
    let alert = find(&entries, "alert.set");
    assert_eq!(alert["ids"]["productSlug"], "pro");
    assert_eq!(alert["details"]["lowBalanceThreshold"], 5);
    // The operator's reseller creation has no address and no request id.
    let created = find(&entries, "account.created");
    assert!(created["actor"].as_str().unwrap().starts_with("cli:"));
    assert!(created["sourceAddress"].is_null() && created["requestId"].is_null());
    // Another account sees none of it.
    let other = app.reseller().await;
    let other_token = app.session(&other.client_id, &other.password).await;
    let theirs = all_entries(&app, &other_token).await;
    assert!(
        theirs
            .iter()
            .all(|e| e["clientId"] == other.client_id.as_str())
    );
    app.stop().await;
}

async fn no_secret_reaches_the_trail_or_the_logs(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let panel = |method, path: &str| {
        app.http
            .request(method, app.url(&format!("/v1/billing/resellers{path}")))
            .bearer_auth(&token)
    };
    let created: Value = panel(reqwest::Method::POST, "/me/api-keys")
        .json(&json!({"name": "canary"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key_id = created["apiKeyId"].as_str().unwrap();
    let rolled: Value = panel(
        reqwest::Method::POST,
        &format!("/me/api-keys/{key_id}/roll"),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let url_secret = "q7Zt0kenInTheUrl";
    let hook: Value = panel(reqwest::Method::POST, "/me/webhook-endpoints")
        .json(&json!({
            "url": format!("http://127.0.0.1:9/in?token={url_secret}#{url_secret}"),
            "eventTypes": ["api_key.created"],
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(hook["secret"].is_string(), "{hook}");
    let new_password = "a new password nobody may log";
    let changed = panel(reqwest::Method::PUT, "/me/password")
        .json(&json!({"currentPassword": r.password, "newPassword": new_password}))
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 204);
    let session = app.session(&r.client_id, new_password).await;

    let secrets = [
        r.secret.as_str(),
        created["secret"].as_str().unwrap(),
        rolled["secret"].as_str().unwrap(),
        hook["secret"].as_str().unwrap(),
        r.password.as_str(),
        new_password,
        token.as_str(),
        session.as_str(),
        url_secret,
    ];
    let trail = serde_json::to_string(&all_entries(&app, &session).await).unwrap();
    let operator = audit_log::operator_log(&app.store, None, None, Some(500), None)
        .await
        .unwrap();
    let operator = serde_json::to_string(&operator.entries).unwrap();
    let logs = logs::captured();
    for secret in secrets {
        assert!(!trail.contains(secret), "the trail holds a secret");
        assert!(
            !operator.contains(secret),
            "the operator's trail holds a secret"
        );
        assert!(!logs.contains(secret), "the logs hold a secret");
    }
    // The URL is kept without its credentials.
    assert!(trail.contains("http://127.0.0.1:9/in"), "{trail}");
    app.stop().await;
}

async fn html_panel_changes_are_in_the_trail_and_on_the_activity_page(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let page = get(&app, "/panel/api-keys", &cookie).await;
    let csrf = crate::panel::csrf(&page);
    let created = post(
        &app,
        "/panel/api-keys",
        &cookie,
        &[("csrf", &csrf), ("name", "from the form")],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let revoked = post(
        &app,
        &format!("/panel/api-keys/{}/revoke", r.api_key_id),
        &cookie,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);

    let page = get(&app, "/panel/activity", &cookie).await;
    assert_eq!(page.status, 200);
    crate::panel::assert_security_headers(&page);
    assert!(
        page.body.contains("<table id=\"activity\">"),
        "{}",
        page.body
    );
    for header in ["Time", "Action", "Actor", "Details", "Source"] {
        assert!(
            page.body
                .contains(&format!("<th scope=\"col\">{header}</th>"))
        );
    }
    assert!(page.body.contains("href=\"/panel/activity\""), "in the nav");
    let revoke_row = page.body.find("api_key.revoked").expect("revoke shown");
    let create_row = page.body.find("api_key.created").expect("creation shown");
    assert!(revoke_row < create_row, "newest first");
    assert!(page.body.contains(&r.api_key_id));
    assert!(page.body.contains(&format!("panel:{}", r.client_id)));
    assert!(page.body.contains("127.0.0.1"));
    assert!(page.body.contains("from the form"));
    // A time among the details reads as every time of the panel does, not as Unix seconds,
    // in a `<time>` (the sign-in's `session.created` and its expiry).
    let at = page
        .body
        .find("expiresUtc: <time datetime=\"")
        .expect("the session's expiry shown as a time");
    let shown = &page.body[at..];
    let shown = &shown[shown.find('>').expect("the element") + 1..];
    let shown = &shown[..shown.find(" UTC</time>").expect("a time in UTC")];
    assert!(
        shown.len() == 16 && shown.as_bytes()[4] == b'-' && shown.as_bytes()[10] == b' ',
        "{shown}"
    );
    // A cursor the panel cannot read is refused, not served from the start.
    let bad = get(&app, "/panel/activity?cursor=not-a-cursor", &cookie).await;
    assert_eq!(bad.status, 400);
    app.stop().await;
}

async fn operator_changes_are_in_the_trail_with_the_cli_actor(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let r = app.reseller().await;
    let client_id = ClientId::parse("clientId", &r.client_id).unwrap();
    let cli = Origin::cli();
    use partner_billing::accounts::{self, Standing};
    accounts::set_standing(&app.store, &client_id, Standing::Suspended, &cli)
        .await
        .unwrap();
    // Suspending a suspended account changes nothing: no entry.
    accounts::set_standing(&app.store, &client_id, Standing::Suspended, &cli)
        .await
        .unwrap();
    accounts::set_standing(&app.store, &client_id, Standing::Good, &cli)
        .await
        .unwrap();
    let password = partner_billing::domain::Password::parse("p", "operator set this one").unwrap();
    accounts::set_password(&app.store, &client_id, password, &cli)
        .await
        .unwrap();
    keys::revoke_api_key_for(&app.store, &client_id, &r.api_key_id, &cli)
        .await
        .unwrap();
    app.credit(&r, "pro", 10).await;

    let log = audit_log::operator_log(&app.store, Some(&client_id), None, None, None)
        .await
        .unwrap();
    let actions: Vec<&str> = log.entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "quota.credited",
            "api_key.revoked",
            "account.password_set",
            "account.reinstated",
            "account.suspended",
            "api_key.created",
            "session.created",
            "account.created",
        ]
    );
    let credited = &log.entries[0];
    assert_eq!(credited.actor, cli.actor().label());
    assert!(credited.actor.starts_with("cli:"));
    assert_eq!(credited.source_address, None);
    assert_eq!(credited.request_id, None);
    assert_eq!(credited.ids["productSlug"], "pro");
    assert_eq!(credited.details["units"], 10);
    assert_eq!(credited.details["reason"], "test credit");
    // `--since` is inclusive; the whole log includes the plan, which concerns no account.
    let since = audit_log::operator_log(
        &app.store,
        Some(&client_id),
        Some(credited.created_utc),
        None,
        None,
    )
    .await
    .unwrap();
    assert!(since.entries.iter().any(|e| e.action == "quota.credited"));
    assert!(
        since
            .entries
            .iter()
            .all(|e| e.created_utc >= credited.created_utc)
    );
    let everyone = audit_log::operator_log(&app.store, None, None, None, None)
        .await
        .unwrap();
    let plan = everyone
        .entries
        .iter()
        .find(|e| e.action == "plan.created")
        .unwrap();
    assert_eq!(plan.client_id, None);
    assert_eq!(plan.ids["productSlug"], "pro");
    app.stop().await;
}
