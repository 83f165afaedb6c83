//! Webhooks (docs/webhooks.md): endpoints through the SDK, events from every write path recorded
//! with their cause (and never for a refused request), Standard Webhooks signatures checked by
//! an independent verifier (the `standardwebhooks` crate), retries, `410`, redirects, the SSRF
//! rule at registration, low-balance alerts, and two replicas delivering each event once.
//!
//! Over 450 lines on purpose: one scenario per rule of docs/webhooks.md, each spelling out its
//! requests, its receiver and what arrives there.

use std::collections::{BTreeMap, BTreeSet};

use partner_billing::domain::ClientId;
use partner_billing::webhooks::{self, WebhookSettings, outbox};
use partner_billing::wire::CreateWebhookEndpointRequest;
use partner_billing_client::{
    Credentials, Error, PanelClient, PartnerClient, WebhookEndpoint, verify_webhook,
};
use partner_billing_tests::receiver::{Received, eventually, outbox_settled, subscribe};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use serde_json::{Value, json};

both_databases!(
    endpoints_are_created_listed_capped_and_deleted,
    endpoints_of_another_account_are_not_found,
    non_public_and_malformed_urls_are_refused,
    a_license_event_is_signed_in_the_standard_webhooks_format,
    an_attempt_is_listed_at_the_time_it_was_signed,
    deliveries_are_listed_by_when_they_were_made,
    refused_requests_and_unsubscribed_types_send_nothing,
    every_write_path_sends_its_event,
    balance_low_fires_once_per_crossing,
    failures_are_retried_on_the_schedule_then_marked_failed,
    a_receiver_that_recovers_gets_every_event,
    gone_disables_the_endpoint_and_redirects_are_not_followed,
    two_replicas_deliver_each_event_once,
    a_rolled_key_sends_expired_once_its_grace_ends,
);

const ALL_TYPES: &[&str] = &partner_billing::wire::WEBHOOK_EVENT_TYPES;

async fn panel(app: &TestApp, r: &Reseller) -> PanelClient {
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    panel.login(&r.client_id, &r.password).await.unwrap();
    panel
}

fn partner(app: &TestApp, r: &Reseller) -> PartnerClient {
    PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap()
}

/// Rows of a table, straight from the database.
async fn rows(app: &TestApp, table: &str) -> i64 {
    app.count_rows(&format!("SELECT COUNT(*) FROM {table}"))
        .await
}

/// Checks the signature with the `standardwebhooks` crate, not with our own code.
/// The endpoint's recorded attempts, once there is one.
async fn recorded_attempts(
    panel: &PanelClient,
    endpoint_id: &str,
) -> Vec<partner_billing::wire::WebhookDelivery> {
    eventually("the attempt recorded", || async {
        let d = panel
            .webhook_deliveries(endpoint_id)
            .await
            .unwrap()
            .deliveries;
        (!d.is_empty()).then_some(d)
    })
    .await
}

fn independently_verified(secret: &str, request: &Received) {
    let verifier = standardwebhooks::Webhook::new(secret).expect("the secret is a whsec_ secret");
    verifier
        .verify(&request.body, &request.headers)
        .expect("the standardwebhooks crate accepts the signature");
}

