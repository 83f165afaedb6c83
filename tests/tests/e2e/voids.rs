//! Voiding promo codes (docs/design.md, "Reading back and voiding"): a whole batch or listed
//! codes, idempotent, no refund; a voided code redeems as `410 Promo.CodeVoided` while licenses
//! already redeemed stay; the `promo_batch.voided` event; other accounts' batches and codes are
//! unknown; and every bad input is refused with nothing changed.

use partner_billing_client::{Error, LicenseQuery};
use partner_billing_tests::receiver::subscribe;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

use crate::reads::{partner, state};

both_databases!(
    a_voided_batch_redeems_no_more_and_keeps_its_licenses,
    voiding_another_accounts_or_an_unknown_batch_is_not_found,
    listed_codes_are_voided_in_any_spelling,
    bad_void_requests_change_nothing,
    a_redemption_retried_after_the_void_is_answered_from_its_record,
);

const VOID_CODES: &str = "/v1/billing/partner/promo-codes/void";

async fn post(app: &TestApp, r: &Reseller, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = app.partner(Method::POST, path, r);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn void_batch_path(batch_id: &str) -> String {
    format!("/v1/billing/partner/promo-batches/{batch_id}/void")
}

async fn setup(app: &TestApp) -> (Reseller, String) {
    app.plan("pro").await;
    for login in ["alice", "bob", "carol"] {
        app.user(login).await;
    }
    let r = app.reseller().await;
    app.credit(&r, "pro", 20).await;
    let token = app.operator_token("backend").await;
    (r, token)
}

async fn redeem_code(
    app: &TestApp,
    token: &str,
    code: &str,
    login: &str,
    key: &str,
) -> (u16, Value) {
    let response = app.redeem(token, code, login, key).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn a_voided_batch_redeems_no_more_and_keeps_its_licenses(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app).await;
    let (_receiver, _panel, _endpoint) = subscribe(&app, &r, &["promo_batch.voided"]).await;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 3).await;
    let (status, redeemed) = redeem_code(&app, &token, &codes[0], "alice", "redeem-key-1").await;
    assert_eq!(status, 200);
    let balance = app.balance(&r, "pro").await;

    let (status, voided) = post(&app, &r, &void_batch_path(&batch_id), None).await;
    assert_eq!(status, 200, "{voided}");
    assert_eq!(voided["batchId"], batch_id.as_str());
    assert_eq!(voided["count"], 3);
    assert_eq!(voided["redeemed"], 1);
    let voided_utc = voided["voidedUtc"].as_i64().expect("voidedUtc set");
    // Again: the same answer, nothing changed, no second event.
    let before = state(&app).await;
    let (status, again) = post(&app, &r, &void_batch_path(&batch_id), None).await;
    assert_eq!(status, 200);
    assert_eq!(again, voided);
    assert_eq!(state(&app).await, before);
    // The SDK: the batch as the list shows it.
    let client = partner(&app, &r);
    let through_sdk = client.void_promo_batch(&batch_id).await.unwrap();
    assert_eq!(through_sdk.voided_utc, Some(voided_utc));
    let listed = client
        .list_promo_batches(&Default::default())
        .await
        .unwrap();
    assert_eq!(listed.promo_batches[0], through_sdk);

    // Its codes redeem no more, whoever tries; the redeemed license stays; nothing refunded.
    for (code, login) in [(&codes[1], "bob"), (&codes[0], "carol")] {
        let (status, body) =
            redeem_code(&app, &token, code, login, &format!("redeem-{login}-1")).await;
        assert_eq!(status, 410, "{body}");
        assert_eq!(body["code"], "Promo.CodeVoided");
        assert!(!body.to_string().contains(code.as_str()));
    }
    let licenses = client
        .list_licenses(&LicenseQuery::default())
        .await
        .unwrap();
    assert_eq!(licenses.licenses.len(), 1);
    assert_eq!(
        licenses.licenses[0].license_id,
        redeemed["licenseId"].as_str().unwrap()
    );
    assert_eq!(
        app.balance(&r, "pro").await,
        balance,
        "voiding refunds nothing"
    );
    // One event, naming the batch and never a code.
    let events: Vec<String> = sqlx::query_scalar(
        "SELECT body FROM webhook_events WHERE event_type = 'promo_batch.voided'",
    )
    .fetch_all(app.store.pool())
    .await
    .unwrap();
    assert_eq!(events.len(), 1);
    let event: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(event["data"]["batchId"], batch_id.as_str());
    assert_eq!(event["data"]["productSlug"], "pro");
    assert_eq!(event["data"]["voidedUtc"], voided_utc);
    for code in &codes {
        assert!(!events[0].contains(code.as_str()));
    }
    app.assert_audit_clean().await;
}

async fn voiding_another_accounts_or_an_unknown_batch_is_not_found(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (a, token) = setup(&app).await;
    let b = app.reseller().await;
    let (batch_id, codes) = app.promo_batch(&a, "pro", 2).await;
    let before = state(&app).await;
    for (who, id) in [
        (&b, batch_id.as_str()),
        (&a, "00000000-0000-4000-8000-000000000000"),
        (&a, "not-a-batch"),
    ] {
        let (status, body) = post(&app, who, &void_batch_path(id), None).await;
        assert_eq!(status, 404, "{id}: {body}");
        assert_eq!(body["code"], "Reseller.PromoBatchNotFound");
    }
    assert!(matches!(
        partner(&app, &b).void_promo_batch(&batch_id).await,
        Err(Error::PromoBatchNotFound { .. })
    ));
    // B listing A's codes: unknown to B, and still good for A's customers.
    let (status, body) = post(&app, &b, VOID_CODES, Some(json!({"codes": [codes[0]]}))).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"voided": 0, "unknown": [codes[0]]}));
    assert_eq!(state(&app).await, before, "nothing changed");
    assert_eq!(
        redeem_code(&app, &token, &codes[0], "alice", "redeem-key-1")
            .await
            .0,
        200
    );
}

