//! Subscriptions: renewals that stack (direct issue, redemption, and two requests of one group),
//! perpetual plans held once, revocation and what it gives back, and the entitlements the
//! product reads; with group commit and without (one transaction per license).
//!
//! Over 450 lines on purpose: one scenario per rule of subscriptions (renewals, perpetual plans,
//! revocation, entitlements), each spelling out its licenses and their dates.

use partner_billing_client::{Credentials, Error, LicenseRecord, PartnerClient, ProductClient};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

use super::panel::{between, csrf, follow, get, post, sign_in};

both_databases!(
    renewals_stack_on_the_latest_period,
    renewals_stack_without_group_commit,
    a_perpetual_plan_is_held_once,
    a_perpetual_plan_is_held_once_without_group_commit,
    redemptions_stack_and_a_held_perpetual_code_keeps_its_redemption,
    revocation_moves_later_licenses_earlier,
    revocation_refuses_what_is_not_the_resellers,
    requests_of_one_group_stack_on_each_other,
    entitlements_fold_the_licenses,
    the_panel_revokes_after_a_confirmation,
    the_panel_revoke_keeps_the_login_filter_and_says_what_a_later_license_loses,
    a_revocation_sends_one_event,
);

const LICENSES: &str = "/v1/billing/partner/licenses";
const DAY: i64 = 86_400;

fn client(app: &TestApp, r: &Reseller) -> PartnerClient {
    PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap()
}