async fn endpoints_are_created_listed_capped_and_deleted(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r).await;
    let created = panel
        .create_webhook_endpoint(
            "http://127.0.0.1:9/hook",
            &["license.issued", "balance.low", "license.issued"],
            Some("backend"),
        )
        .await
        .unwrap();
    assert!(created.webhook_endpoint_id.starts_with("rwe_"));
    assert_eq!(created.event_types, ["license.issued", "balance.low"]);
    assert_eq!(created.status, "enabled");
    assert_eq!(created.description.as_deref(), Some("backend"));
    let key = created
        .secret
        .strip_prefix("whsec_")
        .expect("whsec_ prefix");
    assert_eq!(key.len(), 32, "base64 of 24 bytes");
    assert!(
        !format!("{created:?}").contains(key),
        "Debug hides the secret"
    );

    // The list never shows a secret.
    let raw: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/webhook-endpoints"))
        .bearer_auth(app.session(&r.client_id, &r.password).await)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!raw.to_string().contains(key));
    assert!(!raw.to_string().contains("whsec_"));
    let listed = panel
        .list_webhook_endpoints()
        .await
        .unwrap()
        .webhook_endpoints;
    assert_eq!(
        listed,
        [WebhookEndpoint {
            webhook_endpoint_id: created.webhook_endpoint_id.clone(),
            url: "http://127.0.0.1:9/hook".to_owned(),
            event_types: vec!["license.issued".to_owned(), "balance.low".to_owned()],
            description: Some("backend".to_owned()),
            status: "enabled".to_owned(),
            created_utc: created.created_utc,
        }]
    );

    for _ in 0..4 {
        panel
            .create_webhook_endpoint("http://127.0.0.1:9/hook", &["webhook.test"], None)
            .await
            .unwrap();
    }
    let sixth = panel
        .create_webhook_endpoint("http://127.0.0.1:9/hook", &["webhook.test"], None)
        .await
        .unwrap_err();
    assert!(
        matches!(sixth, Error::WebhookEndpointLimitReached { .. }),
        "{sixth:?}"
    );
    assert_eq!(sixth.code().map(|c| c.status()), Some(409));
    assert_eq!(
        panel
            .list_webhook_endpoints()
            .await
            .unwrap()
            .webhook_endpoints
            .len(),
        5
    );

    panel
        .delete_webhook_endpoint(&created.webhook_endpoint_id)
        .await
        .unwrap();
    let again = panel
        .delete_webhook_endpoint(&created.webhook_endpoint_id)
        .await
        .unwrap_err();
    assert!(
        matches!(again, Error::WebhookEndpointNotFound { .. }),
        "{again:?}"
    );
    let listed = panel
        .list_webhook_endpoints()
        .await
        .unwrap()
        .webhook_endpoints;
    assert_eq!(listed.len(), 4);
    assert!(
        listed
            .iter()
            .all(|e| e.webhook_endpoint_id != created.webhook_endpoint_id)
    );
    // A slot is free again.
    panel
        .create_webhook_endpoint("http://127.0.0.1:9/hook", &["webhook.test"], None)
        .await
        .unwrap();
}

async fn endpoints_of_another_account_are_not_found(db: Db) {
    let app = TestApp::spawn(&db).await;
    let owner = app.reseller().await;
    let other = app.reseller().await;
    let owner_panel = panel(&app, &owner).await;
    let other_panel = panel(&app, &other).await;
    let endpoint = owner_panel
        .create_webhook_endpoint("http://127.0.0.1:9/hook", &["webhook.test"], None)
        .await
        .unwrap();
    let id = endpoint.webhook_endpoint_id.as_str();
    for id in [id, "rwe_000000000000000000000000", "nonsense"] {
        let delete = other_panel.delete_webhook_endpoint(id).await.unwrap_err();
        let test = other_panel.test_webhook_endpoint(id).await.unwrap_err();
        let deliveries = other_panel.webhook_deliveries(id).await.unwrap_err();
        for err in [delete, test, deliveries] {
            assert!(
                matches!(err, Error::WebhookEndpointNotFound { .. }),
                "{err:?}"
            );
            assert_eq!(err.code().map(|c| c.status()), Some(404));
        }
    }
    // Nothing changed for the owner, and no test event was queued.
    assert_eq!(
        owner_panel
            .list_webhook_endpoints()
            .await
            .unwrap()
            .webhook_endpoints
            .len(),
        1
    );
    assert_eq!(rows(&app, "webhook_events").await, 0);
    // An API key cannot manage endpoints.
    let response = app
        .partner(
            reqwest::Method::GET,
            "/v1/billing/resellers/me/webhook-endpoints",
            &owner,
        )
        .send()
        .await
        .unwrap();
    assert!(
        response.status() == 401 || response.status() == 403,
        "{}",
        response.status()
    );
}

