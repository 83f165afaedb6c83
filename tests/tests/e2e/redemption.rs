//! Promo-code redemption through the product API: the license, replay, no charge, normalised
//! input, one answer for unknown and malformed codes, and expiry.

use partner_billing_client::{Error, ProductClient};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases, header_shape, logs};
use serde_json::Value;

use crate::redemption_limits::{setup, status_and_body};

both_databases!(
    redemption_and_identical_replay,
    normalised_input_redeems,
    unknown_and_malformed_codes_are_indistinguishable,
    expired_code_is_gone,
);

async fn ledger_kinds(app: &TestApp, r: &Reseller) -> Vec<String> {
    let entries = app.ledger(&r.client_id).await;
    entries.into_iter().map(|e| e.kind).collect()
}

async fn redemption_and_identical_replay(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app, None, None).await;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 2).await;
    app.user("alice").await;

    let first = app.redeem(&token, &codes[0], "alice", "redeem-0001").await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let license: Value = first.json().await.unwrap();
    let mut keys: Vec<&str> = license
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "batchId",
            "clientId",
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
    assert!(uuid::Uuid::parse_str(license["licenseId"].as_str().unwrap()).is_ok());
    partner_billing_tests::assert_time_ordered_id(license["licenseId"].as_str().unwrap());
    assert_eq!(license["planSlug"], "pro");
    assert_eq!(license["login"], "alice");
    assert_eq!(license["source"], "promo");
    assert_eq!(license["clientId"], r.client_id.as_str());
    assert_eq!(license["batchId"], batch_id.as_str());
    let created = license["createdUtc"].as_i64().unwrap();
    assert_eq!(license["expiresUtc"].as_i64(), Some(created + 30 * 86_400));

    let replay = app.redeem(&token, &codes[0], "alice", "redeem-0001").await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(
        replay.json::<Value>().await.unwrap(),
        license,
        "identical replay"
    );

    let (status, problem) =
        status_and_body(app.redeem(&token, &codes[1], "alice", "redeem-0001").await).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("Reseller.IdempotencyKeyReused"))
    );

    // Keys belong to their token: another token's same key is a new request.
    let other = app.operator_token("backend-2").await;
    let (status, problem) =
        status_and_body(app.redeem(&other, &codes[0], "alice", "redeem-0001").await).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("Promo.AlreadyRedeemed"))
    );

    // Through the SDK, with a generated key kept for the retry.
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let issued = sdk
        .redeem_promo_code(&codes[1], "alice", None)
        .await
        .unwrap();
    assert!(!issued.replayed);
    assert_eq!(issued.value.batch_id, batch_id);
    let again = sdk
        .redeem_promo_code(&codes[1], "alice", Some(&issued.idempotency_key))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.value, issued.value);

    // Paid at generation: redemption charges nothing and writes no ledger entry.
    assert_eq!(app.balance(&r, "pro").await, Some(48));
    assert_eq!(ledger_kinds(&app, &r).await, ["credit", "promo_batch"]);
    assert_eq!(
        app.count_rows("SELECT COUNT(*) FROM licenses WHERE source = 'promo'")
            .await,
        2
    );
    app.assert_audit_clean().await;

    // Neither the codes nor the tokens reach the log.
    let log = logs::captured();
    for code in &codes {
        let normalised = code.replace('-', "");
        assert!(
            !log.contains(code.as_str()) && !log.contains(&normalised),
            "a code is logged"
        );
    }
    assert!(
        !log.contains(&token) && !log.contains(&other),
        "a token is logged"
    );
    app.stop().await;
}

