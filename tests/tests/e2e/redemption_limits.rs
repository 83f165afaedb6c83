//! Limits on redemption: the per-code limit under concurrency on two replicas, one redemption
//! per login, and the per-login guessing limit that every replica enforces.

use partner_billing_client::{Error, ProductClient};
use partner_billing_tests::product::REDEMPTIONS;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::{Method, Response};
use serde_json::{Value, json};

both_databases!(
    three_redemptions_under_twenty_concurrent_logins_on_two_replicas,
    same_login_twice_is_already_redeemed,
    failed_attempts_are_limited_per_login,
    failed_attempts_are_limited_per_operator_token,
    concurrent_guesses_for_one_login_never_pass_the_limit,
);

/// A reseller with 50 units of `pro` (30-day licenses, the given promo policy) and a token.
pub async fn setup(
    app: &TestApp,
    redemptions: Option<i64>,
    validity: Option<i64>,
) -> (Reseller, String) {
    let r = app.reseller().await;
    app.plan_with_policy("pro", Some(30), redemptions, validity)
        .await;
    app.credit(&r, "pro", 50).await;
    (r, app.operator_token("backend").await)
}

/// The status and the JSON body of an answer.
pub async fn status_and_body(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn three_redemptions_under_twenty_concurrent_logins_on_two_replicas(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let (r, token) = setup(&app, Some(3), None).await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    for i in 0..20 {
        app.user(&format!("user-{i:02}")).await;
    }
    let requests: Vec<_> = (0..20)
        .map(|i| {
            let server = if i % 2 == 0 { &app } else { &replica };
            let body = json!({"code": codes[0], "login": format!("user-{i:02}"), "idempotencyKey": format!("race-{i:04}")});
            let request = server.product(Method::POST, REDEMPTIONS, &token).json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut granted = 0;
    for request in requests {
        match request.await.unwrap() {
            (200, license) => {
                assert_eq!(license["source"], "promo");
                granted += 1;
            }
            (409, problem) => assert_eq!(problem["code"], "Promo.CodeExhausted"),
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert_eq!(granted, 3, "exactly the code's three redemptions");
    assert_eq!(
        app.count_rows("SELECT COUNT(*) FROM licenses WHERE source = 'promo'")
            .await,
        3
    );
    assert_eq!(
        app.count_rows("SELECT COUNT(*) FROM promo_redemptions")
            .await,
        3
    );
    assert_eq!(
        app.count_rows("SELECT MAX(redemptions) FROM promo_codes")
            .await,
        3
    );
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(49),
        "only the batch was charged"
    );
    app.assert_audit_clean().await;
    replica.stop().await;
    app.stop().await;
}

async fn same_login_twice_is_already_redeemed(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app, Some(3), None).await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    app.user("alice").await;
    app.user("bob").await;
    assert_eq!(
        app.redeem(&token, &codes[0], "alice", "alice-first")
            .await
            .status(),
        200
    );
    // A refusal is the same answer however fast it is retried with its key: the failed
    // attempt's transaction, and its lock on the key, are gone before the answer.
    for _ in 0..5 {
        let (status, problem) =
            status_and_body(app.redeem(&token, &codes[0], "alice", "alice-again").await).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (409, Some("Promo.AlreadyRedeemed"))
        );
    }
    assert_eq!(
        app.redeem(&token, &codes[0], "bob", "bob-first-1")
            .await
            .status(),
        200
    );
    let (status, problem) =
        status_and_body(app.redeem(&token, &codes[0], "carol", "carol-first").await).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("Reseller.UnknownLogin"))
    );
    assert_eq!(
        app.count_rows("SELECT MAX(redemptions) FROM promo_codes")
            .await,
        2
    );
    app.stop().await;
}