async fn non_public_and_malformed_urls_are_refused(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let panel = panel(&app, &r).await;
    // Refused even with --webhook-allow-insecure: one per range.
    for url in [
        "https://10.0.0.1/hook",          // private
        "https://172.16.0.1/hook",        // private
        "https://192.168.1.10/hook",      // private
        "https://169.254.169.254/latest", // link-local, cloud metadata
        "https://169.254.10.10/hook",     // link-local
        "https://100.100.100.200/hook",   // shared (CGNAT), metadata
        "https://[fd00:ec2::254]/hook",   // unique-local, metadata
        "https://[fe80::1]/hook",         // IPv6 link-local
        "https://[::ffff:10.0.0.1]/hook", // IPv4-mapped private
        "https://0.0.0.0/hook",           // unspecified
        "ftp://127.0.0.1/hook",           // scheme
        "not a url",
        "https://user:pw@127.0.0.1/hook",    // credentials
        "https://no-such-host.invalid/hook", // does not resolve
    ] {
        let err = panel
            .create_webhook_endpoint(url, &["license.issued"], None)
            .await
            .unwrap_err();
        match &err {
            Error::ValidationFailed { problem } => {
                assert_eq!(problem.field.as_deref(), Some("url"), "{url}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    for (types, field) in [
        (&[][..], "eventTypes"),
        (&["license.made"][..], "eventTypes"),
    ] {
        let err = panel
            .create_webhook_endpoint("http://127.0.0.1:9/hook", types, None)
            .await
            .unwrap_err();
        match &err {
            Error::ValidationFailed { problem } => {
                assert_eq!(problem.field.as_deref(), Some(field))
            }
            other => panic!("{types:?}: {other:?}"),
        }
    }
    assert_eq!(rows(&app, "webhook_endpoints").await, 0, "nothing created");

    // Without --webhook-allow-insecure: loopback and http:// are refused too.
    let strict = app
        .store
        .clone()
        .with_webhook_settings(WebhookSettings::default());
    let account_id: i64 = app
        .count_rows(&format!(
            "SELECT id FROM accounts WHERE client_id = '{}'",
            r.client_id
        ))
        .await;
    for url in [
        "http://127.0.0.1:9/hook",
        "https://127.0.0.1/hook",
        "https://[::1]/hook",
        "https://localhost/hook",
        "http://93.184.216.34/hook",
    ] {
        let request = CreateWebhookEndpointRequest {
            url: url.to_owned(),
            event_types: vec!["license.issued".to_owned()],
            description: None,
        };
        let err = webhooks::create_endpoint(
            &strict,
            account_id,
            &request,
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, partner_billing::Error::Validation(f) if f.field == "url"),
            "{url}: {err:?}"
        );
    }
    assert_eq!(rows(&app, "webhook_endpoints").await, 0, "nothing created");
}

async fn a_license_event_is_signed_in_the_standard_webhooks_format(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 10).await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["license.issued"]).await;
    let issued = partner(&app, &r)
        .issue_license("pro", "alice", None)
        .await
        .unwrap();
    let received = receiver.wait_for(1).await;
    let request = &received[0];
    independently_verified(&endpoint.secret, request);
    let event = verify_webhook(&endpoint.secret, &request.headers, &request.body).unwrap();
    assert!(event.event_id.starts_with("evt_"));
    assert_eq!(request.header("webhook-id"), event.event_id);
    assert_eq!(request.header("content-type"), "application/json");
    assert!(request.header("user-agent").starts_with("partner-billing/"));
    assert!(request.header("webhook-signature").starts_with("v1,"));
    let body = request.json();
    assert_eq!(body["type"], "license.issued");
    assert_eq!(
        body["data"],
        json!({
            "licenseId": issued.value.license_id,
            "productSlug": "pro",
            "login": "alice",
            "remainingBalance": 9,
        })
    );
    assert_eq!(
        body.as_object().unwrap().keys().collect::<BTreeSet<_>>(),
        ["createdUtc", "data", "eventId", "type"]
            .iter()
            .map(|k| k.to_string())
            .collect::<BTreeSet<_>>()
            .iter()
            .collect()
    );
    // A wrong secret does not verify.
    let other = panel
        .create_webhook_endpoint(&receiver.url, &["webhook.test"], None)
        .await
        .unwrap();
    assert!(verify_webhook(&other.secret, &request.headers, &request.body).is_err());
    assert!(
        standardwebhooks::Webhook::new(&other.secret)
            .unwrap()
            .verify(&request.body, &request.headers)
            .is_err()
    );

    // The attempt is listed.
    let deliveries = recorded_attempts(&panel, &endpoint.webhook_endpoint_id).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].event_id, event.event_id);
    assert_eq!(deliveries[0].event_type, "license.issued");
    assert_eq!(deliveries[0].attempt, 1);
    assert_eq!(deliveries[0].status_code, Some(204));
    assert_eq!(deliveries[0].error, None);
    assert_eq!(deliveries[0].next_attempt_utc, None);

    // The test button: 202, and a signed webhook.test with empty data.
    panel
        .test_webhook_endpoint(&endpoint.webhook_endpoint_id)
        .await
        .unwrap();
    let received = receiver.wait_for(2).await;
    independently_verified(&endpoint.secret, &received[1]);
    assert_eq!(received[1].json()["type"], "webhook.test");
    assert_eq!(received[1].json()["data"], json!({}));
    let status = app
        .http
        .post(app.url(&format!(
            "/v1/billing/resellers/me/webhook-endpoints/{}/test",
            endpoint.webhook_endpoint_id
        )))
        .bearer_auth(app.session(&r.client_id, &r.password).await)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202);
}

