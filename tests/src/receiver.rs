//! A webhook receiver for tests, on 127.0.0.1 only: records every request it gets and answers
//! with a status the test sets (and can change while it runs).

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem::http::{HeaderMap, StatusCode};
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::{Body, EndpointExt, Request, Response, Route, Server, handler, web::Data};
use tokio::sync::oneshot;

use partner_billing::webhooks::{WebhookSettings, outbox};
use partner_billing_client::{CreatedWebhookEndpoint, PanelClient};

use crate::{Reseller, TestApp};

/// Webhook settings of test servers: loopback receivers allowed, retries after 1 s and 1 s.
pub fn test_webhook_settings() -> WebhookSettings {
    WebhookSettings {
        backoff: vec![Duration::from_secs(1), Duration::from_secs(1)],
        allow_insecure: true,
    }
}

/// Process settings for the server binary matching [`test_webhook_settings`].
pub const TEST_WEBHOOK_ENV: [(&str, &str); 2] = [
    // `1` as operators write it (`true`, `yes` and `on` are read alike).
    ("PARTNER_BILLING_WEBHOOK_ALLOW_INSECURE", "1"),
    ("PARTNER_BILLING_WEBHOOK_BACKOFF", "1s,1s"),
];

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Received {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

#[derive(Clone, Default)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    status: Arc<AtomicU16>,
    /// Whether answers wait (each request is recorded first).
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

/// A running receiver; stops on drop.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    pub port: u16,
    shared: Shared,
    stop: Option<oneshot::Sender<()>>,
}

#[handler]
async fn receive(req: &Request, body: Body, shared: Data<&Shared>) -> Response {
    let body = body.into_vec().await.unwrap_or_default();
    shared
        .received
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Received {
            path: req.uri().path().to_owned(),
            headers: req.headers().clone(),
            body,
            at: std::time::Instant::now(),
        });
    let _ = shared.held.subscribe().wait_for(|held| !held).await;
    let status = shared.status.load(Ordering::SeqCst);
    let mut response = Response::builder().status(StatusCode::from_u16(status).expect("status"));
    if (300..400).contains(&status) {
        response = response.header("location", "/redirected");
    }
    response.finish()
}

impl Receiver {
    /// Starts on a free port of 127.0.0.1, answering 204.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Starts on `port` of 127.0.0.1 (0: any free one), answering 204.
    pub async fn start_on(port: u16) -> Self {
        let shared = Shared::default();
        shared.status.store(204, Ordering::SeqCst);
        let acceptor = TcpListener::bind(format!("127.0.0.1:{port}"))
            .into_acceptor()
            .await
            .expect("bind receiver");
        let port = acceptor.local_addr()[0]
            .as_socket_addr()
            .expect("socket address")
            .port();
        let app = Route::new()
            .at("/hook", poem::post(receive))
            .at("/redirected", poem::post(receive))
            .data(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = Server::new_with_acceptor(acceptor)
                .run_with_graceful_shutdown(
                    app,
                    async {
                        let _ = stopped.await;
                    },
                    Some(Duration::from_secs(1)),
                )
                .await;
        });
        Self {
            url: format!("http://127.0.0.1:{port}/hook"),
            port,
            shared,
            stop: Some(stop),
        }
    }

    /// The status every following request is answered with.
    pub fn respond_with(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    /// Holds every answer (a receiver slow to answer) until [`Receiver::release_answers`];
    /// each request is recorded as it arrives.
    pub fn hold_answers(&self) {
        self.shared.held.send_replace(true);
    }

    /// Answers every held request, and the later ones at once.
    pub fn release_answers(&self) {
        self.shared.held.send_replace(false);
    }

    /// Everything received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits (up to 60 s) until `check` holds for what was received; panics with `what`.
    pub async fn wait_until(
        &self,
        what: &str,
        check: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let received = self.received();
            if check(&received) {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; received {} requests",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        self.wait_until(&format!("{n} webhook requests"), |r| r.len() >= n)
            .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, for up to 60 s (a lease left by a killed process runs out after 20 s).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The set-up of most webhook scenarios: starts a receiver (answering 204), logs in to
/// `reseller`'s panel through the SDK, and subscribes the receiver to `event_types`. Returns the
/// receiver, the logged-in panel client and the endpoint as created (its signing secret
/// included).
pub async fn subscribe(
    app: &TestApp,
    reseller: &Reseller,
    event_types: &[&str],
) -> (Receiver, PanelClient, CreatedWebhookEndpoint) {
    let receiver = Receiver::start().await;
    let mut panel = PanelClient::new(&app.base_url).expect("panel client");
    panel
        .login(&reseller.client_id, &reseller.password)
        .await
        .expect("panel login");
    let endpoint = panel
        .create_webhook_endpoint(&receiver.url, event_types, None)
        .await
        .expect("webhook endpoint created");
    (receiver, panel, endpoint)
}

/// Waits until the app's outbox has no pending message: everything due was delivered or given
/// up.
pub async fn outbox_settled(app: &TestApp) {
    eventually("the outbox settled", || async {
        (outbox::pending_count(&app.store).await.unwrap() == 0).then_some(())
    })
    .await;
}
