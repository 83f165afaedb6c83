//! Tenants never touch each other: an idempotency key is scoped to its account, a replay never
//! returns another account's codes, and nothing in a body selects the charged account.

use partner_billing_tests::{Db, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(idempotency_keys_and_batches_are_per_account);

async fn idempotency_keys_and_batches_are_per_account(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = app.reseller().await;
    let b = app.reseller().await;
    app.plan("pro").await;
    app.plan("only-a").await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&a, "pro", 10).await;
    app.credit(&a, "only-a", 1).await;
    app.credit(&b, "pro", 10).await;

    // The same key and body from two accounts: two batches, each charged to its own account.
    let body = json!({"planSlug":"pro","count":3,"idempotencyKey":"shared-key-0001"});
    let send = |r, body: &Value| {
        app.partner(Method::POST, "/v1/billing/partner/promo-batches", r)
            .json(body)
            .send()
    };
    let batch_a: Value = send(&a, &body).await.unwrap().json().await.unwrap();
    let response_b = send(&b, &body).await.unwrap();
    assert_eq!(response_b.status(), 200);
    assert!(
        response_b.headers().get("idempotent-replayed").is_none(),
        "B's request is not A's replay"
    );
    let batch_b: Value = response_b.json().await.unwrap();
    assert_ne!(batch_a["batchId"], batch_b["batchId"]);
    assert_ne!(batch_a["codes"], batch_b["codes"], "B never sees A's codes");
    assert_eq!(app.balance(&a, "pro").await, Some(7));
    assert_eq!(app.balance(&b, "pro").await, Some(7));
    // Each replay returns its own account's batch.
    assert_eq!(
        send(&a, &body)
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
        batch_a
    );
    assert_eq!(
        send(&b, &body)
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
        batch_b
    );

    // A key A used for a batch is free for B to use for a license, and vice versa.
    let license = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &b)
        .json(&json!({"planSlug":"pro","login":"bob","idempotencyKey":"shared-key-0001-x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(license.status(), 200);
    let reuse_by_a = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &a)
        .json(&json!({"planSlug":"pro","login":"alice","idempotencyKey":"shared-key-0001-x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reuse_by_a.status(), 200, "B's key does not bind A");
    assert_eq!(app.balance(&a, "pro").await, Some(6));
    assert_eq!(app.balance(&b, "pro").await, Some(6));

    // Balances are the caller's own.
    let balances_b: Value = app
        .partner(Method::GET, "/v1/billing/partner/balances", &b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        balances_b,
        json!({"balances":[{"productSlug":"pro","remainingBalance":6}]})
    );

    // B cannot spend A's quota on a plan only A holds, whatever the body says.
    for extra in [json!({"clientId": a.client_id}), json!({"accountId": 1})] {
        let mut body =
            json!({"planSlug":"only-a","login":"bob","idempotencyKey":"steal-attempt-1"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = app
            .partner(Method::POST, "/v1/billing/partner/licenses", &b)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
    }
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &b)
        .json(&json!({"planSlug":"only-a","login":"bob","idempotencyKey":"steal-attempt-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 402, "B holds no only-a quota");
    assert_eq!(app.balance(&a, "only-a").await, Some(1));
    app.assert_audit_clean().await;
    app.stop().await;
}