/// A delivery's `attemptedUtc` is when the attempt was made, the `webhook-timestamp` it was
/// signed with, however long the receiver took to answer (here: the clock moved 100 s while
/// the receiver held its answer).
async fn an_attempt_is_listed_at_the_time_it_was_signed(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["webhook.test"]).await;
    receiver.hold_answers();
    panel
        .test_webhook_endpoint(&endpoint.webhook_endpoint_id)
        .await
        .unwrap();
    let received = receiver.wait_for(1).await;
    let signed_at: i64 = received[0].header("webhook-timestamp").parse().unwrap();
    app.store.clock().advance(100);
    receiver.release_answers();
    let deliveries = recorded_attempts(&panel, &endpoint.webhook_endpoint_id).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].status_code, Some(204));
    assert_eq!(
        deliveries[0].attempted_utc, signed_at,
        "the attempt's time is the one it was signed with"
    );
}

/// The deliveries list is newest first by when each attempt was made, not by when it was
/// recorded. An attempt is recorded when its answer comes, so a slow attempt is recorded after
/// a quick one made later; here the first recorded of two attempts is given the later time, as
/// such a pair leaves them.
async fn deliveries_are_listed_by_when_they_were_made(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["webhook.test"]).await;
    for sent in 1..=2 {
        panel
            .test_webhook_endpoint(&endpoint.webhook_endpoint_id)
            .await
            .unwrap();
        receiver.wait_for(sent).await;
    }
    let recorded = eventually("both attempts recorded", || async {
        let d = panel
            .webhook_deliveries(&endpoint.webhook_endpoint_id)
            .await
            .unwrap()
            .deliveries;
        (d.len() == 2).then_some(d)
    })
    .await;
    let first_recorded: i64 = sqlx::query_scalar("SELECT min(id) FROM webhook_attempts")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    let latest = recorded.iter().map(|d| d.attempted_utc).max().unwrap() + 100;
    sqlx::query("UPDATE webhook_attempts SET attempted_utc = $1 WHERE id = $2")
        .bind(latest)
        .bind(first_recorded)
        .execute(app.store.pool())
        .await
        .unwrap();

    let listed = panel
        .webhook_deliveries(&endpoint.webhook_endpoint_id)
        .await
        .unwrap()
        .deliveries;
    let times: Vec<i64> = listed.iter().map(|d| d.attempted_utc).collect();
    assert_eq!(
        times[0], latest,
        "the attempt made last comes first: {times:?}"
    );
    assert!(times[0] > times[1], "newest first: {times:?}");
}

