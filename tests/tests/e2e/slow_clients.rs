//! Slow clients (docs/operations.md, "Connections"): stalled connections are closed at their deadline
//! (headers, body, idle keep-alive), never stop a well-behaved client from being served, and
//! `--max-connections` bounds what is open. The limits are shortened here (the defaults are
//! 10 s, 30 s and 60 s) to keep the test short; the mechanism is the same.

use std::time::{Duration, Instant};

use partner_billing::clock::Clock;
use partner_billing::crypto::MasterKey;
use partner_billing::store::Store;
use partner_billing_server::{ServeOptions, connections::Limits};
use partner_billing_tests::{Db, both_databases, fresh_database};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

both_databases!(
    hundreds_of_stalled_connections_never_block_a_client,
    stalled_bodies_and_idle_connections_are_closed,
    max_connections_bounds_open_connections,
    an_answer_that_takes_longer_than_the_body_limit_is_not_cut_off,
    blank_lines_then_silence_are_closed,
    http2_with_prior_knowledge_is_served_then_held_to_the_idle_limit,
    stopping_closes_idle_keep_alive_connections_at_once,
    stopping_refuses_new_connections_and_cuts_off_what_outlasts_the_drain,
);

const LIMITS: Limits = Limits {
    headers: Duration::from_secs(2),
    body: Duration::from_secs(3),
    idle: Duration::from_secs(3),
};

struct Server {
    address: String,
    store: Store,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _home: partner_billing_tests::DatabaseHome,
}

impl Server {
    async fn start(db: &Db, max_connections: usize) -> Self {
        Self::start_with(db, max_connections, LIMITS).await
    }

    async fn start_with(db: &Db, max_connections: usize, limits: Limits) -> Self {
        Self::start_serving(
            db,
            ServeOptions {
                max_connections,
                limits,
                ..ServeOptions::default()
            },
        )
        .await
    }

    async fn start_serving(db: &Db, options: ServeOptions) -> Self {
        let (url, home) = fresh_database(db).await;
        let store = Store::connect(&url, Clock::system())
            .await
            .expect("store")
            .with_master_key(MasterKey::from_file_contents(&[7u8; 32]).expect("key"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(partner_billing_server::serve_with(
            listener,
            store.clone(),
            async {
                let _ = stopped.await;
            },
            options,
        ));
        Self {
            address,
            store,
            stop: Some(stop),
            task,
            _home: home,
        }
    }

    /// A fresh client (no pooled connection) asks for `/healthz`.
    async fn health(&self) -> u16 {
        reqwest::Client::new()
            .get(format!("http://{}/healthz", self.address))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .expect("answered")
            .status()
            .as_u16()
    }

    async fn stalled(&self, bytes: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(&self.address).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        stream
    }

    /// Stops the server and removes its database.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
        self.store.close().await;
    }
}

/// Reads until the server closes the connection; fails if it stays open past `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut received = Vec::new();
    let outcome = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(outcome.is_ok(), "the server kept a stalled connection open");
    received
}

const PARTIAL_HEADERS: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

async fn hundreds_of_stalled_connections_never_block_a_client(db: Db) {
    // The default header deadline: however slow this machine is, the client's answer comes
    // well before the stalled connections are closed for it.
    let limits = Limits {
        headers: Duration::from_secs(10),
        ..LIMITS
    };
    let server = Server::start_with(&db, 4096, limits).await;
    let mut stalled = Vec::new();
    for _ in 0..300 {
        stalled.push(server.stalled(PARTIAL_HEADERS).await);
    }
    // Connected and silent: no byte at all.
    stalled.push(server.stalled(b"").await);
    assert_eq!(server.health().await, 200);
    // Served while the stalled connections were still open, not once they were closed.
    let open = stalled.iter().filter(|stream| still_open(stream)).count();
    assert_eq!(
        open,
        stalled.len(),
        "the client was served only after stalled connections were closed"
    );
    for stream in &mut stalled {
        let answer = closed_within(stream, limits.headers + Duration::from_secs(10)).await;
        assert!(
            !String::from_utf8_lossy(&answer).contains("200 OK"),
            "an incomplete request was answered"
        );
    }
    assert_eq!(server.health().await, 200);
    server.stop().await;
}

