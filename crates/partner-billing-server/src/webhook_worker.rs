//! The webhook delivery worker: one per server process, every replica running its own.
//!
//! It leases due outbox messages (PostgreSQL `FOR UPDATE SKIP LOCKED`, see
//! `partner_billing::webhooks::outbox`), sends each to its endpoint, and records every attempt.
//! A new event wakes it at once; otherwise it polls. Each send checks the URL again with the
//! one SSRF rule, on the resolved address, and connects to exactly the checked addresses; no
//! redirect is followed; 10 s timeout.

use std::sync::Arc;
use std::time::Duration;

use partner_billing::store::Store;
use partner_billing::webhook_signature;
use partner_billing::webhooks::outbox::{self, AttemptOutcome, DueMessage};
use partner_billing::webhooks::ssrf;

/// How often an idle worker looks for due messages (retries come due without a wake-up).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// After a wake-up, a short wait for the event's transaction to commit.
const WAKE_DELAY: Duration = Duration::from_millis(20);

/// Sends in flight at once per process.
const CONCURRENT_SENDS: usize = 32;

/// The receiver's time to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs until aborted (at shutdown). An abort mid-send leaves the message leased; another
/// worker sends it again when the lease runs out.
pub(crate) async fn run(store: Store) {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_SENDS));
    loop {
        let free = permits.available_permits();
        let leased = if free == 0 {
            Vec::new()
        } else {
            match outbox::lease_due(&store, i64::try_from(free).unwrap_or(1)).await {
                Ok(leased) => leased,
                Err(err) => {
                    tracing::warn!(error = %err, "webhook worker could not read the outbox");
                    Vec::new()
                }
            }
        };
        let found = !leased.is_empty();
        for message in leased {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                return;
            };
            let store = store.clone();
            tokio::spawn(async move {
                deliver(&store, &message).await;
                drop(permit);
            });
        }
        if found {
            continue;
        }
        tokio::select! {
            () = store.webhook_worker_woken() => tokio::time::sleep(WAKE_DELAY).await,
            () = tokio::time::sleep(POLL_INTERVAL) => {}
        }
    }
}

/// One attempt: send, then record it.
async fn deliver(store: &Store, message: &DueMessage) {
    let outcome = send(store, message).await;
    match &outcome {
        AttemptOutcome::Answered(status) => tracing::info!(
            event_id = %message.event_id,
            attempt = message.attempt,
            status,
            "webhook attempt answered"
        ),
        AttemptOutcome::NoAnswer(reason) => tracing::info!(
            event_id = %message.event_id,
            attempt = message.attempt,
            reason = %reason,
            "webhook attempt got no answer"
        ),
    }
    if let Err(err) = outbox::record_attempt(store, message, &outcome).await {
        // The lease runs out and the message is sent again: at least once.
        tracing::warn!(event_id = %message.event_id, error = %err, "could not record a webhook attempt");
    }
    store.wake_webhook_worker();
}

async fn send(store: &Store, message: &DueMessage) -> AttemptOutcome {
    let checked = match ssrf::check_url(&message.url, store.webhook_settings().allow_insecure).await
    {
        Ok(checked) => checked,
        Err(refused) => return AttemptOutcome::NoAnswer(format!("URL refused: {refused}")),
    };
    let client = match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("partner-billing/", env!("CARGO_PKG_VERSION")))
        .resolve_to_addrs(&checked.host, &checked.addresses)
        .build()
    {
        Ok(client) => client,
        Err(_) => return AttemptOutcome::NoAnswer("HTTP client unavailable".to_owned()),
    };
    let timestamp = store.now_utc();
    let signature = webhook_signature::sign(
        &message.signing_key,
        &message.event_id,
        timestamp,
        message.body.as_bytes(),
    );
    let result = client
        .post(checked.url)
        .header("content-type", "application/json")
        .header("webhook-id", &message.event_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(message.body.clone())
        .send()
        .await;
    match result {
        Ok(response) => AttemptOutcome::Answered(response.status().as_u16()),
        // The reason only: reqwest's message would quote the URL.
        Err(err) if err.is_timeout() => AttemptOutcome::NoAnswer("timed out".to_owned()),
        Err(err) if err.is_connect() => AttemptOutcome::NoAnswer("connection failed".to_owned()),
        Err(_) => AttemptOutcome::NoAnswer("request failed".to_owned()),
    }
}