async fn refused_requests_and_unsubscribed_types_send_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("empty", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 10).await;
    let (receiver, _, _) = subscribe(&app, &r, &["license.issued"]).await;
    let client = partner(&app, &r);
    // Refused: no balance, unknown login, unknown plan. Not subscribed: a promo batch.
    assert!(client.issue_license("empty", "alice", None).await.is_err());
    assert!(client.issue_license("pro", "nobody", None).await.is_err());
    assert!(client.issue_license("nope", "alice", None).await.is_err());
    client.generate_promo_batch("pro", 2, None).await.unwrap();
    assert_eq!(
        rows(&app, "webhook_events").await,
        0,
        "no event without a subscribed success"
    );
    assert_eq!(rows(&app, "webhook_messages").await, 0);
    let issued = client
        .issue_license("pro", "alice", Some("lic-key-1"))
        .await
        .unwrap();
    // A replay is no new event.
    client
        .issue_license("pro", "alice", Some("lic-key-1"))
        .await
        .unwrap();
    let received = receiver.wait_for(1).await;
    assert_eq!(
        received[0].json()["data"]["licenseId"],
        issued.value.license_id
    );
    outbox_settled(&app).await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(rows(&app, "webhook_events").await, 1);
}

async fn every_write_path_sends_its_event(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.user("bob").await;
    let r = app.reseller().await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, ALL_TYPES).await;
    app.credit(&r, "pro", 10).await;
    let client = partner(&app, &r);
    let license = client
        .issue_license("pro", "alice", None)
        .await
        .unwrap()
        .value;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 2).await;
    let token = app.operator_token("backend").await;
    let redeemed: Value = app
        .redeem(&token, &codes[0], "bob", "redeem-key-1")
        .await
        .json()
        .await
        .unwrap();
    let key = panel.create_api_key(Some("second")).await.unwrap();
    panel.revoke_api_key(&key.api_key_id).await.unwrap();
    panel.revoke_api_key(&key.api_key_id).await.unwrap(); // again: no second event
    let client_id = ClientId::parse("clientId", &r.client_id).unwrap();
    partner_billing::accounts::set_standing(
        &app.store,
        &client_id,
        partner_billing::accounts::Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    partner_billing::accounts::set_standing(
        &app.store,
        &client_id,
        partner_billing::accounts::Standing::Good,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();

    let received = receiver.wait_for(8).await;
    let by_type: BTreeMap<String, Value> = received
        .iter()
        .map(|req| {
            independently_verified(&endpoint.secret, req);
            let body = req.json();
            (
                body["type"].as_str().unwrap().to_owned(),
                body["data"].clone(),
            )
        })
        .collect();
    let batch = &by_type["promo_batch.generated"];
    assert_eq!(batch["batchId"], batch_id);
    assert_eq!(batch["count"], 2);
    assert_eq!(batch["remainingBalance"], 7);
    for code in &codes {
        let normalised = code.replace('-', "");
        assert!(
            received.iter().all(|req| {
                let text = String::from_utf8_lossy(&req.body).to_string();
                !text.contains(code.as_str()) && !text.contains(&normalised)
            }),
            "a code never appears in an event"
        );
    }
    assert_eq!(
        by_type["balance.credited"],
        json!({"productSlug": "pro", "units": 10, "remainingBalance": 10, "reason": "test credit"})
    );
    assert_eq!(by_type["license.issued"]["licenseId"], license.license_id);
    assert_eq!(
        by_type["promo_code.redeemed"],
        json!({"batchId": batch_id, "productSlug": "pro", "login": "bob", "licenseId": redeemed["licenseId"]})
    );
    assert_eq!(
        by_type["api_key.created"],
        json!({"apiKeyId": key.api_key_id, "name": "second"})
    );
    assert_eq!(
        by_type["api_key.revoked"],
        json!({"apiKeyId": key.api_key_id, "name": "second"})
    );
    assert_eq!(
        by_type["account.suspended"],
        json!({"clientId": r.client_id})
    );
    assert_eq!(
        by_type["account.reinstated"],
        json!({"clientId": r.client_id})
    );
    outbox_settled(&app).await;
    assert_eq!(
        receiver.received().len(),
        8,
        "one event per change, no more"
    );
}

async fn balance_low_fires_once_per_crossing(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 5).await;
    let (receiver, panel, _) = subscribe(&app, &r, &["balance.low"]).await;
    // Validation: unknown plan 422, out of bounds 400; nothing set.
    let unknown = panel.set_low_balance_alert("nope", 3).await.unwrap_err();
    assert!(matches!(unknown, Error::UnknownPlan { .. }), "{unknown:?}");
    let negative = panel.set_low_balance_alert("pro", -1).await.unwrap_err();
    assert!(
        matches!(negative, Error::ValidationFailed { .. }),
        "{negative:?}"
    );
    assert_eq!(rows(&app, "balance_alerts").await, 0);

    let alert = panel.set_low_balance_alert("pro", 3).await.unwrap();
    assert_eq!(
        (alert.product_slug.as_str(), alert.low_balance_threshold),
        ("pro", 3)
    );
    let client = partner(&app, &r);
    for _ in 0..4 {
        client.issue_license("pro", "alice", None).await.unwrap(); // 4, 3, 2 (crossing), 1
    }
    let received = receiver.wait_for(1).await;
    assert_eq!(
        received[0].json()["data"],
        json!({"productSlug": "pro", "remainingBalance": 2, "threshold": 3})
    );
    // A credit back above the threshold re-arms it; a batch crossing it fires again.
    app.credit(&r, "pro", 5).await; // 6
    client.generate_promo_batch("pro", 4, None).await.unwrap(); // 2: crossing
    let received = receiver.wait_for(2).await;
    assert_eq!(
        received[1].json()["data"],
        json!({"productSlug": "pro", "remainingBalance": 2, "threshold": 3})
    );
    // Off: no more.
    panel.set_low_balance_alert("pro", 0).await.unwrap();
    app.credit(&r, "pro", 5).await; // 7
    for _ in 0..6 {
        client.issue_license("pro", "alice", None).await.unwrap();
    }
    outbox_settled(&app).await;
    assert_eq!(receiver.received().len(), 2, "once per crossing");
}

