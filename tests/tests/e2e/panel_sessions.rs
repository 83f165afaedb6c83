//! Panel sessions and passwords (docs/security.md, docs/design.md): password change ends every other session,
//! sign-out, 1 h idle and 12 h absolute limits, purge, and the 12-128 character rule.

use partner_billing::accounts;
use partner_billing_client::{Error, PanelClient, RetryPolicy};
use partner_billing_tests::{Db, TestApp, both_databases, panel_session};
use serde_json::json;

both_databases!(
    password_change_ends_every_other_session,
    password_change_refusals_change_nothing,
    sign_out_ends_the_session,
    sessions_end_after_an_idle_hour_and_after_twelve_hours,
    expired_sessions_are_purged
);

async fn panel(app: &TestApp, client_id: &str, password: &str) -> PanelClient {
    let mut panel = PanelClient::new(&app.base_url)
        .unwrap()
        .with_retry_policy(RetryPolicy::none());
    panel.login(client_id, password).await.unwrap();
    panel
}

async fn password_change_ends_every_other_session(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let here = panel(&app, &r.client_id, &r.password).await;
    let other = panel(&app, &r.client_id, &r.password).await;
    let new_password = "a much better password";
    here.change_password(&r.password, new_password)
        .await
        .unwrap();
    assert!(here.me().await.is_ok(), "the changing session stays");
    assert!(matches!(other.me().await, Err(Error::Unauthorized)));
    let mut old = PanelClient::new(&app.base_url).unwrap();
    assert!(matches!(
        old.login(&r.client_id, &r.password).await,
        Err(Error::Unauthorized)
    ));
    panel(&app, &r.client_id, new_password).await;
    // The raw contract: 204 with no body.
    let token = panel_session(&app.http, &app.base_url, &r.client_id, new_password).await;
    let response = app
        .http
        .put(app.url("/v1/billing/resellers/me/password"))
        .bearer_auth(&token)
        .json(&json!({"currentPassword": new_password, "newPassword": "yet another password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(response.bytes().await.unwrap().is_empty());
}

async fn password_change_refusals_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let here = panel(&app, &r.client_id, &r.password).await;
    let other = panel(&app, &r.client_id, &r.password).await;
    for (current, new, field) in [
        (
            "not the password!",
            "a long new password",
            "currentPassword",
        ),
        (r.password.as_str(), "eleven char", "newPassword"),
        (r.password.as_str(), &"x".repeat(129), "newPassword"),
    ] {
        let error = here.change_password(current, new).await.unwrap_err();
        match &error {
            Error::ValidationFailed { problem } => {
                assert_eq!(problem.field.as_deref(), Some(field), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!error.to_string().contains(new) || new.len() < 12);
    }
    assert!(other.me().await.is_ok(), "no session ended");
    panel(&app, &r.client_id, &r.password).await;
    // 12 and 128 characters are accepted.
    here.change_password(&r.password, &"y".repeat(128))
        .await
        .unwrap();
    here.change_password(&"y".repeat(128), "twelve chars")
        .await
        .unwrap();
    // An API key cannot change the password.
    let response = app
        .partner(
            reqwest::Method::PUT,
            "/v1/billing/resellers/me/password",
            &r,
        )
        .json(&json!({"currentPassword": "twelve chars", "newPassword": "thirteen chars"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    panel(&app, &r.client_id, "twelve chars").await;
}

async fn sign_out_ends_the_session(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let mut here = panel(&app, &r.client_id, &r.password).await;
    let other = panel(&app, &r.client_id, &r.password).await;
    let token = here.session_token().unwrap().expose().to_owned();
    here.sign_out().await.unwrap();
    let stale = PanelClient::with_session_token(&app.base_url, &token).unwrap();
    assert!(matches!(stale.me().await, Err(Error::Unauthorized)));
    assert!(other.me().await.is_ok(), "only this session ends");
    let response = app
        .http
        .delete(app.url("/v1/billing/resellers/sessions/current"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        401,
        "an ended session cannot sign out again"
    );
}

async fn sessions_end_after_an_idle_hour_and_after_twelve_hours(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let idle = panel(&app, &r.client_id, &r.password).await;
    let busy = panel(&app, &r.client_id, &r.password).await;
    let clock = app.store.clock().clone();
    // Used every 50 minutes: alive past the idle hour, until 12 h after sign-in.
    for _ in 0..15 {
        clock.advance(50 * 60);
        if busy.me().await.is_err() {
            break;
        }
    }
    assert!(
        matches!(idle.me().await, Err(Error::Unauthorized)),
        "idle hour"
    );
    assert!(
        matches!(busy.me().await, Err(Error::Unauthorized)),
        "12 h absolute"
    );
    let fresh = panel(&app, &r.client_id, &r.password).await;
    clock.advance(59 * 60);
    assert!(fresh.me().await.is_ok(), "59 idle minutes are fine");
    clock.advance(59 * 60);
    assert!(
        fresh.me().await.is_ok(),
        "the use above restarted the idle hour"
    );
    clock.advance(60 * 60);
    assert!(matches!(fresh.me().await, Err(Error::Unauthorized)));
}

async fn expired_sessions_are_purged(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    panel(&app, &r.client_id, &r.password).await;
    let purged = accounts::purge_expired_sessions(&app.store).await.unwrap();
    assert_eq!(purged, 0, "live sessions stay");
    app.store.clock().advance(61 * 60);
    let kept = panel(&app, &r.client_id, &r.password).await;
    let purged = accounts::purge_expired_sessions(&app.store).await.unwrap();
    // `reseller()` opened one session and `panel` one more: both idle past the hour.
    assert_eq!(purged, 2);
    assert!(kept.me().await.is_ok());
}
