//! The trail records changes, once, and only changes: a revocation from the partner API and
//! from the panel (a repeat writes nothing), an alert set to a new value only, and voided codes
//! by the batches they belong to, never a code. (The operator's revocations and voids, through
//! the binary, are in `operator_cli.rs`.)

use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

use crate::audit_trail::{actions, all_entries};
use crate::panel::{csrf, get, post, sign_in};

both_databases!(
    a_revocation_is_in_the_trail_once_with_its_actor,
    an_alert_set_to_its_current_value_writes_no_entry,
    voided_codes_are_in_the_trail_by_their_batches_never_a_code,
);

fn with_action<'a>(entries: &'a [Value], action: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["action"] == action).collect()
}

async fn issue(app: &TestApp, r: &Reseller, login: &str) -> String {
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", r)
        .json(&json!({
            "planSlug": "pro",
            "login": login,
            "idempotencyKey": format!("license-{}", uuid::Uuid::new_v4().simple()),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let license: Value = response.json().await.unwrap();
    license["licenseId"].as_str().unwrap().to_owned()
}

async fn a_revocation_is_in_the_trail_once_with_its_actor(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 5).await;
    let by_api = issue(&app, &r, "alice").await;
    let by_panel = issue(&app, &r, "alice").await;
    let token = app.session(&r.client_id, &r.password).await;

    // The partner API, twice: one entry, by the API key, with the request's id and address.
    for request_id in ["req-revoke-license", "req-revoke-again"] {
        let revoked = app
            .partner(
                Method::DELETE,
                &format!("/v1/billing/partner/licenses/{by_api}"),
                &r,
            )
            .header("X-Request-Id", request_id)
            .send()
            .await
            .unwrap();
        assert_eq!(revoked.status(), 200);
    }
    let entries = all_entries(&app, &token).await;
    let revocations = with_action(&entries, "license.revoked");
    assert_eq!(revocations.len(), 1, "{entries:#?}");
    let entry = revocations[0];
    assert_eq!(entry["actor"], format!("api_key:{}", r.api_key_id).as_str());
    assert_eq!(entry["ids"]["licenseId"], by_api.as_str(), "{entry}");
    assert_eq!(entry["ids"]["productSlug"], "pro", "{entry}");
    assert_eq!(entry["requestId"], "req-revoke-license");
    assert_eq!(entry["sourceAddress"], "127.0.0.1");
    assert_eq!(entry["clientId"], r.client_id.as_str());

    // The panel's "Revoke", confirmed, twice: one more entry, by the panel.
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let token_field = csrf(&get(&app, "/panel/licenses", &cookie).await);
    for _ in 0..2 {
        let done = post(
            &app,
            &format!("/panel/licenses/{by_panel}/revoke"),
            &cookie,
            &[("csrf", &token_field), ("confirm", "yes")],
        )
        .await;
        assert_eq!(done.status, 303, "{}", done.body);
    }
    let entries = all_entries(&app, &token).await;
    let revocations = with_action(&entries, "license.revoked");
    assert_eq!(revocations.len(), 2, "{entries:#?}");
    let entry = revocations[0];
    assert_eq!(entry["actor"], format!("panel:{}", r.client_id).as_str());
    assert_eq!(entry["ids"]["licenseId"], by_panel.as_str(), "{entry}");
    assert_eq!(entry["sourceAddress"], "127.0.0.1");

    // Both on the panel's activity page and in the operator's log.
    let page = get(&app, "/panel/activity", &cookie).await;
    assert_eq!(page.body.matches("license.revoked").count(), 2);
    assert!(page.body.contains(&by_api) && page.body.contains(&by_panel));
    let client_id = partner_billing::domain::ClientId::parse("clientId", &r.client_id).unwrap();
    let log =
        partner_billing::audit_log::operator_log(&app.store, Some(&client_id), None, None, None)
            .await
            .unwrap();
    let logged: Vec<&str> = log
        .entries
        .iter()
        .filter(|e| e.action == "license.revoked")
        .map(|e| e.ids["licenseId"].as_str())
        .collect();
    assert_eq!(logged, [by_panel.as_str(), by_api.as_str()]);
    app.stop().await;
}

async fn an_alert_set_to_its_current_value_writes_no_entry(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 5).await;
    let token = app.session(&r.client_id, &r.password).await;
    let set = |threshold: i64| {
        let request = app
            .http
            .put(app.url("/v1/billing/resellers/me/alerts/pro"))
            .bearer_auth(&token)
            .json(&json!({ "lowBalanceThreshold": threshold }));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["lowBalanceThreshold"], threshold);
        }
    };
    let alerts_set = || async {
        let entries = all_entries(&app, &token).await;
        actions(&entries)
            .into_iter()
            .filter(|a| *a == "alert.set")
            .count()
    };
    // Never set is off: turning it off changes nothing.
    set(0).await;
    assert_eq!(alerts_set().await, 0);
    set(3).await;
    assert_eq!(alerts_set().await, 1);
    set(3).await;
    assert_eq!(alerts_set().await, 1, "the same value again is no change");
    // The panel's form saves every product at once: unchanged, nothing recorded.
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let field = csrf(&get(&app, "/panel/settings", &cookie).await);
    let saved = post(
        &app,
        "/panel/settings/alerts",
        &cookie,
        &[("csrf", &field), ("alert:pro", "3")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(alerts_set().await, 1);
    set(4).await;
    set(0).await;
    set(0).await;
    assert_eq!(alerts_set().await, 3);
    let entries = all_entries(&app, &token).await;
    let newest = with_action(&entries, "alert.set")[0];
    assert_eq!(newest["details"]["lowBalanceThreshold"], 0);
    app.stop().await;
}

async fn voided_codes_are_in_the_trail_by_their_batches_never_a_code(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 10).await;
    let (first, first_codes) = app.promo_batch(&r, "pro", 2).await;
    let (second, second_codes) = app.promo_batch(&r, "pro", 2).await;
    let (untouched, untouched_codes) = app.promo_batch(&r, "pro", 1).await;
    let token = app.session(&r.client_id, &r.password).await;
    let sent = [
        first_codes[0].to_lowercase(),
        second_codes[1].clone(),
        "not a code".to_owned(),
    ];
    let voided = app
        .partner(Method::POST, "/v1/billing/partner/promo-codes/void", &r)
        .json(&json!({ "codes": sent }))
        .send()
        .await
        .unwrap();
    assert_eq!(voided.status(), 200);
    let entries = all_entries(&app, &token).await;
    let voids = with_action(&entries, "promo_codes.voided");
    assert_eq!(voids.len(), 1, "{entries:#?}");
    let entry = voids[0];
    assert_eq!(entry["details"]["voided"], 2, "{entry}");
    let mut expected = vec![first.clone(), second.clone()];
    expected.sort();
    assert_eq!(entry["details"]["batchIds"], json!(expected), "{entry}");
    let text = entry.to_string();
    assert!(!text.contains(&untouched), "only the batches voided from");
    let bare = |code: &str| code.replace('-', "").to_uppercase();
    for code in first_codes
        .iter()
        .chain(&second_codes)
        .chain(&untouched_codes)
    {
        assert!(!text.contains(code.as_str()), "a code in {text}");
        assert!(
            !text.to_uppercase().contains(&bare(code)),
            "a code in {text}"
        );
    }
    // The panel's activity page names the batches too.
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let page = get(&app, "/panel/activity", &cookie).await;
    assert!(page.body.contains(&first) && page.body.contains(&second));
    app.stop().await;
}