async fn failures_are_retried_on_the_schedule_then_marked_failed(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["webhook.test"]).await;
    receiver.respond_with(500);
    panel
        .test_webhook_endpoint(&endpoint.webhook_endpoint_id)
        .await
        .unwrap();
    // One attempt, then one after each delay of the schedule (1s,1s): three in all.
    let deliveries = eventually("three attempts, the last one final", || async {
        let d = panel
            .webhook_deliveries(&endpoint.webhook_endpoint_id)
            .await
            .unwrap()
            .deliveries;
        (d.len() == 3).then_some(d)
    })
    .await;
    let attempts: Vec<i64> = deliveries.iter().map(|d| d.attempt).collect();
    assert_eq!(attempts, [3, 2, 1], "newest first");
    assert!(deliveries.iter().all(|d| d.status_code == Some(500)));
    assert!(
        deliveries
            .iter()
            .all(|d| d.event_id == deliveries[0].event_id)
    );
    assert_eq!(deliveries[0].next_attempt_utc, None, "given up");
    for d in &deliveries[1..] {
        let next = d.next_attempt_utc.expect("a retry was scheduled");
        assert!(
            next > d.attempted_utc,
            "the retry is scheduled after the attempt"
        );
    }
    assert_eq!(outbox::pending_count(&app.store).await.unwrap(), 0);
    let received = receiver.received();
    assert_eq!(received.len(), 3);
    // Each retry comes the schedule's delay (1 s) after the attempt before it, never sooner.
    for pair in received.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap >= std::time::Duration::from_secs(1),
            "a retry after {gap:?}"
        );
    }
    let ids: BTreeSet<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), 1, "the same webhook-id on every retry");
    for request in &received {
        independently_verified(&endpoint.secret, request);
    }
    // The endpoint stays enabled after plain failures.
    assert_eq!(
        panel
            .list_webhook_endpoints()
            .await
            .unwrap()
            .webhook_endpoints[0]
            .status,
        "enabled"
    );
}

