//! Webhook delivery across process deaths and replicas, with the real server binary:
//! events pending when a server is SIGKILLed are all delivered after the restart, and two
//! server processes on one database send each event once while the receiver answers.

use std::collections::BTreeSet;

use partner_billing::clock::Clock;
use partner_billing::store::Store;
use partner_billing_tests::process::ServerProcess;
use partner_billing_tests::receiver::{Receiver, eventually};
use partner_billing_tests::seeded::{ApiKey, SeededDatabase};
use partner_billing_tests::{Db, both_databases};
use serde_json::{Value, json};

both_databases!(
    events_pending_at_a_sigkill_are_delivered_after_restart,
    two_server_processes_send_each_event_once
);

/// A seeded database (plan `pro`, login `alice`, a credited reseller, a master key file) and
/// how its server processes run.
struct Setup {
    seeded: SeededDatabase,
}

impl Setup {
    async fn new(db: &Db) -> Self {
        let seeded = SeededDatabase::new(db, "Hooks", "webhook reliability password", 1000).await;
        Self { seeded }
    }

    /// A server process with webhooks to loopback allowed and the given retry schedule.
    fn server(&self, backoff: &str) -> ServerProcess {
        ServerProcess::start(
            &self.seeded.url,
            &self.seeded.dir.path,
            &[
                self.seeded.key_file_env(),
                ("PARTNER_BILLING_WEBHOOK_ALLOW_INSECURE", "true"),
                ("PARTNER_BILLING_WEBHOOK_BACKOFF", backoff),
            ],
        )
    }

    /// An API key and a subscribed endpoint, through the panel of `base_url`.
    async fn key_and_endpoint(&self, base_url: &str, receiver_url: &str) -> ApiKey {
        let key = self.seeded.api_key(base_url).await;
        let session = self.seeded.panel_session(base_url).await;
        let endpoint = reqwest::Client::new()
            .post(format!(
                "{base_url}/v1/billing/resellers/me/webhook-endpoints"
            ))
            .bearer_auth(&session)
            .json(&json!({"url": receiver_url, "eventTypes": ["license.issued"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(endpoint.status(), 201);
        key
    }

    /// Messages of the outbox in `status`.
    async fn messages(&self, status: &str) -> i64 {
        let store = Store::connect(&self.seeded.url, Clock::system())
            .await
            .unwrap();
        let count = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_messages WHERE status = $1")
            .bind(status)
            .fetch_one(store.pool())
            .await
            .unwrap();
        store.close().await;
        count
    }
}

/// Issues one license through `base_url` under a fresh idempotency key; returns its id.
async fn issue(base_url: &str, key: &ApiKey) -> String {
    let response = reqwest::Client::new()
        .post(format!("{base_url}/v1/billing/partner/licenses"))
        .header("X-Client-Id", &key.client_id)
        .header("X-Client-Secret", &key.secret)
        .json(&json!({
            "planSlug": "pro",
            "login": "alice",
            "idempotencyKey": format!("lic-{}", uuid::Uuid::new_v4().simple()),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["licenseId"].as_str().unwrap().to_owned()
}

/// The license ids named by the events received.
fn license_ids(received: &[partner_billing_tests::receiver::Received]) -> BTreeSet<String> {
    received
        .iter()
        .map(|r| r.json()["data"]["licenseId"].as_str().unwrap().to_owned())
        .collect()
}

async fn events_pending_at_a_sigkill_are_delivered_after_restart(db: Db) {
    let setup = Setup::new(&db).await;
    let receiver = Receiver::start().await;
    receiver.respond_with(503);
    // Retries every second for long enough that nothing is given up during the test.
    let backoff = vec!["1s"; 60].join(",");
    let mut server = setup.server(&backoff);
    let key = setup
        .key_and_endpoint(&server.base_url, &receiver.url)
        .await;
    let mut licenses = BTreeSet::new();
    for _ in 0..10 {
        licenses.insert(issue(&server.base_url, &key).await);
    }
    server.kill();
    assert!(
        setup.messages("pending").await > 0,
        "events were pending at the kill"
    );
    assert_eq!(setup.messages("delivered").await, 0);

    receiver.respond_with(204);
    let restarted = setup.server(&backoff);
    eventually(
        "every pending event delivered after the restart",
        || async { (setup.messages("delivered").await == 10).then_some(()) },
    )
    .await;
    // Every license's event reached the receiver, and each was answered 204 at least once.
    assert_eq!(license_ids(&receiver.received()), licenses);
    assert_eq!(setup.messages("pending").await, 0);
    drop(restarted);
}

async fn two_server_processes_send_each_event_once(db: Db) {
    let setup = Setup::new(&db).await;
    let receiver = Receiver::start().await;
    let servers = [setup.server("1s,1s"), setup.server("1s,1s")];
    let key = setup
        .key_and_endpoint(&servers[0].base_url, &receiver.url)
        .await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let base_url = servers[i % 2].base_url.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move { issue(&base_url, &key).await }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    eventually("all 30 delivered", || async {
        (setup.messages("delivered").await == 30).then_some(())
    })
    .await;
    let received = receiver.received();
    let ids: BTreeSet<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), 30);
    assert_eq!(received.len(), 30, "no event sent twice");
}