async fn failed_attempts_are_limited_per_login(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let (r, token) = setup(&app, Some(2), None).await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    app.user("alice").await;
    app.user("bob").await;
    for i in 0..10 {
        let guess = format!("ZZZZ-ZZZZ-ZZZZ-{i:04}");
        let response = app
            .redeem(&token, &guess, "alice", &format!("guess-{i:04}"))
            .await;
        assert_eq!(response.status(), 404, "guess {i}");
    }
    // The eleventh attempt is refused, even with a valid code, on either replica.
    for server in [&app, &replica] {
        let response = server
            .redeem(&token, &codes[0], "alice", "alice-valid")
            .await;
        assert_eq!(response.status(), 429);
        let retry_after: i64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "Promo.TooManyAttempts");
    }
    let sdk = ProductClient::new(&app.base_url, &token).unwrap();
    let error = sdk
        .redeem_promo_code(&codes[0], "alice", None)
        .await
        .unwrap_err();
    let Error::TooManyAttempts {
        retry_after: Some(wait),
        ..
    } = error
    else {
        panic!("expected TooManyAttempts, got {error}");
    };
    // Another login is not affected.
    sdk.redeem_promo_code(&codes[0], "bob", None).await.unwrap();
    // Once the window frees, alice may try again.
    app.store
        .clock()
        .advance(i64::try_from(wait.as_secs()).unwrap());
    let issued = sdk
        .redeem_promo_code(&codes[0], "alice", Some("alice-valid"))
        .await
        .unwrap();
    assert_eq!(issued.value.login, "alice");
    replica.stop().await;
    app.stop().await;
}

/// Spreading guesses over many logins does not multiply the limit: one operator token gets 1000
/// failed redemptions an hour, then `429 Promo.TooManyAttempts`; another token is not affected.
async fn failed_attempts_are_limited_per_operator_token(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, token) = setup(&app, Some(5), None).await;
    let other_token = app.operator_token("support").await;
    let (_, codes) = app.promo_batch(&r, "pro", 1).await;
    let logins: Vec<String> = (0..101).map(|i| format!("guesser-{i:03}")).collect();
    for login in &logins {
        app.user(login).await;
    }
    // 100 logins × 10 wrong guesses each: every login stays within its own limit.
    for (l, login) in logins.iter().take(100).enumerate() {
        for g in 0..10 {
            let guess = format!("ZZZZ-ZZZZ-{l:04}-{g:04}");
            let response = app
                .redeem(&token, &guess, login, &format!("spread-{l:03}-{g:02}"))
                .await;
            assert_eq!(response.status(), 404, "guess {l}/{g}");
        }
    }
    // The 1001st failed guess, from a login that has tried nothing yet, is refused; even a valid
    // code waits, and nothing is redeemed.
    let response = app
        .redeem(&token, &codes[0], &logins[100], "spread-valid")
        .await;
    assert!(response.headers().contains_key("retry-after"));
    let (status, problem) = status_and_body(response).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (429, Some("Promo.TooManyAttempts"))
    );
    // Another token is not affected: the same code redeems there.
    let response = app
        .redeem(&other_token, &codes[0], &logins[100], "support-valid")
        .await;
    assert_eq!(response.status(), 200);
    app.stop().await;
}

/// Thirty wrong codes for one login at once, over two replicas: at most ten are tried (404),
/// every other is refused (429). Each attempt is committed before it is counted, so of two
/// concurrent attempts the later count sees the other.
async fn concurrent_guesses_for_one_login_never_pass_the_limit(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    let (_r, token) = setup(&app, None, None).await;
    app.user("alice").await;
    let guesses: Vec<_> = (0..30)
        .map(|i| {
            let server = if i % 2 == 0 { &app } else { &replica };
            let request = server
                .product(
                    reqwest::Method::POST,
                    partner_billing_tests::product::REDEMPTIONS,
                    &token,
                )
                .json(&serde_json::json!({
                    "code": format!("ZZZZ-ZZZZ-ZZZZ-{i:04}"),
                    "login": "alice",
                    "idempotencyKey": format!("concurrent-guess-{i:04}"),
                }))
                .send();
            tokio::spawn(request)
        })
        .collect();
    let mut tried = 0;
    for guess in guesses {
        match guess.await.unwrap().unwrap().status().as_u16() {
            404 => tried += 1,
            429 => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert!(
        tried <= 10,
        "{tried} guesses were tried, past the limit of ten"
    );
    assert!(tried >= 1, "some guess is tried");
    replica.stop().await;
    app.stop().await;
}