async fn a_receiver_that_recovers_gets_every_event(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 100).await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["license.issued"]).await;
    receiver.respond_with(503);
    let client = partner(&app, &r);
    let mut licenses = BTreeSet::new();
    for _ in 0..5 {
        licenses.insert(
            client
                .issue_license("pro", "alice", None)
                .await
                .unwrap()
                .value
                .license_id,
        );
    }
    // Every event failed at least once, then the receiver recovers.
    receiver
        .wait_until("a failed first attempt of every event", |r| {
            r.iter()
                .map(|r| r.header("webhook-id").to_owned())
                .collect::<BTreeSet<_>>()
                .len()
                == 5
        })
        .await;
    receiver.respond_with(200);
    // Every event delivered.
    outbox_settled(&app).await;
    let delivered: Vec<i64> =
        sqlx::query_scalar("SELECT COUNT(*) FROM webhook_messages WHERE status = 'delivered'")
            .fetch_all(app.store.pool())
            .await
            .unwrap();
    assert_eq!(delivered, [5], "all five delivered, none given up");
    let deliveries = panel
        .webhook_deliveries(&endpoint.webhook_endpoint_id)
        .await
        .unwrap()
        .deliveries;
    let succeeded: BTreeSet<&str> = deliveries
        .iter()
        .filter(|d| d.status_code == Some(200))
        .map(|d| d.event_id.as_str())
        .collect();
    assert_eq!(succeeded.len(), 5);
    let seen: BTreeSet<String> = receiver
        .received()
        .iter()
        .map(|r| r.json()["data"]["licenseId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, licenses);
}

async fn gone_disables_the_endpoint_and_redirects_are_not_followed(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let (receiver, panel, endpoint) = subscribe(&app, &r, &["webhook.test"]).await;
    let id = endpoint.webhook_endpoint_id.as_str();

    // A redirect is a failed attempt; its target never sees a request.
    receiver.respond_with(307);
    panel.test_webhook_endpoint(id).await.unwrap();
    eventually("a redirect answered", || async {
        let d = panel.webhook_deliveries(id).await.unwrap().deliveries;
        (d.first().and_then(|d| d.status_code) == Some(307)).then_some(())
    })
    .await;
    assert!(receiver.received().iter().all(|r| r.path == "/hook"));

    receiver.respond_with(410);
    eventually("410 disables the endpoint", || async {
        let e = panel
            .list_webhook_endpoints()
            .await
            .unwrap()
            .webhook_endpoints;
        (e[0].status == "disabled").then_some(())
    })
    .await;
    let deliveries = panel.webhook_deliveries(id).await.unwrap().deliveries;
    assert_eq!(deliveries[0].status_code, Some(410));
    assert_eq!(deliveries[0].next_attempt_utc, None);
    let before = receiver.received().len();
    // Nothing more is sent to a disabled endpoint: its messages are never leased.
    receiver.respond_with(204);
    panel.test_webhook_endpoint(id).await.unwrap();
    // Nor is it counted as waiting (the outbox gauge): it never will be sent.
    assert_eq!(
        outbox::pending_count(&app.store).await.unwrap(),
        0,
        "a disabled endpoint's message is not waiting"
    );
    assert!(outbox::lease_due(&app.store, 100).await.unwrap().is_empty());
    assert_eq!(receiver.received().len(), before);
    assert!(receiver.received().iter().all(|r| r.path == "/hook"));

    // A deleted endpoint's retry still due is dropped with it: nothing left pending.
    let (failing, _, second) = subscribe(&app, &r, &["webhook.test"]).await;
    failing.respond_with(500);
    panel
        .test_webhook_endpoint(&second.webhook_endpoint_id)
        .await
        .unwrap();
    eventually("a retry scheduled", || async {
        let d = panel
            .webhook_deliveries(&second.webhook_endpoint_id)
            .await
            .unwrap()
            .deliveries;
        (d.len() == 1 && d[0].next_attempt_utc.is_some()).then_some(())
    })
    .await;
    assert_eq!(outbox::pending_count(&app.store).await.unwrap(), 1);
    panel
        .delete_webhook_endpoint(&second.webhook_endpoint_id)
        .await
        .unwrap();
    assert_eq!(outbox::pending_count(&app.store).await.unwrap(), 0);
    let pending = rows(&app, "webhook_messages WHERE status = 'pending'").await;
    assert_eq!(
        pending, 1,
        "only the disabled endpoint's test event, never leased"
    );

    // An attempt in flight when its endpoint is deleted: its answer (a 500) does not bring
    // the message back to pending; it stays settled.
    let (held, _, third) = subscribe(&app, &r, &["webhook.test"]).await;
    held.hold_answers();
    held.respond_with(500);
    panel
        .test_webhook_endpoint(&third.webhook_endpoint_id)
        .await
        .unwrap();
    held.wait_for(1).await;
    panel
        .delete_webhook_endpoint(&third.webhook_endpoint_id)
        .await
        .unwrap();
    held.release_answers();
    let attempts = format!(
        "webhook_attempts WHERE endpoint_row_id = \
         (SELECT id FROM webhook_endpoints WHERE endpoint_id = '{}')",
        third.webhook_endpoint_id
    );
    eventually("the held attempt recorded", || async {
        (rows(&app, &attempts).await == 1).then_some(())
    })
    .await;
    let pending = rows(&app, "webhook_messages WHERE status = 'pending'").await;
    assert_eq!(pending, 1, "the deleted endpoint's message stays settled");
}

async fn two_replicas_deliver_each_event_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let replica = app.replica().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 100).await;
    let (receiver, _, _) = subscribe(&app, &r, &["license.issued"]).await;
    let clients = [partner(&app, &r), partner(&replica, &r)];
    let mut tasks = Vec::new();
    for i in 0..20 {
        let client = clients[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            client.issue_license("pro", "alice", None).await.unwrap()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    receiver.wait_for(20).await;
    outbox_settled(&app).await;
    let received = receiver.received();
    let ids: BTreeSet<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), 20);
    assert_eq!(received.len(), 20, "each event sent once");
    assert_eq!(rows(&app, "webhook_attempts").await, 20);
}

async fn a_rolled_key_sends_expired_once_its_grace_ends(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let (receiver, panel, _) = subscribe(&app, &r, &["api_key.expired"]).await;
    let keys = panel.list_api_keys().await.unwrap().api_keys;
    let old = &keys[0];
    panel
        .roll_api_key(&old.api_key_id, Some(3600))
        .await
        .unwrap();
    // A second replica sweeps too: the expiry is still one event.
    let _replica = app.replica().await;
    // The harness's clock moves past the grace period; nothing sleeps.
    app.store.clock().advance(3600);
    let received = receiver.wait_for(1).await;
    // Signed with the moved clock's time, which a verifier would call the future: the other
    // tests check signatures; this one checks the event.
    assert!(received[0].header("webhook-signature").starts_with("v1,"));
    let body = received[0].json();
    assert_eq!(body["type"], "api_key.expired");
    assert_eq!(
        body["data"],
        json!({"apiKeyId": old.api_key_id, "name": old.name})
    );
    outbox_settled(&app).await;
    assert_eq!(
        rows(&app, "webhook_events").await,
        1,
        "one event per expiry"
    );
}