/// The code as a person might type it: lower case, spaces for hyphens, `1` as `l`/`I` and `0`
/// as `o`/`O`.
fn as_typed(code: &str) -> String {
    let mut ones = 0;
    let mut zeros = 0;
    code.chars()
        .map(|c| match c {
            '-' => ' ',
            '1' => {
                ones += 1;
                if ones % 2 == 0 { 'I' } else { 'l' }
            }
            '0' => {
                zeros += 1;
                if zeros % 2 == 0 { 'O' } else { 'o' }
            }
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

async fn normalised_input_redeems(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app, None, None).await;
    let (_, codes) = app.promo_batch(&r, "pro", 20).await;
    app.user("alice").await;
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    // The code with the most ambiguous symbols; one in 20 without any is all but impossible.
    let code = codes
        .iter()
        .max_by_key(|c| c.chars().filter(|ch| matches!(ch, '0' | '1')).count())
        .unwrap();
    let typed = as_typed(code);
    assert!(
        typed.contains(['l', 'I', 'o', 'O']),
        "{typed} exercises I/L/O"
    );
    assert_ne!(&typed, code);
    sdk.redeem_promo_code(&typed, "alice", None).await.unwrap();
    let other = codes.iter().find(|c| *c != code).unwrap();
    let spaced = format!("  {}  ", other.to_lowercase().replace('-', " - "));
    sdk.redeem_promo_code(&spaced, "alice", None).await.unwrap();
    // The same code, typed differently, is the same code.
    let error = sdk
        .redeem_promo_code(code, "alice", None)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::AlreadyRedeemed { .. }), "{error}");
    app.stop().await;
}

async fn unknown_and_malformed_codes_are_indistinguishable(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (_, token) = setup(&app, None, None).await;
    app.user("alice").await;
    let long = "X".repeat(2000);
    let inputs = [
        "ABCD-EFGH-JKMN-PQRS",
        "abcd efgh jkmn pqrs",
        "not a code",
        "ABCD-EFGH-JKMN-PQRU",
        "ABCD-EFGH-JKMN-PQR",
        "ABCD-EFGH-JKMN-PQRST",
        "ÄBCD-EFGH-JKMN-PQRS",
        "",
        long.as_str(),
    ];
    let mut answers = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let response = app
            .redeem(&token, input, "alice", &format!("unknown-{i:04}"))
            .await;
        assert_eq!(response.status(), 404, "{input:.30}");
        let headers = header_shape(&response);
        // Every problem names its own request; apart from that id the answers are one.
        let mut problem: Value = response.json().await.unwrap();
        let request_id = problem
            .as_object_mut()
            .unwrap()
            .remove("requestId")
            .expect("a problem names its request");
        assert!(request_id.as_str().is_some_and(|id| !id.is_empty()));
        answers.push((headers, serde_json::to_vec(&problem).unwrap()));
    }
    let (headers, body) = &answers[0];
    assert!(headers.contains(&(
        "content-type".to_owned(),
        "application/problem+json".to_owned()
    )));
    let problem: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(problem["code"], "Promo.CodeNotFound");
    assert_eq!(problem["status"], 404);
    let mut members: Vec<&String> = problem.as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(members, ["code", "detail", "status", "title", "type"]);
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer, &answers[0], "input {i} answered differently");
    }
    let text = String::from_utf8_lossy(body);
    assert!(
        !text.contains("ABCD") && !text.to_lowercase().contains("not a code"),
        "{text}"
    );
    app.stop().await;
}

async fn expired_code_is_gone(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app, None, Some(1)).await;
    let (_, codes) = app.promo_batch(&r, "pro", 2).await;
    app.user("alice").await;
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    app.store.clock().advance(86_400 - 60);
    sdk.redeem_promo_code(&codes[0], "alice", None)
        .await
        .unwrap();
    app.store.clock().advance(120);
    let response = app.redeem(&token, &codes[1], "alice", "late-redeem").await;
    let (status, problem) = status_and_body(response).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (410, Some("Promo.CodeExpired"))
    );
    let error = sdk
        .redeem_promo_code(&codes[1], "alice", None)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::CodeExpired { .. }), "{error}");
    assert_eq!(app.count_rows("SELECT COUNT(*) FROM licenses").await, 1);
    app.stop().await;
}