/// `XXXX-XXXX-XXXX-XXXX` as a person might type it: lower case, spaces for hyphens.
fn sloppy(code: &str) -> String {
    format!(" {} ", code.to_lowercase().replace('-', " "))
}

async fn listed_codes_are_voided_in_any_spelling(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app).await;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 3).await;
    let other = app.reseller().await;
    app.credit(&other, "pro", 1).await;
    let (_, other_codes) = app.promo_batch(&other, "pro", 1).await;
    let balance = app.balance(&r, "pro").await;
    let unknown_but_well_formed = "ABCD-EFGH-JKMN-PQRS";
    let sent = vec![
        sloppy(&codes[0]),
        codes[0].clone(), // the same code twice counts once
        "not a code".to_owned(),
        other_codes[0].clone(),
        unknown_but_well_formed.to_owned(),
    ];
    let result = partner(&app, &r).void_promo_codes(&sent).await.unwrap();
    assert_eq!(result.voided, 1);
    assert_eq!(
        result.unknown,
        [
            "not a code",
            other_codes[0].as_str(),
            unknown_but_well_formed
        ]
    );
    let (status, body) = redeem_code(&app, &token, &codes[0], "alice", "redeem-key-1").await;
    assert_eq!(status, 410);
    assert_eq!(body["code"], "Promo.CodeVoided");
    // The batch itself is not voided; its other codes still redeem, and so does the other
    // account's code.
    assert_eq!(
        redeem_code(&app, &token, &codes[1], "alice", "redeem-key-2")
            .await
            .0,
        200
    );
    assert_eq!(
        redeem_code(&app, &token, &other_codes[0], "bob", "redeem-key-3")
            .await
            .0,
        200
    );
    let listed = partner(&app, &r)
        .list_promo_batches(&Default::default())
        .await
        .unwrap();
    assert_eq!(listed.promo_batches[0].batch_id, batch_id);
    assert_eq!(listed.promo_batches[0].voided_utc, None);
    assert_eq!(listed.promo_batches[0].redeemed, 1);
    // Again: the same count, nothing changed.
    let before = state(&app).await;
    let (status, body) = post(
        &app,
        &r,
        VOID_CODES,
        Some(json!({"codes": [codes[0].to_lowercase()]})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"voided": 1, "unknown": []}));
    assert_eq!(state(&app).await, before);
    assert_eq!(
        app.balance(&r, "pro").await,
        balance,
        "voiding refunds nothing"
    );
    // A thousand codes at once (the body's limit is 64 KiB).
    let mut many: Vec<String> = codes.iter().map(|c| sloppy(c)).collect();
    many.resize(1000, "XXXX XXXX XXXX XXXX  ".to_owned());
    let (status, body) = post(&app, &r, VOID_CODES, Some(json!({ "codes": many }))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["voided"], 3);
    assert_eq!(body["unknown"].as_array().unwrap().len(), 997);
}

async fn bad_void_requests_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, _token) = setup(&app).await;
    let (_, codes) = app.promo_batch(&r, "pro", 2).await;
    let before = state(&app).await;
    let thousand_and_one: Vec<&str> = std::iter::repeat_n(codes[0].as_str(), 1001).collect();
    for (what, body, field) in [
        ("no codes", json!({"codes": []}), "codes"),
        ("1001 codes", json!({"codes": thousand_and_one}), "codes"),
        ("missing", json!({}), "codes"),
        ("not a list", json!({"codes": codes[0]}), "codes"),
        ("a number", json!({"codes": [1]}), "codes[0]"),
        (
            "unknown field",
            json!({"codes": [codes[0]], "all": true}),
            "all",
        ),
    ] {
        let (status, problem) = post(&app, &r, VOID_CODES, Some(body)).await;
        assert_eq!(status, 400, "{what}: {problem}");
        assert_eq!(problem["code"], "Request.ValidationFailed", "{what}");
        assert_eq!(problem["field"], field, "{what}: {problem}");
        assert!(
            !problem.to_string().contains(&codes[0]),
            "{what}: a code in the error"
        );
    }
    // Over 64 KiB.
    let huge = vec!["A".repeat(100); 700];
    let (status, problem) = post(&app, &r, VOID_CODES, Some(json!({ "codes": huge }))).await;
    assert_eq!(status, 413);
    assert_eq!(problem["code"], "Request.PayloadTooLarge");
    // The SDK refuses out-of-range lists before sending.
    let client = partner(&app, &r);
    assert!(matches!(
        client.void_promo_codes::<&str>(&[]).await,
        Err(Error::InvalidInput { field: "codes", .. })
    ));
    assert!(matches!(
        client.void_promo_codes(&thousand_and_one).await,
        Err(Error::InvalidInput { field: "codes", .. })
    ));
    assert_eq!(state(&app).await, before, "nothing changed");
}

async fn a_redemption_retried_after_the_void_is_answered_from_its_record(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app).await;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 1).await;
    let (status, first) = redeem_code(&app, &token, &codes[0], "alice", "redeem-key-1").await;
    assert_eq!(status, 200);
    assert_eq!(
        post(&app, &r, &void_batch_path(&batch_id), None).await.0,
        200
    );
    let response = app.redeem(&token, &codes[0], "alice", "redeem-key-1").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("idempotent-replayed").unwrap(),
        "true"
    );
    let replayed: Value = response.json().await.unwrap();
    assert_eq!(replayed["licenseId"], first["licenseId"]);
}
