//! Copies of a request whose key succeeded long before, sent all at once: each is answered
//! from the stored record (the replay, or `422 Reseller.IdempotencyKeyReused` for another
//! request under the key), never `409 Reseller.RequestInProgress`, which only says that the
//! key's first request is still running. Licenses (group commit on and off), promo batches and
//! redemptions; on one server and on two replicas of one database.

use partner_billing_tests::product::REDEMPTIONS;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases, partner_request};
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};

both_databases!(
    copies_of_a_completed_license_are_answered_from_its_record,
    copies_of_a_completed_license_are_answered_from_its_record_without_group_commit,
    copies_of_a_completed_license_on_two_replicas_are_answered_from_its_record,
    copies_of_a_completed_promo_batch_are_answered_from_its_record,
    copies_of_a_completed_promo_batch_on_two_replicas_are_answered_from_its_record,
    copies_of_a_completed_redemption_are_answered_from_its_record
);

const LICENSES: &str = "/v1/billing/partner/licenses";
const BATCHES: &str = "/v1/billing/partner/promo-batches";

/// Copies sent at once.
const COPIES: usize = 20;

/// One answer: status, whether it says it is a replay, body.
type Answer = (u16, bool, Value);

/// Sends every request at once and collects the answers, in the order of `requests`.
async fn storm(requests: Vec<RequestBuilder>) -> Vec<Answer> {
    let sent: Vec<_> = requests
        .into_iter()
        .map(|request| {
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let replayed = response
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true");
                (status, replayed, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for request in sent {
        answers.push(request.await.unwrap());
    }
    answers
}

/// Asserts each answer: the replay of `original` for a copy, 422 for another request.
fn assert_answered_from_the_record(answers: &[Answer], same: &[bool], original: &Value) {
    for (i, ((status, replayed, body), same)) in answers.iter().zip(same).enumerate() {
        if *same {
            assert_eq!(*status, 200, "copy {i}: {body}");
            assert!(*replayed, "copy {i} is a replay");
            assert_eq!(body, original, "copy {i}");
        } else {
            assert_eq!(*status, 422, "other request {i}: {body}");
            assert_eq!(body["code"], "Reseller.IdempotencyKeyReused", "{i}: {body}");
        }
    }
}

/// The body sent `i`-th: the original request for even `i`, else another request under the
/// same key, one of `others` in turn.
fn body_at(i: usize, original: &Value, others: &[Value]) -> Value {
    if i.is_multiple_of(2) {
        original.clone()
    } else {
        others[(i / 2) % others.len()].clone()
    }
}

async fn set_up_licenses(app: &TestApp) -> Reseller {
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("empty", Some(30)).await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 5).await;
    r
}

/// The license under `key`, issued once; then `COPIES` requests under the key at once through
/// `bases` in turn.
async fn license_storm(app: &TestApp, bases: &[String]) {
    let r = set_up_licenses(app).await;
    let original =
        json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "settled-license-1"});
    let first = app
        .partner(Method::POST, LICENSES, &r)
        .json(&original)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let license: Value = first.json().await.unwrap();
    let others = [
        json!({"planSlug": "nope", "login": "alice", "idempotencyKey": "settled-license-1"}),
        json!({"planSlug": "pro", "login": "nobody", "idempotencyKey": "settled-license-1"}),
        json!({"planSlug": "empty", "login": "alice", "idempotencyKey": "settled-license-1"}),
        json!({"planSlug": "pro", "login": "bob", "idempotencyKey": "settled-license-1"}),
    ];
    for round in 0..3 {
        let requests = (0..COPIES)
            .map(|i| {
                let base = &bases[i % bases.len()];
                partner_request(&app.http, base, Method::POST, LICENSES, &r).json(&body_at(
                    i + round,
                    &original,
                    &others,
                ))
            })
            .collect();
        let answers = storm(requests).await;
        let same: Vec<bool> = (0..COPIES).map(|i| (i + round).is_multiple_of(2)).collect();
        assert_answered_from_the_record(&answers, &same, &license);
    }
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(4),
        "one unit charged, once"
    );
    app.assert_audit_clean().await;
}

async fn copies_of_a_completed_license_are_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    license_storm(&app, std::slice::from_ref(&app.base_url)).await;
    app.stop().await;
}

