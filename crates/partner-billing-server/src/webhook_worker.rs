//! The webhook delivery worker: one per server process, every replica running its own.
//!
//! It leases due outbox messages (PostgreSQL `FOR UPDATE SKIP LOCKED`, see
//! `partner_billing::webhooks::outbox`), sends each to its endpoint, and records every attempt.
//! A new event wakes it at once; otherwise it polls. Each send checks the URL again with the
//! one SSRF rule, on the resolved address, and connects to exactly the checked addresses; no
//! redirect is followed; 10 s timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use partner_billing::store::Store;

use crate::metrics::{DeliveryOutcome, Metrics};
use partner_billing::webhook_signature;
use partner_billing::webhooks::outbox::{self, Attempt, AttemptOutcome, DueMessage};
use partner_billing::webhooks::ssrf;

/// How often an idle worker looks for due messages (retries come due without a wake-up).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// After a wake-up, a short wait for the event's transaction to commit.
const WAKE_DELAY: Duration = Duration::from_millis(20);

/// Sends in flight at once per process.
const CONCURRENT_SENDS: usize = 32;

/// The receiver's time to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts recorded in one transaction at most.
const RECORD_BATCH: usize = 64;

/// A finished attempt on its way to be recorded, holding its send slot until then.
type Finished = (DueMessage, Attempt, OwnedSemaphorePermit);

/// Runs until aborted (at shutdown). An abort mid-send leaves the message leased; another
/// worker sends it again when the lease runs out.
pub(crate) async fn run(store: Store, metrics: Metrics) {
    let permits = Arc::new(Semaphore::new(CONCURRENT_SENDS));
    let (finished, to_record) = mpsc::unbounded_channel::<Finished>();
    let recorder = tokio::spawn(record(store.clone(), to_record));
    let _recorder = AbortOnDrop(recorder);
    let _expiry_sweep = AbortOnDrop(tokio::spawn(record_key_expirations(store.clone())));
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
            let finished = finished.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let attempted_utc = store.now_utc();
                let outcome = send(&store, &message, attempted_utc).await;
                log_outcome(&message, &outcome);
                metrics.record_webhook_delivery(delivery_outcome(&store, &message, &outcome));
                let attempt = Attempt {
                    attempted_utc,
                    outcome,
                };
                let _ = finished.send((message, attempt, permit));
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

/// How often rolled keys are checked for an ended grace period.
const EXPIRY_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Records `api_key.expired` for rolled keys whose grace period has ended (one event per key,
/// whichever replica notices first).
async fn record_key_expirations(store: Store) {
    let mut ticks = tokio::time::interval(EXPIRY_SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        match partner_billing::keys::record_expirations(&store).await {
            Ok(0) => {}
            Ok(_) => store.wake_webhook_worker(),
            Err(err) => tracing::warn!(error = %err, "could not record key expirations"),
        }
    }
}

/// Aborts the recorder when the worker is aborted.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records finished attempts, everything that finished meanwhile in one transaction; the
/// send slots are freed once their attempts are recorded.
async fn record(store: Store, mut to_record: mpsc::UnboundedReceiver<Finished>) {
    while let Some(first) = to_record.recv().await {
        let mut batch = vec![first];
        while batch.len() < RECORD_BATCH {
            match to_record.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let attempts: Vec<(&DueMessage, &Attempt)> = batch.iter().map(|(m, a, _)| (m, a)).collect();
        if let Err(err) = outbox::record_attempts(&store, &attempts).await {
            // The leases run out and the messages are sent again: at least once.
            tracing::warn!(attempts = batch.len(), error = %err, "could not record webhook attempts");
        }
        drop(batch);
        store.wake_webhook_worker();
    }
}

/// The metric's name for an attempt's end: delivered, disabled (410), failed (the schedule's
/// last attempt) or retrying.
fn delivery_outcome(
    store: &Store,
    message: &DueMessage,
    outcome: &AttemptOutcome,
) -> DeliveryOutcome {
    let attempts = 1 + store.webhook_settings().backoff.len() as i64;
    match outcome {
        AttemptOutcome::Answered(status) if (200..300).contains(status) => {
            DeliveryOutcome::Delivered
        }
        AttemptOutcome::Answered(410) => DeliveryOutcome::Disabled,
        _ if message.attempt >= attempts => DeliveryOutcome::Failed,
        _ => DeliveryOutcome::Retrying,
    }
}

fn log_outcome(message: &DueMessage, outcome: &AttemptOutcome) {
    match outcome {
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
}

/// How every webhook request is made: no redirects, 10 s timeout, our user agent.
fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("partner-billing/", env!("CARGO_PKG_VERSION")))
}

/// The client for URLs whose host is an IP address.
fn shared_client() -> Option<&'static reqwest::Client> {
    static CLIENT: std::sync::OnceLock<Option<reqwest::Client>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| client_builder().build().ok())
        .as_ref()
}

/// Sends `message`, signed as an attempt made at `timestamp` (Unix seconds).
async fn send(store: &Store, message: &DueMessage, timestamp: i64) -> AttemptOutcome {
    let checked = match ssrf::check_url(&message.url, store.webhook_settings().allow_insecure).await
    {
        Ok(checked) => checked,
        Err(refused) => return AttemptOutcome::NoAnswer(format!("URL refused: {refused}")),
    };
    // An IP literal needs no resolution: the shared client (and its connection pool) connects
    // to exactly the checked address. A host name gets a client pinned to the addresses just
    // checked, so a second DNS answer can never be used.
    let client = if checked.url.domain().is_none() {
        shared_client().cloned()
    } else {
        client_builder()
            .resolve_to_addrs(&checked.host, &checked.addresses)
            .build()
            .ok()
    };
    let Some(client) = client else {
        return AttemptOutcome::NoAnswer("HTTP client unavailable".to_owned());
    };
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