async fn issue(app: &TestApp, r: &Reseller, plan: &str, login: &str) -> Value {
    let key = format!("sub-{}", uuid::Uuid::new_v4().simple());
    let response = app
        .partner(Method::POST, LICENSES, r)
        .json(&json!({"planSlug": plan, "login": login, "idempotencyKey": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn renewals_stack(app: TestApp) {
    let r = app.reseller().await;
    let other = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    app.credit(&other, "pro", 5).await;

    let first = issue(&app, &r, "pro", "alice").await;
    let created = first["createdUtc"].as_i64().unwrap();
    assert_eq!(first["startsUtc"].as_i64(), Some(created));
    assert_eq!(first["expiresUtc"].as_i64(), Some(created + 30 * DAY));
    assert!(first["revokedUtc"].is_null());

    // Renewed five days early, by another reseller: the subscription is the user's, and the
    // new period starts where the first ends.
    app.store.clock().advance(25 * DAY);
    let renewal = issue(&app, &other, "pro", "alice").await;
    assert_eq!(renewal["startsUtc"], first["expiresUtc"]);
    assert_eq!(
        renewal["expiresUtc"].as_i64(),
        Some(created + 60 * DAY),
        "nothing lost"
    );
    // A third stacks on the second.
    let third = issue(&app, &r, "pro", "alice").await;
    assert_eq!(third["startsUtc"], renewal["expiresUtc"]);

    // After every period has ended, a new license starts when issued.
    app.store.clock().advance(100 * DAY);
    let late = issue(&app, &r, "pro", "alice").await;
    assert_eq!(late["startsUtc"], late["createdUtc"]);
    assert_eq!(app.balance(&r, "pro").await, Some(2));
    assert_eq!(app.balance(&other, "pro").await, Some(4));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn renewals_stack_on_the_latest_period(db: Db) {
    renewals_stack(TestApp::spawn(&db).await).await;
}

async fn renewals_stack_without_group_commit(db: Db) {
    renewals_stack(TestApp::spawn_without_group_commit(&db).await).await;
}

async fn perpetual_held_once(app: TestApp) {
    let r = app.reseller().await;
    app.plan("life").await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "life", 3).await;
    let first = issue(&app, &r, "life", "alice").await;
    assert!(first["expiresUtc"].is_null());

    // A second for the same login: refused, nothing charged, nothing stored under the key.
    let body = json!({"planSlug": "life", "login": "alice", "idempotencyKey": "life-again-1"});
    for _ in 0..2 {
        let refused = app
            .partner(Method::POST, LICENSES, &r)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 409);
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(problem["code"], "License.AlreadyActive");
    }
    assert_eq!(app.balance(&r, "life").await, Some(2));

    // Another login is not concerned; the SDK names the error.
    issue(&app, &r, "life", "bob").await;
    let error = client(&app, &r)
        .issue_license("life", "alice", None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::LicenseAlreadyActive { .. }),
        "{error}"
    );

    // The refused key runs again once the license is revoked: it was never stored.
    let revoked = client(&app, &r)
        .revoke_license(first["licenseId"].as_str().unwrap())
        .await
        .unwrap();
    assert!(revoked.revoked_utc.is_some());
    let granted = app
        .partner(Method::POST, LICENSES, &r)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), 200);
    assert!(granted.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.balance(&r, "life").await, Some(0));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn a_perpetual_plan_is_held_once(db: Db) {
    perpetual_held_once(TestApp::spawn(&db).await).await;
}

async fn a_perpetual_plan_is_held_once_without_group_commit(db: Db) {
    perpetual_held_once(TestApp::spawn_without_group_commit(&db).await).await;
}

async fn redemptions_stack_and_a_held_perpetual_code_keeps_its_redemption(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan("life").await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 5).await;
    app.credit(&r, "life", 5).await;

    let direct = issue(&app, &r, "pro", "alice").await;
    app.store.clock().advance(DAY);
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    let redeemed = sdk
        .redeem_promo_code(&codes[0], "alice", None)
        .await
        .unwrap();
    assert_eq!(
        Some(redeemed.value.starts_utc),
        direct["expiresUtc"].as_i64(),
        "a redemption stacks on the direct license"
    );
    assert_eq!(
        redeemed.value.expires_utc,
        Some(redeemed.value.starts_utc + 30 * DAY)
    );

    // A perpetual plan held already: 409, and the code keeps its one redemption for someone
    // else; the refusal is no failed guess either (ten of them would be throttled).
    issue(&app, &r, "life", "alice").await;
    let (_, life_codes) = app.promo_batch(&r, "life", 1).await;
    for _ in 0..12 {
        let error = sdk
            .redeem_promo_code(&life_codes[0], "alice", None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::LicenseAlreadyActive { .. }),
            "{error}"
        );
    }
    let for_bob = sdk
        .redeem_promo_code(&life_codes[0], "bob", None)
        .await
        .unwrap();
    assert_eq!(for_bob.value.expires_utc, None);
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn revocation_moves_later_licenses_earlier(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let sdk = client(&app, &r);
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let first = issue(&app, &r, "pro", "alice").await;
    let second = issue(&app, &r, "pro", "alice").await;
    let third = issue(&app, &r, "pro", "alice").await;
    let start = first["startsUtc"].as_i64().unwrap();
    assert_eq!(third["expiresUtc"].as_i64(), Some(start + 90 * DAY));

    // Ten days in, the running license is revoked: its 20 unused days come off the later ones.
    app.store.clock().advance(10 * DAY);
    let id = first["licenseId"].as_str().unwrap();
    let response = app
        .partner(Method::DELETE, &format!("{LICENSES}/{id}"), &r)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let revoked: Value = response.json().await.unwrap();
    let mut keys: Vec<&String> = revoked.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "batchId",
            "createdUtc",
            "expiresUtc",
            "licenseId",
            "login",
            "planSlug",
            "revokedUtc",
            "source",
            "startsUtc"
        ]
    );
    let now = revoked["revokedUtc"].as_i64().unwrap();
    assert!((start + 10 * DAY..start + 10 * DAY + 60).contains(&now));
    assert_eq!(revoked["startsUtc"], first["startsUtc"], "kept as granted");
    assert_eq!(
        revoked["expiresUtc"], first["expiresUtc"],
        "kept as granted"
    );
    assert_eq!(revoked["source"], "direct");

    // Again: the same license, nothing changed.
    app.store.clock().advance(DAY);
    let again = sdk.revoke_license(id).await.unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), revoked);

    let listed = licenses_of(&app, "alice").await;
    let period = |license_id: &Value| {
        let l = listed
            .iter()
            .find(|l| l.license_id == license_id.as_str().unwrap())
            .unwrap();
        (l.starts_utc, l.expires_utc.unwrap())
    };
    assert_eq!(period(&second["licenseId"]), (now, now + 30 * DAY));
    assert_eq!(
        period(&third["licenseId"]),
        (now + 30 * DAY, now + 60 * DAY)
    );

    // A license that had not started gives back its whole length.
    let later = sdk
        .revoke_license(second["licenseId"].as_str().unwrap())
        .await
        .unwrap();
    let then = later.revoked_utc.unwrap();
    assert!((now + DAY..now + DAY + 60).contains(&then));
    let listed = licenses_of(&app, "alice").await;
    let third_now = listed
        .iter()
        .find(|l| l.license_id == third["licenseId"].as_str().unwrap())
        .unwrap();
    // The second was running (since `now`) when revoked a day later: its 29 days left come
    // off the third.
    assert_eq!(third_now.starts_utc, then);
    assert_eq!(third_now.expires_utc, Some(then + 30 * DAY));

    // A new license stacks on what is left; no unit came back.
    let next = issue(&app, &r, "pro", "alice").await;
    assert_eq!(next["startsUtc"].as_i64(), Some(then + 30 * DAY));
    assert_eq!(app.balance(&r, "pro").await, Some(1));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn licenses_of(app: &TestApp, login: &str) -> Vec<partner_billing_client::UserLicense> {
    let token = app
        .operator_token(&format!("t-{}", uuid::Uuid::new_v4().simple()))
        .await;
    ProductClient::new(&app.base_url, &token)
        .unwrap()
        .user_licenses(login)
        .await
        .unwrap()
        .licenses
}

