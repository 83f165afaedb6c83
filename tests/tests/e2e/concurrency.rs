//! Real concurrent requests: one idempotency key charges once; a small balance is never
//! overdrawn.

use partner_billing_tests::{Db, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    sustained_concurrent_writers_never_fail,
    fifty_requests_with_one_key_charge_once,
    forty_distinct_keys_against_five_units
);

const LICENSES: &str = "/v1/billing/partner/licenses";

async fn fifty_requests_with_one_key_charge_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 10).await;
    let body = json!({"planSlug":"pro","login":"alice","idempotencyKey":"storm-key-1"});
    let requests = (0..50).map(|_| {
        let request = app.partner(Method::POST, LICENSES, &r).json(&body);
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").is_some();
            (status, retry_after, response.json::<Value>().await.unwrap())
        })
    });
    let mut licenses = Vec::new();
    let mut in_progress = 0;
    for request in requests {
        let (status, retry_after, body) = request.await.unwrap();
        match status {
            200 => licenses.push(body),
            409 => {
                assert_eq!(body["code"], "Reseller.RequestInProgress");
                assert!(retry_after, "409 carries Retry-After");
                in_progress += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!licenses.is_empty());
    assert_eq!(licenses.len() + in_progress, 50);
    assert!(
        licenses.iter().all(|l| l == &licenses[0]),
        "every 200 is the same license"
    );
    assert_eq!(app.balance(&r, "pro").await, Some(9), "one unit charged");
    // After the storm the key replays.
    let replay: Value = app
        .partner(Method::POST, LICENSES, &r)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replay, licenses[0]);
    let ledger = partner_billing::quota::ledger(
        &app.store,
        &partner_billing::domain::ClientId::parse("c", &r.client_id).unwrap(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(ledger.iter().filter(|e| e.kind == "license").count(), 1);
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn forty_distinct_keys_against_five_units(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let requests = (0..40).map(|i| {
        let request = app.partner(Method::POST, LICENSES, &r).json(
            &json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("distinct-{i:04}")}),
        );
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    });
    let (mut ok, mut refused) = (0, 0);
    for request in requests {
        match request.await.unwrap() {
            (200, _) => ok += 1,
            (402, body) => {
                assert_eq!(body["code"], "Reseller.InsufficientQuota");
                refused += 1;
            }
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert_eq!((ok, refused), (5, 35));
    assert_eq!(app.balance(&r, "pro").await, Some(0));
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Sixteen clients writing at once for a few hundred requests (licenses, promo batches and
/// balance reads mixed): no request fails with a 5xx (on SQLite, no `SQLITE_BUSY` surfacing as a
/// 500), and every unit is accounted for.
async fn sustained_concurrent_writers_never_fail(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 100_000).await;
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let requests: Vec<reqwest::RequestBuilder> = (0..20)
                .map(|i| match i % 4 {
                    0 => app.partner(Method::POST, "/v1/billing/partner/promo-batches", &r).json(
                        &json!({"planSlug":"pro","count":5,"idempotencyKey":format!("sustained-{client}-{i}")}),
                    ),
                    1 => app.partner(Method::GET, "/v1/billing/partner/balances", &r),
                    _ => app.partner(Method::POST, LICENSES, &r).json(
                        &json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("sustained-{client}-{i}")}),
                    ),
                })
                .collect();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for request in requests {
                    statuses.push(request.send().await.unwrap().status().as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for client in clients {
        statuses.extend(client.await.unwrap());
    }
    assert_eq!(statuses.len(), 320);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // 16 clients × 5 batches × 5 codes + 16 × 10 licenses.
    assert_eq!(app.balance(&r, "pro").await, Some(100_000 - 400 - 160));
    app.assert_audit_clean().await;
    app.stop().await;
}