/// Whether the server has neither closed `stream` nor written to it yet.
fn still_open(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 1];
    matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn stalled_bodies_and_idle_connections_are_closed(db: Db) {
    let server = Server::start(&db, 4096).await;
    // Headers complete, the body promised but never sent in full.
    let mut slow_body = server
        .stalled(
            b"POST /v1/billing/resellers/sessions HTTP/1.1\r\nHost: localhost\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"clientId\":",
        )
        .await;
    // The same on a panel form: whatever is answered is a page of the panel, never the I/O
    // error's text.
    let mut slow_form = server
        .stalled(
            b"POST /panel/login HTTP/1.1\r\nHost: localhost\r\nSec-Fetch-Site: same-origin\r\n\
              Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nclient_id=",
        )
        .await;
    // A keep-alive connection that asks once, then says nothing more. Its idle time starts
    // after the answer, so after `started`.
    let started = Instant::now();
    let mut idle = server
        .stalled(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let answer = closed_within(&mut idle, LIMITS.idle + Duration::from_secs(10)).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "the complete request was answered before the idle close"
    );
    assert!(
        started.elapsed() >= LIMITS.idle,
        "an idle keep-alive connection is kept for the idle limit"
    );
    let answer = closed_within(&mut slow_body, LIMITS.body + Duration::from_secs(10)).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains(" 201 "),
        "a partial body never signs in"
    );
    let answer = closed_within(&mut slow_form, LIMITS.body + Duration::from_secs(10)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains(" 303 "), "a partial form never signs in");
    assert!(!answer.contains("io:"), "{answer}");
    assert!(
        answer.is_empty()
            || answer
                .to_ascii_lowercase()
                .contains("content-type: text/html"),
        "{answer}"
    );
    assert_eq!(server.health().await, 200);
    server.stop().await;
}

async fn max_connections_bounds_open_connections(db: Db) {
    let server = Server::start(&db, 3).await;
    // Each stalled connection's header deadline starts after its connect, so after `started`.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(server.stalled(PARTIAL_HEADERS).await);
    }
    // Every slot is held: the next client is served only once the stalled ones are closed.
    assert_eq!(server.health().await, 200);
    assert!(
        started.elapsed() >= LIMITS.headers,
        "a fourth connection was served while three were open (after {:?})",
        started.elapsed()
    );
    for stream in &mut stalled {
        closed_within(stream, Duration::from_secs(5)).await;
    }
    server.stop().await;
}

/// The body limit bounds how long a client may take to send its request, not how long the
/// service may take to answer it: a request whose body is all in, and whose answer waits (here
/// on a promo batch's generation turn, as behind other batches on a busy SQLite file), is
/// answered, not cut off at the body limit.
/// A promo batch request held inside the service (its body read, its answer not started):
/// the hold, and the request's task.
async fn held_request(
    server: &Server,
) -> (
    partner_billing::store::Hold,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    use partner_billing::audit::Origin;
    use partner_billing::domain::{ClientId, Password, PlanSlug};
    use partner_billing::plans::{self, NewPlan};
    use partner_billing::store::HoldPoint;
    use partner_billing::{accounts, keys, quota};

    let store = &server.store;
    let origin = Origin::cli();
    let plan = PlanSlug::parse("slug", "pro").unwrap();
    let new_plan = NewPlan::new(plan.clone(), "Pro", Some(30), None, None).unwrap();
    plans::create_plan(store, new_plan, &origin).await.unwrap();
    let password = Password::parse("password", "a long enough password").unwrap();
    let client_id: ClientId = accounts::create_reseller(store, "Slow", password, &origin)
        .await
        .unwrap();
    let account_id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
        .bind(client_id.as_str())
        .fetch_one(store.pool())
        .await
        .unwrap();
    let key = keys::create_api_key(store, account_id, Some("k"), &origin)
        .await
        .unwrap();
    let credit = quota::Correction {
        client_id: &client_id,
        plan: &plan,
        units: 10,
        reason: "test",
        reference: None,
    };
    quota::credit(store, &credit, &origin).await.unwrap();

    let hold = store.hold(HoldPoint::PromoTurnTaken, account_id);
    let request = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/billing/partner/promo-batches",
            server.address
        ))
        .header("X-Client-Id", client_id.as_str())
        .header("X-Client-Secret", key.secret.as_str())
        .json(&serde_json::json!({"planSlug": "pro", "count": 1, "idempotencyKey": "slow-answer"}))
        .timeout(Duration::from_secs(60))
        .send();
    let request = tokio::spawn(request);
    hold.wait_for_arrivals(1).await;
    (hold, request)
}

