//! Promo batches: all-or-nothing charging, the code format, replay for 72 hours, generation
//! failures that charge nothing, and concurrency on one key.
//!
//! Over 450 lines on purpose: one scenario per rule of promo batches, each spelling out its
//! requests and the rows it checks.

use partner_billing::store::FaultPoint;
use partner_billing_client::{Credentials, Error, PartnerClient};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases, logs};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

both_databases!(
    count_bounds_and_quota,
    a_hash_collision_redraws_the_code,
    batch_of_ten_and_its_replay,
    forced_failures_charge_nothing_and_retry_succeeds,
    codes_expire_from_recovery_after_72_hours,
    twenty_concurrent_requests_with_one_key,
    no_plaintext_code_in_database_or_log,
    a_retry_is_answered_without_drawing_codes,
);

const BATCHES: &str = "/v1/billing/partner/promo-batches";

async fn post(app: &TestApp, r: &Reseller, body: &Value) -> (u16, Value, bool) {
    let response = app
        .partner(Method::POST, BATCHES, r)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, response.json().await.unwrap(), replayed)
}

async fn count_rows(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(app.store.pool())
        .await
        .unwrap()
}

async fn ledger_kinds(app: &TestApp, r: &Reseller) -> Vec<String> {
    app.ledger(&r.client_id)
        .await
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

async fn setup(app: &TestApp, units: i64) -> Reseller {
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", units).await;
    r
}

async fn count_bounds_and_quota(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 5).await;
    for (i, count) in [
        json!(0),
        json!(1001),
        json!(-1),
        json!("5"),
        json!(1.5),
        json!(9223372036854775808u64),
        Value::Null,
    ]
    .into_iter()
    .enumerate()
    {
        let body =
            json!({"planSlug":"pro","count":count,"idempotencyKey":format!("bounds-{i:04}")});
        let (status, problem, _) = post(&app, &r, &body).await;
        assert_eq!(status, 400, "count {count}");
        assert_eq!(problem["code"], "Request.ValidationFailed");
        assert_eq!(problem["field"], "count", "count {count}: {problem}");
        assert_eq!(
            app.balance(&r, "pro").await,
            Some(5),
            "count {count} charged"
        );
    }
    let (status, problem, _) = post(
        &app,
        &r,
        &json!({"planSlug":"pro","count":6,"idempotencyKey":"over-balance"}),
    )
    .await;
    assert_eq!(status, 402);
    assert_eq!(problem["code"], "Reseller.InsufficientQuota");
    assert_eq!(app.balance(&r, "pro").await, Some(5), "no partial fill");
    let (status, problem, _) = post(
        &app,
        &r,
        &json!({"planSlug":"nope","count":1,"idempotencyKey":"unknown-plan"}),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("Reseller.UnknownPlan"))
    );
    let (status, batch, _) = post(
        &app,
        &r,
        &json!({"planSlug":"pro","count":5,"idempotencyKey":"exact-balance"}),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["remainingBalance"], 0);
    assert_eq!(batch["codes"].as_array().unwrap().len(), 5);
    assert_eq!(app.balance(&r, "pro").await, Some(0));
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_codes").await,
        5
    );
    app.assert_audit_clean().await;
    app.stop().await;
}

fn is_documented_code(code: &str) -> bool {
    let groups: Vec<&str> = code.split('-').collect();
    groups.len() == 4
        && groups.iter().all(|g| {
            g.len() == 4
                && g.bytes()
                    .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b))
        })
}

