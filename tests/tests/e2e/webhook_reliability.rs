//! Webhook delivery across process deaths and replicas, with the real server binary:
//! events pending when a server is SIGKILLed are all delivered after the restart, and two
//! server processes on one database send each event once while the receiver answers.

use std::collections::BTreeSet;

use partner_billing::clock::Clock;
use partner_billing::domain::{Login, Password, PlanSlug};
use partner_billing::plans::{self, NewPlan};
use partner_billing::store::Store;
use partner_billing::{accounts, quota};
use partner_billing_tests::process::ServerProcess;
use partner_billing_tests::receiver::{Receiver, eventually};
use partner_billing_tests::{Db, TempDir, both_databases, fresh_database, panel_session};
use serde_json::{Value, json};

both_databases!(
    events_pending_at_a_sigkill_are_delivered_after_restart,
    two_server_processes_send_each_event_once
);

const PASSWORD: &str = "webhook reliability password";

/// A fresh database with a plan, a login and a credited reseller; the master key in a file.
struct Setup {
    url: String,
    _db_dir: Option<TempDir>,
    dir: TempDir,
    key_file: String,
    client_id: String,
}

impl Setup {
    async fn new(db: &Db) -> Self {
        let (url, db_dir) = fresh_database(db).await;
        let dir = TempDir::new();
        let key_file = dir.path.join("master.key");
        partner_billing_tests::write_private(
            &key_file,
            hex::encode(rand::random::<[u8; 32]>()).as_bytes(),
        );
        let store = Store::connect(&url, Clock::system()).await.unwrap();
        let plan = NewPlan::new(
            PlanSlug::parse("s", "pro").unwrap(),
            "Pro",
            None,
            None,
            None,
        )
        .unwrap();
        plans::create_plan(&store, plan).await.unwrap();
        plans::add_user(&store, &Login::parse("l", "alice").unwrap())
            .await
            .unwrap();
        let client_id =
            accounts::create_reseller(&store, "Hooks", Password::parse("p", PASSWORD).unwrap())
                .await
                .unwrap();
        quota::credit(
            &store,
            &client_id,
            &PlanSlug::parse("p", "pro").unwrap(),
            1000,
            "test",
        )
        .await
        .unwrap();
        store.close().await;
        Self {
            url,
            _db_dir: db_dir,
            key_file: key_file.display().to_string(),
            dir,
            client_id: client_id.to_string(),
        }
    }

    /// A server process with webhooks to loopback allowed and the given retry schedule.
    fn server(&self, backoff: &str) -> ServerProcess {
        ServerProcess::start(
            &self.url,
            &self.dir.path,
            &[
                ("PARTNER_BILLING_MASTER_KEY_FILE", &self.key_file),
                ("PARTNER_BILLING_WEBHOOK_ALLOW_INSECURE", "true"),
                ("PARTNER_BILLING_WEBHOOK_BACKOFF", backoff),
            ],
        )
    }

    /// An API key secret and a subscribed endpoint, through the panel of `base_url`.
    async fn key_and_endpoint(&self, base_url: &str, receiver_url: &str) -> String {
        let http = reqwest::Client::new();
        let session = panel_session(&http, base_url, &self.client_id, PASSWORD).await;
        let key: Value = http
            .post(format!("{base_url}/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&session)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let endpoint = http
            .post(format!(
                "{base_url}/v1/billing/resellers/me/webhook-endpoints"
            ))
            .bearer_auth(&session)
            .json(&json!({"url": receiver_url, "eventTypes": ["license.issued"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(endpoint.status(), 201);
        key["secret"].as_str().unwrap().to_owned()
    }

    /// Issues one license through `base_url`; returns its id.
    async fn issue(&self, base_url: &str, secret: &str) -> String {
        let response = reqwest::Client::new()
            .post(format!("{base_url}/v1/billing/partner/licenses"))
            .header("X-Client-Id", &self.client_id)
            .header("X-Client-Secret", secret)
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

    /// Messages of the outbox in `status`.
    async fn messages(&self, status: &str) -> i64 {
        let store = Store::connect(&self.url, Clock::system()).await.unwrap();
        let count = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_messages WHERE status = $1")
            .bind(status)
            .fetch_one(store.pool())
            .await
            .unwrap();
        store.close().await;
        count
    }
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
    let secret = setup
        .key_and_endpoint(&server.base_url, &receiver.url)
        .await;
    let mut licenses = BTreeSet::new();
    for _ in 0..10 {
        licenses.insert(setup.issue(&server.base_url, &secret).await);
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
    let secret = setup
        .key_and_endpoint(&servers[0].base_url, &receiver.url)
        .await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let base_url = servers[i % 2].base_url.clone();
        let secret = secret.clone();
        let client_id = setup.client_id.clone();
        tasks.push(tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{base_url}/v1/billing/partner/licenses"))
                .header("X-Client-Id", &client_id)
                .header("X-Client-Secret", &secret)
                .json(&json!({
                    "planSlug": "pro",
                    "login": "alice",
                    "idempotencyKey": format!("lic-{i}-twoprocs"),
                }))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }));
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
