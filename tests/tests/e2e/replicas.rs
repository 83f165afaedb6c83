//! Three server processes of the real binary over one database, sharing nothing else: storms
//! on one idempotency key charge once, a small balance is never overdrawn, and revocation or
//! suspension through one replica acts on the next request to another.

use partner_billing::accounts::{self, Standing};
use partner_billing::domain::ClientId;
use partner_billing_tests::{
    Db, Reseller, TestApp, both_databases, panel_session, partner_request,
};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    storms_across_replicas_charge_once,
    revocation_and_suspension_reach_every_replica
);

/// Sends `bodies` round-robin over the replicas, all at once; returns (status, Retry-After?, body).
async fn storm(
    replicas: &[String],
    r: &Reseller,
    path: &str,
    bodies: Vec<Value>,
) -> Vec<(u16, bool, Value)> {
    let http = reqwest::Client::new();
    let requests: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let request =
                partner_request(&http, &replicas[i % replicas.len()], Method::POST, path, r)
                    .json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                (status, retry_after, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut out = Vec::new();
    for request in requests {
        out.push(request.await.unwrap());
    }
    out
}

/// The status of `GET /balances` on one replica.
async fn balances_status(base_url: &str, r: &Reseller) -> u16 {
    partner_request(
        &reqwest::Client::new(),
        base_url,
        Method::GET,
        "/v1/billing/partner/balances",
        r,
    )
    .send()
    .await
    .unwrap()
    .status()
    .as_u16()
}

/// Every answer is the one success or a 409 in progress with Retry-After; returns the success.
fn one_outcome(answers: &[(u16, bool, Value)]) -> Value {
    let successes: Vec<&Value> = answers
        .iter()
        .filter(|(s, _, _)| *s == 200)
        .map(|(_, _, b)| b)
        .collect();
    assert!(!successes.is_empty(), "{answers:?}");
    assert!(
        successes.iter().all(|b| *b == successes[0]),
        "every 200 is the same outcome"
    );
    for (status, retry_after, body) in answers.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["code"], "Reseller.RequestInProgress");
        assert!(retry_after);
    }
    successes[0].clone()
}

async fn storms_across_replicas_charge_once(db: Db) {
    let first = TestApp::spawn(&db).await;
    let r = first.reseller().await;
    first.plan_with_days("pro", Some(30)).await;
    first.plan_with_days("small", Some(30)).await;
    first.user("alice").await;
    first.credit(&r, "pro", 100).await;
    first.credit(&r, "small", 7).await;
    let processes = first.process_replicas(3);
    let replicas = processes.base_urls();

    let license = json!({"planSlug":"pro","login":"alice","idempotencyKey":"replica-license"});
    let answers = storm(
        &replicas,
        &r,
        "/v1/billing/partner/licenses",
        vec![license; 30],
    )
    .await;
    let issued = one_outcome(&answers);
    assert_eq!(issued["remainingBalance"], 99);
    assert_eq!(
        first.balance(&r, "pro").await,
        Some(99),
        "one unit for thirty requests"
    );

    let batch = json!({"planSlug":"pro","count":9,"idempotencyKey":"replica-batch"});
    let answers = storm(
        &replicas,
        &r,
        "/v1/billing/partner/promo-batches",
        vec![batch; 15],
    )
    .await;
    let generated = one_outcome(&answers);
    assert_eq!(generated["codes"].as_array().map(Vec::len), Some(9));
    assert_eq!(
        first.balance(&r, "pro").await,
        Some(90),
        "nine units for fifteen requests"
    );

    let distinct: Vec<Value> = (0..30)
        .map(|i| json!({"planSlug":"small","login":"alice","idempotencyKey":format!("replica-race-{i:03}")}))
        .collect();
    let answers = storm(&replicas, &r, "/v1/billing/partner/licenses", distinct).await;
    let ok = answers.iter().filter(|(s, _, _)| *s == 200).count();
    let refused = answers
        .iter()
        .filter(|(s, _, b)| *s == 402 && b["code"] == "Reseller.InsufficientQuota")
        .count();
    assert_eq!((ok, refused), (7, 23), "{answers:?}");
    assert_eq!(first.balance(&r, "small").await, Some(0));
    first.assert_audit_clean().await;
    drop(processes);
    first.stop().await;
}

async fn revocation_and_suspension_reach_every_replica(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let other = app.reseller().await;
    let processes = app.process_replicas(3);
    let [first, second, third] = <[String; 3]>::try_from(processes.base_urls()).unwrap();
    for replica in [&first, &second, &third] {
        assert_eq!(balances_status(replica, &r).await, 200);
    }

    // Revoked through the first replica's panel; refused by the second at once.
    let http = reqwest::Client::new();
    let session = panel_session(&http, &first, &r.client_id, &r.password).await;
    let revoked = http
        .delete(format!(
            "{first}/v1/billing/resellers/me/api-keys/{}",
            r.api_key_id
        ))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    assert_eq!(balances_status(&second, &r).await, 401);
    assert_eq!(balances_status(&third, &r).await, 401);

    // Suspended by the operator; refused by the third at once, then reinstated everywhere.
    assert_eq!(balances_status(&third, &other).await, 200);
    let client_id = ClientId::parse("clientId", &other.client_id).unwrap();
    accounts::set_standing(
        &app.store,
        &client_id,
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(balances_status(&third, &other).await, 401);
    assert_eq!(balances_status(&first, &other).await, 401);
    accounts::set_standing(
        &app.store,
        &client_id,
        Standing::Good,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(balances_status(&first, &other).await, 200);
    drop(processes);
    app.stop().await;
}
