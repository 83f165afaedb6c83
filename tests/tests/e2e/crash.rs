//! Crashes: the server is killed with SIGKILL at random moments under concurrent licenses and
//! promo batches, and restarted, ten times. Afterwards every acknowledged write replays
//! unchanged, every attempted key — retried with its request — is charged exactly once, and
//! every balance equals its ledger.

use std::collections::BTreeMap;
use std::time::Duration;

use partner_billing::clock::Clock;
use partner_billing::domain::{ClientId, Login, Password, PlanSlug};
use partner_billing::plans::{self, NewPlan};
use partner_billing::store::Store;
use partner_billing::{accounts, quota};
use partner_billing_tests::TempDir;
use partner_billing_tests::process::ServerProcess;
use rand::Rng;
use serde_json::{Value, json};

/// Kills per run: 10 in CI; `PARTNER_BILLING_CRASH_KILLS=100` for the documented slow run.
fn kills() -> usize {
    std::env::var("PARTNER_BILLING_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(10)
}
const CLIENTS: usize = 6;
const CREDIT: i64 = 100_000;

struct Key {
    client_id: String,
    secret: String,
}

/// What one write asked for, and what it cost.
struct Attempt {
    path: &'static str,
    body: Value,
    units: i64,
    acknowledged: Option<Value>,
}

async fn panel_key(base_url: &str, client_id: &str, password: &str) -> Key {
    let http = reqwest::Client::new();
    let session: Value = http
        .post(format!("{base_url}/v1/billing/resellers/sessions"))
        .json(&json!({"clientId": client_id, "password": password}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key: Value = http
        .post(format!("{base_url}/v1/billing/resellers/me/api-keys"))
        .bearer_auth(session["sessionToken"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    Key {
        client_id: client_id.to_owned(),
        secret: key["secret"].as_str().unwrap().to_owned(),
    }
}

fn request(base_url: &str, key: &Key, attempt: &Attempt) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{base_url}{}", attempt.path))
        .header("X-Client-Id", &key.client_id)
        .header("X-Client-Secret", &key.secret)
        .timeout(Duration::from_secs(20))
        .json(&attempt.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_loses_nothing_and_charges_once() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.path.join("billing.db").display());
    let password = "crash test password";
    let client_id = {
        let store = Store::connect(&url, Clock::system()).await.unwrap();
        let plan = NewPlan::new(
            PlanSlug::parse("slug", "pro").unwrap(),
            "Pro",
            None,
            None,
            None,
        )
        .unwrap();
        plans::create_plan(&store, plan).await.unwrap();
        plans::add_user(&store, &Login::parse("login", "alice").unwrap())
            .await
            .unwrap();
        let client_id =
            accounts::create_reseller(&store, "Crash", Password::parse("p", password).unwrap())
                .await
                .unwrap();
        quota::credit(
            &store,
            &client_id,
            &PlanSlug::parse("p", "pro").unwrap(),
            CREDIT,
            "crash test",
        )
        .await
        .unwrap();
        store.close().await;
        client_id
    };
    let mut server = ServerProcess::start(&url, &dir.path, &[]);
    let key = std::sync::Arc::new(panel_key(&server.base_url, client_id.as_str(), password).await);

    let mut attempts: BTreeMap<String, Attempt> = BTreeMap::new();
    let kills = kills();
    for round in 0..kills {
        let base_url = server.base_url.clone();
        let workers: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let base_url = base_url.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for i in 0.. {
                        let idempotency_key = format!("crash-{round}-{client}-{i}");
                        let attempt = if i % 3 == 0 {
                            Attempt {
                                path: "/v1/billing/partner/promo-batches",
                                body: json!({"planSlug":"pro","count":4,"idempotencyKey":idempotency_key}),
                                units: 4,
                                acknowledged: None,
                            }
                        } else {
                            Attempt {
                                path: "/v1/billing/partner/licenses",
                                body: json!({"planSlug":"pro","login":"alice","idempotencyKey":idempotency_key}),
                                units: 1,
                                acknowledged: None,
                            }
                        };
                        let outcome = request(&base_url, &key, &attempt).send().await;
                        let mut attempt = attempt;
                        let stop = match outcome {
                            Ok(response) if response.status() == 200 => {
                                attempt.acknowledged = response.json().await.ok();
                                false
                            }
                            Ok(response) => panic!("unexpected {} before the kill", response.status()),
                            Err(_) => true,
                        };
                        done.push((idempotency_key, attempt));
                        if stop {
                            return done;
                        }
                    }
                    done
                })
            })
            .collect();
        let delay = rand::thread_rng().gen_range(30..250);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.kill();
        for worker in workers {
            attempts.extend(worker.await.unwrap());
        }
        server = ServerProcess::start(&url, &dir.path, &[]);
    }

    let acknowledged = attempts
        .values()
        .filter(|a| a.acknowledged.is_some())
        .count();
    assert!(
        acknowledged > kills,
        "the load did real work: {acknowledged} acknowledged"
    );
    let unknown = attempts.len() - acknowledged;
    eprintln!(
        "{kills} kills, {} writes attempted, {acknowledged} acknowledged, {unknown} cut off",
        attempts.len()
    );

    // Every attempted key, retried with its request: acknowledged ones replay unchanged, the
    // others settle; each is charged exactly once.
    let mut charged = 0;
    for (idempotency_key, attempt) in &attempts {
        let response = request(&server.base_url, &key, attempt)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{idempotency_key}");
        let body: Value = response.json().await.unwrap();
        if let Some(original) = &attempt.acknowledged {
            assert_eq!(&body, original, "{idempotency_key} replays unchanged");
        }
        charged += attempt.units;
    }
    server.kill();
    let store = Store::connect(&url, Clock::system()).await.unwrap();
    let balances = quota::balances_for(&store, &ClientId::parse("c", client_id.as_str()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        balances.balances[0].remaining_balance,
        CREDIT - charged,
        "no unit lost, none charged twice"
    );
    let report = quota::audit_verify(&store).await.unwrap();
    assert!(
        report.discrepancies.is_empty(),
        "{:?}",
        report.discrepancies
    );
    store.close().await;
}