async fn an_answer_that_takes_longer_than_the_body_limit_is_not_cut_off(db: Db) {
    let server = Server::start(&db, 4096).await;
    let (hold, request) = held_request(&server).await;
    // The request is with the service, its body read; the answer takes past the body limit.
    tokio::time::sleep(LIMITS.body + Duration::from_secs(1)).await;
    hold.release();
    let response = request
        .await
        .unwrap()
        .expect("answered, the connection not closed");
    assert_eq!(response.status(), 200);
    server.stop().await;
}

/// Blank lines before a request start no request: a client that sends only them and then
/// nothing is closed at the header limit, like any other silent one.
async fn blank_lines_then_silence_are_closed(db: Db) {
    let server = Server::start(&db, 4096).await;
    let mut blank = server.stalled(b"\r\n\r\n\r\n").await;
    let answer = closed_within(&mut blank, LIMITS.headers + Duration::from_secs(10)).await;
    assert!(answer.is_empty(), "nothing is answered to blank lines");
    assert_eq!(server.health().await, 200);
    server.stop().await;
}

/// The HTTP/2 connection preface, then an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
const HTTP2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

async fn http2_with_prior_knowledge_is_served_then_held_to_the_idle_limit(db: Db) {
    let server = Server::start(&db, 4096).await;
    let mut h2 = server.stalled(HTTP2_PREFACE_AND_SETTINGS).await;
    let mut frame = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), h2.read_exact(&mut frame))
        .await
        .expect("the server answers the preface")
        .expect("a frame header");
    assert_eq!(frame[3], 0x4, "the server's first frame is its SETTINGS");
    // Silent from here on: closed at the idle limit, not kept forever.
    closed_within(&mut h2, LIMITS.idle + Duration::from_secs(10)).await;
    assert_eq!(server.health().await, 200);
    server.stop().await;
}

async fn stopping_closes_idle_keep_alive_connections_at_once(db: Db) {
    // Idle connections would otherwise stay for a minute; the drain allows thirty seconds.
    let limits = Limits {
        idle: Duration::from_secs(60),
        ..LIMITS
    };
    let server = Server::start_with(&db, 4096, limits).await;
    let mut kept = server
        .stalled(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = kept.read(&mut buf).await.expect("the answer");
        assert!(n > 0, "the connection stayed open after the answer");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let started = Instant::now();
    server.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an idle keep-alive connection held the stop for {:?}",
        started.elapsed()
    );
    closed_within(&mut kept, Duration::from_secs(1)).await;
}

/// On stop the listener closes at once, a request in flight has the drain time to finish, and
/// what outlasts it is cut off: the server returns, the held request gets no answer.
async fn stopping_refuses_new_connections_and_cuts_off_what_outlasts_the_drain(db: Db) {
    let drain = Duration::from_secs(2);
    let mut server = Server::start_serving(
        &db,
        ServeOptions {
            limits: LIMITS,
            drain_timeout: drain,
            ..ServeOptions::default()
        },
    )
    .await;
    let (hold, request) = held_request(&server).await;
    let stopped_at = Instant::now();
    let _ = server.stop.take().expect("running").send(());
    // New connections are refused while the held request still runs.
    let refused = tokio::time::timeout(drain / 2, async {
        while TcpStream::connect(&server.address).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        refused.is_ok(),
        "the listener still accepted after the stop"
    );
    assert!(
        !request.is_finished(),
        "the held request was cut off before the drain time"
    );
    let served = tokio::time::timeout(drain + Duration::from_secs(10), &mut server.task)
        .await
        .expect("the server returned after the drain time")
        .expect("the server's task");
    assert!(served.is_ok(), "{served:?}");
    assert!(
        stopped_at.elapsed() >= drain,
        "returned before the drain time"
    );
    let answer = request.await.expect("the request's task");
    assert!(
        answer.is_err(),
        "the cut-off request was answered: {answer:?}"
    );
    drop(hold);
    server.store.close().await;
}