async fn revocation_refuses_what_is_not_the_resellers(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let product = ProductClient::new(&app.base_url, &token).unwrap();
    let owner = app.reseller().await;
    let stranger = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&owner, "pro", 5).await;
    let license = issue(&app, &owner, "pro", "alice").await;
    let id = license["licenseId"].as_str().unwrap().to_owned();

    let long = "x".repeat(300);
    for path_id in [
        id.as_str(),
        "not-a-uuid",
        "00000000-0000-0000-0000-000000000000",
        long.as_str(),
        "%00",
        "a%2Fb",
    ] {
        let response = app
            .partner(Method::DELETE, &format!("{LICENSES}/{path_id}"), &stranger)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path_id}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "License.NotFound", "{path_id}");
    }
    let error = client(&app, &stranger)
        .revoke_license(&id)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::LicenseNotFound { .. }), "{error}");
    // Nothing moved: the license is as issued, the balances as they were.
    let listed = product.user_licenses("alice").await.unwrap().licenses;
    assert_eq!(listed[0].revoked_utc, None);
    assert_eq!(app.balance(&owner, "pro").await, Some(4));
    assert_eq!(app.balance(&stranger, "pro").await, None);

    // A license redeemed from the owner's code is the owner's to revoke, not the stranger's.
    app.user("bob").await;
    let (_, codes) = app.promo_batch(&owner, "pro", 1).await;
    let redeemed = product
        .redeem_promo_code(&codes[0], "bob", None)
        .await
        .unwrap();
    let error = client(&app, &stranger)
        .revoke_license(&redeemed.value.license_id)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::LicenseNotFound { .. }), "{error}");
    let revoked: LicenseRecord = client(&app, &owner)
        .revoke_license(&redeemed.value.license_id)
        .await
        .unwrap();
    assert_eq!(revoked.source, "promo");
    assert!(revoked.batch_id.is_some());
    assert!(revoked.revoked_utc.is_some());
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn requests_of_one_group_stack_on_each_other(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let other = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan("life").await;
    app.user("alice").await;
    app.credit(&r, "pro", 20).await;
    app.credit(&other, "pro", 20).await;
    app.credit(&r, "life", 20).await;

    // Sixteen renewals at once from two resellers, and eight perpetual licenses for one login.
    let mut renewals = tokio::task::JoinSet::new();
    for i in 0..16 {
        let sdk = client(&app, if i % 2 == 0 { &r } else { &other });
        renewals.spawn(async move { sdk.issue_license("pro", "alice", None).await });
    }
    let mut perpetual = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let sdk = client(&app, &r);
        perpetual.spawn(async move { sdk.issue_license("life", "alice", None).await });
    }
    let renewals = renewals.join_all().await;
    let perpetual = perpetual.join_all().await;
    let mut periods: Vec<(i64, i64)> = renewals
        .into_iter()
        .map(|issued| {
            let license = issued.unwrap().value;
            (license.starts_utc, license.expires_utc.unwrap())
        })
        .collect();
    periods.sort_unstable();
    for pair in periods.windows(2) {
        assert_eq!(pair[1].0, pair[0].1, "no overlap and no gap: {periods:?}");
    }
    let granted = perpetual.iter().filter(|issued| issued.is_ok()).count();
    assert_eq!(granted, 1, "one perpetual license");
    for refused in perpetual.iter().filter_map(|issued| issued.as_ref().err()) {
        assert!(
            matches!(refused, Error::LicenseAlreadyActive { .. }),
            "{refused}"
        );
    }
    assert_eq!(app.balance(&r, "life").await, Some(19));
    assert_eq!(app.balance(&r, "pro").await, Some(12));
    assert_eq!(app.balance(&other, "pro").await, Some(12));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn entitlements_fold_the_licenses(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("addon", Some(7)).await;
    app.plan("life").await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 5).await;
    app.credit(&r, "addon", 5).await;
    app.credit(&r, "life", 5).await;

    assert!(
        sdk.entitlements("alice")
            .await
            .unwrap()
            .entitlements
            .is_empty()
    );
    let first = issue(&app, &r, "pro", "alice").await;
    issue(&app, &r, "pro", "alice").await;
    let life = issue(&app, &r, "life", "alice").await;
    let addon = issue(&app, &r, "addon", "alice").await;
    let start = first["startsUtc"].as_i64().unwrap();

    let path = "/v1/billing/product/users/alice/entitlements";
    let raw = app.product(Method::GET, path, &token).send().await.unwrap();
    assert_eq!(raw.status(), 200);
    let raw: Value = raw.json().await.unwrap();
    assert_eq!(
        raw,
        json!({"login": "alice", "entitlements": [
            {"planSlug": "addon", "activeNow": true, "activeFromUtc": addon["startsUtc"],
             "activeUntilUtc": addon["expiresUtc"]},
            {"planSlug": "life", "activeNow": true, "activeFromUtc": life["startsUtc"],
             "activeUntilUtc": null},
            {"planSlug": "pro", "activeNow": true, "activeFromUtc": start,
             "activeUntilUtc": start + 60 * DAY},
        ]})
    );

    // Ended and revoked licenses grant nothing; a later one that has not started is listed
    // with activeNow false.
    app.store.clock().advance(8 * DAY);
    let now = client(&app, &r)
        .revoke_license(first["licenseId"].as_str().unwrap())
        .await
        .unwrap()
        .revoked_utc
        .unwrap();
    let held = sdk.entitlements("alice").await.unwrap().entitlements;
    let slugs: Vec<&str> = held.iter().map(|e| e.plan_slug.as_str()).collect();
    assert_eq!(slugs, ["life", "pro"], "the addon ended");
    assert_eq!(held[1].active_from_utc, now, "the second moved to now");
    assert!(held[1].active_now);
    assert_eq!(held[1].active_until_utc, Some(now + 30 * DAY));

    issue(&app, &r, "pro", "bob").await;
    let bob_first = licenses_of(&app, "bob").await;
    app.store.clock().advance(DAY);
    // Bob's only license revoked: nothing held.
    client(&app, &r)
        .revoke_license(&bob_first[0].license_id)
        .await
        .unwrap();
    assert!(
        sdk.entitlements("bob")
            .await
            .unwrap()
            .entitlements
            .is_empty()
    );

    let error = sdk.entitlements("carol").await.unwrap_err();
    assert!(matches!(error, Error::UnknownLogin { .. }), "{error}");
    let odd = "bob smith/ü?#%";
    sdk.register_user(odd).await.unwrap();
    assert_eq!(sdk.entitlements(odd).await.unwrap().login, odd);
    app.stop().await;
}

