//! API keys: the five-active cap (atomic under concurrency), revoke, tenant isolation, and the
//! panel refusing API keys.

use partner_billing_client::{Credentials, Error, PanelClient, PartnerClient, RetryPolicy};
use partner_billing_tests::{Db, TestApp, both_databases};

both_databases!(
    five_keys_allowed_sixth_refused_and_revoke_frees_a_slot,
    concurrent_creations_cannot_pass_the_cap,
    keys_of_another_account_are_not_found,
    api_keys_cannot_use_the_panel
);

async fn panel(app: &TestApp, client_id: &str, password: &str) -> PanelClient {
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    panel.login(client_id, password).await.unwrap();
    panel
}

async fn five_keys_allowed_sixth_refused_and_revoke_frees_a_slot(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await; // one active key already
    let panel = panel(&app, &r.client_id, &r.password).await;
    let mut created = Vec::new();
    for i in 0..4 {
        created.push(
            panel
                .create_api_key(Some(&format!("key {i}")))
                .await
                .unwrap(),
        );
    }
    for key in &created {
        assert!(key.secret.starts_with("rss_") && key.api_key_id.starts_with("rsk_"));
        assert_eq!(key.client_id, r.client_id);
    }
    let sixth = panel.create_api_key(Some("sixth")).await.unwrap_err();
    assert!(
        matches!(sixth, Error::ApiKeyLimitReached { .. }),
        "{sixth:?}"
    );
    assert_eq!(sixth.status(), Some(409));
    let list = panel.list_api_keys().await.unwrap();
    assert_eq!(
        list.api_keys.len(),
        5,
        "nothing created by the refused request"
    );
    assert!(list.api_keys.iter().all(|k| k.status == "active"));

    panel.revoke_api_key(&created[0].api_key_id).await.unwrap();
    // Revoking again is still 204.
    panel.revoke_api_key(&created[0].api_key_id).await.unwrap();
    let replacement = panel.create_api_key(None).await.unwrap();
    let list = panel.list_api_keys().await.unwrap();
    let revoked = list
        .api_keys
        .iter()
        .find(|k| k.api_key_id == created[0].api_key_id)
        .unwrap();
    assert_eq!(revoked.status, "revoked");
    assert!(revoked.revoked_utc.is_some());
    assert!(
        list.api_keys
            .iter()
            .any(|k| k.api_key_id == replacement.api_key_id && k.status == "active")
    );
    // The new key works, the revoked one does not.
    let fresh = PartnerClient::new(&app.base_url, Credentials::from(&replacement)).unwrap();
    fresh.balances().await.unwrap();
    let old = PartnerClient::new(&app.base_url, Credentials::from(&created[0])).unwrap();
    assert!(matches!(
        old.balances().await.unwrap_err(),
        Error::Unauthorized
    ));
    app.stop().await;
}

async fn concurrent_creations_cannot_pass_the_cap(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r.client_id, &r.password).await;
    for _ in 0..3 {
        panel.create_api_key(None).await.unwrap();
    }
    // Four active: ten concurrent creations, exactly one may succeed.
    let attempts = (0..10).map(|_| {
        let panel = panel.clone().with_retry_policy(RetryPolicy::none());
        tokio::spawn(async move { panel.create_api_key(None).await })
    });
    let mut ok = 0;
    let mut refused = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::ApiKeyLimitReached { .. }) => refused += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((ok, refused), (1, 9));
    let active = panel
        .list_api_keys()
        .await
        .unwrap()
        .api_keys
        .iter()
        .filter(|k| k.status == "active")
        .count();
    assert_eq!(active, 5);
    app.stop().await;
}

async fn keys_of_another_account_are_not_found(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = app.reseller().await;
    let b = app.reseller().await;
    let panel_b = panel(&app, &b.client_id, &b.password).await;
    let err = panel_b.revoke_api_key(&a.api_key_id).await.unwrap_err();
    assert!(matches!(err, Error::ApiKeyNotFound { .. }), "{err:?}");
    assert_eq!(err.status(), Some(404));
    let err = panel_b
        .revoke_api_key("rsk_000000000000000000000000")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ApiKeyNotFound { .. }), "{err:?}");
    // A's key still works and is not listed for B.
    let client_a =
        PartnerClient::new(&app.base_url, Credentials::new(&a.client_id, &a.secret)).unwrap();
    client_a.balances().await.unwrap();
    let listed = panel_b.list_api_keys().await.unwrap();
    assert!(listed.api_keys.iter().all(|k| k.api_key_id != a.api_key_id));
    assert_eq!(panel_b.me().await.unwrap().client_id, b.client_id);
    app.stop().await;
}

async fn api_keys_cannot_use_the_panel(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let paths = [
        (reqwest::Method::GET, "/v1/billing/resellers/me".to_owned()),
        (
            reqwest::Method::GET,
            "/v1/billing/resellers/me/api-keys".to_owned(),
        ),
        (
            reqwest::Method::POST,
            "/v1/billing/resellers/me/api-keys".to_owned(),
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/billing/resellers/me/api-keys/{}", r.api_key_id),
        ),
    ];
    for (method, path) in paths {
        let response = app
            .partner(method.clone(), &path, &r)
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{method} {path}");
        let problem: serde_json::Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Reseller.PanelSessionRequired");
    }
    let token = app.session(&r.client_id, &r.password).await;
    // The body of a key creation is optional.
    let bare = app
        .http
        .post(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 201);
    let bare: serde_json::Value = bare.json().await.unwrap();
    assert!(bare["secret"].as_str().unwrap().starts_with("rss_"));
    assert!(bare["name"].is_null());
    // So is it when the client says JSON but sends nothing, as some clients always do.
    let empty = app
        .http
        .post(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 201);
    // A body that is there must still be JSON, and is refused whole.
    let text = app
        .http
        .post(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body("name=x")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 400);
    let problem: serde_json::Value = text.json().await.unwrap();
    assert_eq!(problem["code"], "Request.ValidationFailed");
    assert_eq!(problem["field"], "body");
    let keys: serde_json::Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        keys["apiKeys"].as_array().unwrap().len(),
        3,
        "nothing created or revoked by the API key, nor by the refused body"
    );
    assert_eq!(keys["apiKeys"][0]["status"], "active");
    app.stop().await;
}