async fn copies_of_a_completed_license_are_answered_from_its_record_without_group_commit(db: Db) {
    let app = TestApp::spawn_without_group_commit(&db).await;
    license_storm(&app, std::slice::from_ref(&app.base_url)).await;
    app.stop().await;
}

async fn copies_of_a_completed_license_on_two_replicas_are_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    license_storm(&app, &[app.base_url.clone(), replica.base_url.clone()]).await;
    replica.stop().await;
    app.stop().await;
}

/// The batch under `key`, generated once; then `COPIES` requests under the key at once.
async fn batch_storm(app: &TestApp, bases: &[String]) {
    let r = set_up_licenses(app).await;
    let original = json!({"planSlug": "pro", "count": 2, "idempotencyKey": "settled-batch-1"});
    let first = app
        .partner(Method::POST, BATCHES, &r)
        .json(&original)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let batch: Value = first.json().await.unwrap();
    let others = [
        json!({"planSlug": "pro", "count": 3, "idempotencyKey": "settled-batch-1"}),
        json!({"planSlug": "nope", "count": 2, "idempotencyKey": "settled-batch-1"}),
        json!({"planSlug": "empty", "count": 2, "idempotencyKey": "settled-batch-1"}),
        // A license request under the batch's key: the key is shared by both operations.
        json!({"planSlug": "pro", "login": "alice", "idempotencyKey": "settled-batch-1"}),
    ];
    for round in 0..3 {
        let requests = (0..COPIES)
            .map(|i| {
                let base = &bases[i % bases.len()];
                let body = body_at(i + round, &original, &others);
                let path = if body.get("login").is_some() {
                    LICENSES
                } else {
                    BATCHES
                };
                partner_request(&app.http, base, Method::POST, path, &r).json(&body)
            })
            .collect();
        let answers = storm(requests).await;
        let same: Vec<bool> = (0..COPIES).map(|i| (i + round).is_multiple_of(2)).collect();
        assert_answered_from_the_record(&answers, &same, &batch);
    }
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(3),
        "two units charged, once"
    );
    app.assert_audit_clean().await;
}

async fn copies_of_a_completed_promo_batch_are_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    batch_storm(&app, std::slice::from_ref(&app.base_url)).await;
    app.stop().await;
}

async fn copies_of_a_completed_promo_batch_on_two_replicas_are_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    batch_storm(&app, &[app.base_url.clone(), replica.base_url.clone()]).await;
    replica.stop().await;
    app.stop().await;
}

async fn copies_of_a_completed_redemption_are_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let r = set_up_licenses(&app).await;
    let token = app.operator_token("backend").await;
    let (_, codes) = app.promo_batch(&r, "pro", 2).await;
    let original =
        json!({"code": codes[0], "login": "alice", "idempotencyKey": "settled-redeem-1"});
    let first = app
        .product(Method::POST, REDEMPTIONS, &token)
        .json(&original)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let license: Value = first.json().await.unwrap();
    let others = [
        json!({"code": codes[0], "login": "bob", "idempotencyKey": "settled-redeem-1"}),
        json!({"code": codes[1], "login": "alice", "idempotencyKey": "settled-redeem-1"}),
        json!({"code": codes[0], "login": "nobody", "idempotencyKey": "settled-redeem-1"}),
        json!({"code": "not a code", "login": "alice", "idempotencyKey": "settled-redeem-1"}),
    ];
    let bases = [app.base_url.clone(), replica.base_url.clone()];
    for round in 0..3 {
        let requests = (0..COPIES)
            .map(|i| {
                app.http
                    .post(format!("{}{REDEMPTIONS}", bases[i % 2]))
                    .bearer_auth(&token)
                    .json(&body_at(i + round, &original, &others))
            })
            .collect();
        let answers = storm(requests).await;
        let same: Vec<bool> = (0..COPIES).map(|i| (i + round).is_multiple_of(2)).collect();
        assert_answered_from_the_record(&answers, &same, &license);
    }
    // The second code was never redeemed: the copies that named it were refused by the key.
    let redeemed = app
        .count_rows("SELECT COUNT(*) FROM promo_redemptions")
        .await;
    assert_eq!(redeemed, 1);
    replica.stop().await;
    app.stop().await;
}