async fn the_panel_revokes_after_a_confirmation(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let stranger = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let license = issue(&app, &r, "pro", "alice").await;
    let id = license["licenseId"].as_str().unwrap();
    let cookie = sign_in(&app, &r.client_id, &r.password).await;

    let list = get(&app, "/panel/licenses", &cookie).await;
    assert_eq!(list.status, 200);
    for column in [">Starts</th>", ">Revoked</th>"] {
        assert!(list.body.contains(column), "{column}");
    }
    let action = format!("action=\"/panel/licenses/{id}/revoke\"");
    assert!(list.body.contains(&action), "a Revoke button");
    let token = csrf(&list);
    let path = format!("/panel/licenses/{id}/revoke");

    // The button asks first: nothing is revoked yet.
    let confirm = post(&app, &path, &cookie, &[("csrf", &token)]).await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.body.contains("Revoke this license?"),
        "{}",
        confirm.body
    );
    assert!(confirm.body.contains("name=\"confirm\" value=\"yes\""));
    assert!(confirm.body.contains(id));
    assert_eq!(licenses_of(&app, "alice").await[0].revoked_utc, None);

    // Another reseller's session cannot, even confirmed.
    let other = sign_in(&app, &stranger.client_id, &stranger.password).await;
    let other_token = csrf(&get(&app, "/panel/licenses", &other).await);
    let refused = post(
        &app,
        &path,
        &other,
        &[("csrf", &other_token), ("confirm", "yes")],
    )
    .await;
    assert_eq!(refused.status, 404);
    assert_eq!(licenses_of(&app, "alice").await[0].revoked_utc, None);

    let done = post(
        &app,
        &path,
        &cookie,
        &[("csrf", &token), ("confirm", "yes")],
    )
    .await;
    assert_eq!(done.status, 303);
    assert!(licenses_of(&app, "alice").await[0].revoked_utc.is_some());
    let list = get(&app, "/panel/licenses", &cookie).await;
    assert!(
        !list.body.contains(&action),
        "no button on a revoked license"
    );
    assert_eq!(app.balance(&r, "pro").await, Some(4));
    app.stop().await;
}