async fn batch_of_ten_and_its_replay(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 25).await;
    app.user("alice").await;
    let body = json!({"planSlug":"pro","count":10,"idempotencyKey":"batch-of-ten"});
    let (status, batch, replayed) = post(&app, &r, &body).await;
    assert_eq!(status, 200, "{batch}");
    assert!(!replayed);
    let mut keys: Vec<&String> = batch.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "batchId",
            "codes",
            "createdUtc",
            "orderPublicId",
            "planSlug",
            "remainingBalance"
        ]
    );
    assert!(uuid::Uuid::parse_str(batch["batchId"].as_str().unwrap()).is_ok());
    partner_billing_tests::assert_time_ordered_id(batch["batchId"].as_str().unwrap());
    assert!(uuid::Uuid::parse_str(batch["orderPublicId"].as_str().unwrap()).is_ok());
    assert_eq!(batch["planSlug"], "pro");
    assert_eq!(batch["remainingBalance"], 15);
    let codes = batch["codes"].as_array().unwrap();
    assert_eq!(codes.len(), 10);
    let mut unique = std::collections::HashSet::new();
    for code in codes {
        let object = code.as_object().unwrap();
        assert_eq!(object.len(), 1, "each object holds only `code`: {code}");
        let text = object["code"].as_str().unwrap();
        assert!(is_documented_code(text), "{text}");
        unique.insert(text.to_owned());
    }
    assert_eq!(unique.len(), 10);

    let (status, again, replayed) = post(&app, &r, &body).await;
    assert_eq!(status, 200);
    assert!(replayed, "Idempotent-Replayed: true");
    assert_eq!(again, batch, "same ids and codes");
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(15),
        "replay charges nothing"
    );

    let (status, problem, _) = post(
        &app,
        &r,
        &json!({"planSlug":"pro","count":9,"idempotencyKey":"batch-of-ten"}),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("Reseller.IdempotencyKeyReused"))
    );
    let license = app
        .partner(Method::POST, "/v1/billing/partner/licenses", &r)
        .json(&json!({"planSlug":"pro","login":"alice","idempotencyKey":"batch-of-ten"}))
        .send()
        .await
        .unwrap();
    assert_eq!(license.status(), 422);
    assert_eq!(
        license.json::<Value>().await.unwrap()["code"],
        "Reseller.IdempotencyKeyReused"
    );
    assert_eq!(app.balance(&r, "pro").await, Some(15));
    assert_eq!(ledger_kinds(&app, &r).await, ["credit", "promo_batch"]);

    // Through the SDK: a generated key is reported, and the replay is flagged.
    let sdk = PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap();
    let issued = sdk.generate_promo_batch("pro", 3, None).await.unwrap();
    assert!(!issued.replayed);
    assert_eq!(issued.value.codes.len(), 3);
    assert_eq!(issued.value.remaining_balance, 12);
    let again = sdk
        .generate_promo_batch("pro", 3, Some(&issued.idempotency_key))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.value, issued.value);
    let err = sdk.generate_promo_batch("pro", 13, None).await.unwrap_err();
    assert!(matches!(err, Error::InsufficientQuota { .. }), "{err:?}");
    assert_eq!(app.balance(&r, "pro").await, Some(12));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn forced_failures_charge_nothing_and_retry_succeeds(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 50).await;
    for (i, point) in [
        FaultPoint::DrawCodes,
        FaultPoint::SealPayload,
        FaultPoint::AfterDebit,
        FaultPoint::AfterCodes,
        FaultPoint::BeforeCommit,
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"planSlug":"pro","count":4,"idempotencyKey":format!("failing-{i:03}")});
        app.store.inject_fault(point);
        let (status, problem, _) = post(&app, &r, &body).await;
        assert_eq!(status, 500, "{point:?}");
        assert_eq!(
            problem["code"], "Reseller.PromoGenerationFailed",
            "{point:?}"
        );
        let charged_before = 50 - 4 * i64::try_from(i).unwrap();
        assert_eq!(
            app.balance(&r, "pro").await,
            Some(charged_before),
            "{point:?} charged"
        );
        assert_eq!(
            count_rows(&app, "SELECT COUNT(*) FROM promo_codes").await,
            4 * i64::try_from(i).unwrap(),
            "{point:?} stored hashes"
        );
        assert_eq!(
            ledger_kinds(&app, &r).await.len(),
            1 + i,
            "{point:?} wrote a ledger entry"
        );
        // The same key runs again and charges once.
        let (status, batch, replayed) = post(&app, &r, &body).await;
        assert_eq!(status, 200, "{point:?}: {batch}");
        assert!(!replayed);
        assert_eq!(app.balance(&r, "pro").await, Some(charged_before - 4));
        let (_, again, replayed) = post(&app, &r, &body).await;
        assert!(replayed);
        assert_eq!(again, batch);
    }
    assert_eq!(app.balance(&r, "pro").await, Some(30));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn codes_expire_from_recovery_after_72_hours(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 10).await;
    let body = json!({"planSlug":"pro","count":3,"idempotencyKey":"expiring-batch"});
    let (status, batch, _) = post(&app, &r, &body).await;
    assert_eq!(status, 200);
    // Just inside the window: still recoverable.
    // Wall time passes during the test too: stop a few seconds short of the window, then step
    // past it.
    app.store.clock().advance(72 * 3600 - 10);
    let (status, again, replayed) = post(&app, &r, &body).await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(again, batch);
    app.store.clock().advance(11);
    let (status, problem, _) = post(&app, &r, &body).await;
    assert_eq!(status, 410, "{problem}");
    assert_eq!(problem["code"], "Reseller.PromoCodesExpired");
    assert_eq!(problem["orderPublicId"], batch["orderPublicId"]);
    assert_eq!(problem["batchId"], batch["batchId"]);
    assert!(problem.get("codes").is_none());
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(7),
        "never a second charge"
    );
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_recovery_payloads").await,
        0,
        "payload gone"
    );
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_codes").await,
        3,
        "codes stay redeemable"
    );

    // The purge removes payloads of batches nobody retried.
    let other = json!({"planSlug":"pro","count":2,"idempotencyKey":"purged-batch"});
    assert_eq!(post(&app, &r, &other).await.0, 200);
    assert_eq!(
        partner_billing::promo::purge_expired(&app.store)
            .await
            .unwrap(),
        0
    );
    app.store.clock().advance(72 * 3600 + 1);
    assert_eq!(
        partner_billing::promo::purge_expired(&app.store)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_recovery_payloads").await,
        0
    );
    let (status, problem, _) = post(&app, &r, &other).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (410, Some("Reseller.PromoCodesExpired"))
    );
    assert_eq!(app.balance(&r, "pro").await, Some(5));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn twenty_concurrent_requests_with_one_key(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 100).await;
    let body = json!({"planSlug":"pro","count":7,"idempotencyKey":"concurrent-batch"});
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let request = app.partner(Method::POST, BATCHES, &r).json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                (status, retry_after, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut batches = Vec::new();
    for request in requests {
        match request.await.unwrap() {
            (200, _, batch) => batches.push(batch),
            (409, retry_after, problem) => {
                assert_eq!(problem["code"], "Reseller.RequestInProgress");
                assert!(retry_after);
            }
            (status, _, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert!(!batches.is_empty());
    assert!(
        batches.iter().all(|b| b == &batches[0]),
        "every 200 is the same batch"
    );
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(93),
        "count units charged once"
    );
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_batches").await,
        1
    );
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn no_plaintext_code_in_database_or_log(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 20).await;
    let body = json!({"planSlug":"pro","count":20,"idempotencyKey":"secret-codes"});
    let (status, batch, _) = post(&app, &r, &body).await;
    assert_eq!(status, 200);
    assert_eq!(post(&app, &r, &body).await.0, 200);
    let mut dump = String::new();
    for table in [
        "promo_batches",
        "promo_codes",
        "promo_recovery_payloads",
        "idempotency_records",
        "ledger_entries",
    ] {
        let texts = sqlx::query(AssertSqlSafe(format!("SELECT * FROM {table}")))
            .fetch_all(app.store.pool())
            .await
            .unwrap();
        for row in texts {
            use sqlx::{Column, Row};
            for column in row.columns() {
                if let Ok(Some(text)) = row.try_get::<Option<String>, _>(column.name()) {
                    dump.push_str(&text);
                    dump.push('\n');
                }
            }
        }
    }
    assert!(
        dump.contains(batch["batchId"].as_str().unwrap()),
        "the dump reads the tables"
    );
    let log = logs::captured();
    for code in batch["codes"].as_array().unwrap() {
        let shown = code["code"].as_str().unwrap();
        let normalised = shown.replace('-', "");
        for form in [shown, normalised.as_str()] {
            assert!(!dump.contains(form), "a code is stored in clear");
            assert!(!log.contains(form), "a code is in the debug log");
        }
    }
    app.stop().await;
}

async fn a_hash_collision_redraws_the_code(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 20).await;
    let (status, first, _) = post(
        &app,
        &r,
        &json!({"planSlug":"pro","count":5,"idempotencyKey":"first-batch"}),
    )
    .await;
    assert_eq!(status, 200);
    app.store.inject_fault(FaultPoint::CodeCollision);
    let body = json!({"planSlug":"pro","count":5,"idempotencyKey":"colliding-batch"});
    let (status, second, _) = post(&app, &r, &body).await;
    assert_eq!(status, 200, "a collision never fails the batch: {second}");
    let codes = |batch: &Value| -> Vec<String> {
        batch["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["code"].as_str().unwrap().to_owned())
            .collect()
    };
    let (a, b) = (codes(&first), codes(&second));
    assert_eq!(b.len(), 5);
    assert!(b.iter().all(|code| !a.contains(code)));
    assert_eq!(
        count_rows(&app, "SELECT COUNT(*) FROM promo_codes").await,
        10,
        "every code has its own hash"
    );
    assert!(logs::captured().contains("promo code hash collision; redrawing"));
    // The sealed payload holds the redrawn code: the replay shows exactly what was returned.
    let (_, replay, replayed) = post(&app, &r, &body).await;
    assert!(replayed);
    assert_eq!(replay, second);
    assert_eq!(app.balance(&r, "pro").await, Some(10));
    app.assert_audit_clean().await;
    app.stop().await;
}

/// A retry of a stored batch is answered from its record before any code is drawn: with the
/// draw made to fail, the retry still replays, and the armed failure is left for the next
/// fresh batch, which it fails without charging.
async fn a_retry_is_answered_without_drawing_codes(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 10).await;
    let body = json!({"planSlug":"pro","count":2,"idempotencyKey":"retry-no-draw-1"});
    let (status, first, _) = post(&app, &r, &body).await;
    assert_eq!(status, 200);
    app.store.inject_fault(FaultPoint::DrawCodes);
    let (status, replay, replayed) = post(&app, &r, &body).await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(replay, first);
    let fresh = json!({"planSlug":"pro","count":2,"idempotencyKey":"retry-no-draw-2"});
    let (status, problem, _) = post(&app, &r, &fresh).await;
    assert_eq!(status, 500, "the draw failure was still armed: {problem}");
    assert_eq!(problem["code"], "Reseller.PromoGenerationFailed");
    assert_eq!(app.balance(&r, "pro").await, Some(8));
    app.assert_audit_clean().await;
    app.stop().await;
}