async fn the_panel_revoke_keeps_the_login_filter_and_says_what_a_later_license_loses(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let current = issue(&app, &r, "pro", "alice").await;
    // Stacked after the first: it has not started.
    let later = issue(&app, &r, "pro", "alice").await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let list = get(&app, "/panel/licenses?login=alice", &cookie).await;
    assert!(
        list.body
            .contains("<input type=\"hidden\" name=\"login\" value=\"alice\">"),
        "the Revoke button carries the filter: {}",
        list.body
    );
    let token = csrf(&list);
    let ask = |license: &Value| {
        let path = format!(
            "/panel/licenses/{}/revoke",
            license["licenseId"].as_str().unwrap()
        );
        let (app, cookie, token) = (&app, &cookie, &token);
        async move { post(app, &path, cookie, &[("csrf", token), ("login", "alice")]).await }
    };
    let now = ask(&current).await;
    assert_eq!(now.status, 200);
    assert!(
        now.body
            .contains("The login loses this license's access now"),
        "{}",
        now.body
    );
    assert!(
        now.body
            .contains("href=\"/panel/licenses?login=alice\">Cancel</a>")
    );
    let not_started = ask(&later).await;
    assert!(
        not_started.body.contains("This license has not started"),
        "{}",
        not_started.body
    );
    assert!(
        !not_started
            .body
            .contains("The login loses this license's access now")
    );
    let done = post(
        &app,
        &format!(
            "/panel/licenses/{}/revoke",
            later["licenseId"].as_str().unwrap()
        ),
        &cookie,
        &[("csrf", &token), ("confirm", "yes"), ("login", "alice")],
    )
    .await;
    assert_eq!(done.status, 303);
    assert_eq!(
        done.headers[reqwest::header::LOCATION],
        "/panel/licenses?login=alice",
        "back to the filtered list"
    );
    assert!(licenses_of(&app, "alice").await[1].revoked_utc.is_some());
    let shown = follow(&app, &done, &cookie).await;
    let notice = between(&shown.body, "id=\"license-notice\">", "</p>").expect("a notice");
    let later_id = later["licenseId"].as_str().unwrap();
    assert_eq!(notice, format!("License {later_id} revoked."));
    assert!(shown.body.contains("value=\"alice\""), "the filter kept");
    // Its button again (a stale page): nothing to confirm, back to the same filtered list.
    let again = ask(&later).await;
    assert_eq!(again.status, 303);
    assert_eq!(
        again.headers[reqwest::header::LOCATION],
        "/panel/licenses?login=alice"
    );
    app.stop().await;
}

async fn a_revocation_sends_one_event(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 5).await;
    let (receiver, _panel, endpoint) =
        partner_billing_tests::receiver::subscribe(&app, &r, &["license.revoked"]).await;
    let license = issue(&app, &r, "pro", "alice").await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    let redeemed = ProductClient::new(&app.base_url, &token)
        .unwrap()
        .redeem_promo_code(&codes[0], "bob", None)
        .await
        .unwrap()
        .value;
    let sdk = client(&app, &r);
    let first = sdk
        .revoke_license(license["licenseId"].as_str().unwrap())
        .await
        .unwrap();
    sdk.revoke_license(&first.license_id).await.unwrap(); // again: no second event
    let second = sdk.revoke_license(&redeemed.license_id).await.unwrap();

    let received = receiver.wait_for(2).await;
    partner_billing_tests::receiver::outbox_settled(&app).await;
    assert_eq!(receiver.received().len(), 2, "one event per revocation");
    let mut data: Vec<Value> = received
        .iter()
        .map(|request| {
            standardwebhooks::Webhook::new(&endpoint.secret)
                .unwrap()
                .verify(&request.body, &request.headers)
                .expect("signed");
            let body = request.json();
            assert_eq!(body["type"], "license.revoked");
            body["data"].clone()
        })
        .collect();
    data.sort_by_key(|d| d["login"].as_str().unwrap().to_owned());
    assert_eq!(
        data,
        [
            json!({"licenseId": first.license_id, "productSlug": "pro", "login": "alice",
                   "revokedUtc": first.revoked_utc}),
            json!({"licenseId": second.license_id, "productSlug": "pro", "login": "bob",
                   "revokedUtc": second.revoked_utc}),
        ]
    );
    app.stop().await;
}
