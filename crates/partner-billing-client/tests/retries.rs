//! The SDK against a scripted HTTP server: what is retried, what is not, and what is sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use partner_billing_client::{Credentials, Error, PanelClient, PartnerClient, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A request as the fake server saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: serde_json::Value,
}

/// Answers each connection with the next scripted response, then closes it.
struct FakeServer {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeServer {
    async fn start(script: Vec<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            for response in script {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let read = socket.read(&mut chunk).await.unwrap();
                    buffer.extend_from_slice(&chunk[..read]);
                    if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |value| value.trim().parse::<usize>().unwrap());
                while buffer.len() < head_end + length {
                    let read = socket.read(&mut chunk).await.unwrap();
                    buffer.extend_from_slice(&chunk[..read]);
                }
                let body = serde_json::from_slice(&buffer[head_end..]).unwrap_or_default();
                record.lock().unwrap().push(Seen { head, body });
                if response == "hang" {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    continue;
                }
                socket.write_all(response.as_bytes()).await.unwrap();
                socket.shutdown().await.ok();
            }
        });
        Self { base_url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn response(status: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
}

fn problem(status: &str, code: &str, retry_after: Option<u32>) -> String {
    let number: u16 = status[..3].parse().unwrap();
    let body = serde_json::json!({
        "type": "about:blank", "title": "t", "status": number, "detail": "d", "code": code,
    })
    .to_string();
    let headers = match retry_after {
        Some(seconds) => {
            format!("content-type: application/problem+json\r\nretry-after: {seconds}\r\n")
        }
        None => "content-type: application/problem+json\r\n".to_owned(),
    };
    response(status, &headers, &body)
}

const LICENSE: &str = r#"{"licenseId":"6f1c","planSlug":"pro","login":"alice","remainingBalance":4,"createdUtc":1700000000,"expiresUtc":null}"#;

fn quick() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
        .with_request_timeout(Duration::from_secs(5))
}

fn partner(server: &FakeServer, policy: RetryPolicy) -> PartnerClient {
    PartnerClient::new(&server.base_url, Credentials::new("rsc_test", "rss_canary"))
        .unwrap()
        .with_retry_policy(policy)
}

#[tokio::test]
async fn in_progress_is_retried_with_the_same_key() {
    let server = FakeServer::start(vec![
        problem("409 Conflict", "Reseller.RequestInProgress", Some(0)),
        problem("503 Service Unavailable", "Service.Unavailable", Some(0)),
        response(
            "200 OK",
            "content-type: application/json\r\nidempotent-replayed: true\r\n",
            LICENSE,
        ),
    ])
    .await;
    let issued = partner(&server, quick())
        .issue_license("pro", "alice", None)
        .await
        .unwrap();
    assert!(issued.replayed);
    assert_eq!(issued.value.remaining_balance, 4);
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert!(
            request
                .head
                .starts_with("post /v1/billing/partner/licenses "),
            "{}",
            request.head
        );
        assert!(request.head.contains("x-client-id: rsc_test\r\n"));
        assert!(request.head.contains("x-client-secret: rss_canary\r\n"));
        assert_eq!(
            request.body["idempotencyKey"],
            issued.idempotency_key.as_str()
        );
        assert_eq!(request.body["planSlug"], "pro");
        assert_eq!(request.body["login"], "alice");
    }
}

#[tokio::test]
async fn definite_outcomes_are_returned_at_once() {
    let server = FakeServer::start(vec![
        problem("402 Payment Required", "Reseller.InsufficientQuota", None),
        problem(
            "500 Internal Server Error",
            "Reseller.PromoGenerationFailed",
            None,
        ),
    ])
    .await;
    let client = partner(&server, quick());
    let error = client
        .issue_license("pro", "alice", Some("key-00000001"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InsufficientQuota { .. }), "{error}");
    assert!(error.is_definite());
    let error = client
        .issue_license("pro", "alice", Some("key-00000001"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::PromoGenerationFailed { .. }),
        "{error}"
    );
    assert_eq!(server.seen().len(), 2);
    assert_eq!(server.seen()[0].body["idempotencyKey"], "key-00000001");
}

#[tokio::test]
async fn no_retry_policy_shows_the_raw_conflict() {
    let server = FakeServer::start(vec![problem(
        "409 Conflict",
        "Reseller.RequestInProgress",
        Some(1),
    )])
    .await;
    let error = partner(&server, RetryPolicy::none())
        .issue_license("pro", "alice", None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::RequestInProgress { retry_after: Some(d), .. } if d == Duration::from_secs(1))
    );
    assert!(!error.is_definite());
}

#[tokio::test]
async fn retries_are_bounded() {
    let unavailable = problem("503 Service Unavailable", "Service.Unavailable", Some(0));
    let server = FakeServer::start(vec![unavailable; 5]).await;
    let error = partner(&server, quick().with_max_attempts(3))
        .balances()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ServiceUnavailable { .. }), "{error}");
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn empty_401_is_unauthorized_and_never_retried() {
    let server = FakeServer::start(vec![
        response("401 Unauthorized", "", ""),
        response("401 Unauthorized", "", ""),
    ])
    .await;
    let error = partner(&server, quick()).balances().await.unwrap_err();
    assert!(matches!(error, Error::Unauthorized), "{error}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn transport_errors_are_retried_and_never_show_the_secret() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = PartnerClient::new(base_url, Credentials::new("rsc_test", "rss_canary"))
        .unwrap()
        .with_retry_policy(quick().with_max_attempts(2));
    let error = client
        .issue_license("pro", "alice", None)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Transport(_)), "{error}");
    assert!(!error.is_definite());
    let shown = format!("{error} {error:?} {client:?}");
    assert!(!shown.contains("canary"), "{shown}");
}

#[tokio::test]
async fn a_slow_answer_times_out() {
    let server = FakeServer::start(vec!["hang".to_owned()]).await;
    let policy = RetryPolicy::none().with_request_timeout(Duration::from_millis(200));
    let error = partner(&server, policy).balances().await.unwrap_err();
    assert!(matches!(error, Error::Timeout), "{error}");
}

#[tokio::test]
async fn bad_idempotency_keys_are_refused_locally() {
    let server = FakeServer::start(vec![]).await;
    let error = partner(&server, quick())
        .issue_license("pro", "alice", Some("short"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidInput {
                field: "idempotencyKey",
                ..
            }
        ),
        "{error}"
    );
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn key_creation_is_not_resent_after_an_unknown_outcome() {
    let server = FakeServer::start(vec![
        problem("503 Service Unavailable", "Service.Unavailable", Some(0)),
        response("201 Created", "", "{}"),
    ])
    .await;
    let panel = PanelClient::with_session_token(&server.base_url, "rps_canary")
        .unwrap()
        .with_retry_policy(quick());
    let error = panel.create_api_key(Some("ci")).await.unwrap_err();
    assert!(matches!(error, Error::ServiceUnavailable { .. }), "{error}");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0]
            .head
            .starts_with("post /v1/billing/resellers/me/api-keys ")
    );
    assert!(
        seen[0]
            .head
            .contains("authorization: bearer rps_canary\r\n")
    );
    assert_eq!(seen[0].body["name"], "ci");
}

#[tokio::test]
async fn panel_login_keeps_the_session() {
    let server = FakeServer::start(vec![
        response(
            "201 Created",
            "",
            r#"{"sessionToken":"rps_token","expiresUtc":1700043200}"#,
        ),
        response("204 No Content", "", ""),
    ])
    .await;
    let mut panel = PanelClient::new(&server.base_url)
        .unwrap()
        .with_retry_policy(quick());
    let session = panel.login("rsc_test", "hunter2hunter2").await.unwrap();
    assert_eq!(session.expires_utc, 1700043200);
    assert_eq!(panel.session_expires_utc(), Some(1700043200));
    panel.revoke_api_key("rsk_x/y").await.unwrap();
    let seen = server.seen();
    assert_eq!(seen[0].body["clientId"], "rsc_test");
    assert!(
        seen[1]
            .head
            .starts_with("delete /v1/billing/resellers/me/api-keys/rsk_x%2fy ")
    );
    assert!(seen[1].head.contains("authorization: bearer rps_token\r\n"));
}

const BATCH: &str = r#"{"orderPublicId":"0b6f6f2e-order","batchId":"5d1c7a90-batch","planSlug":"pro","codes":[{"code":"ABCD-EFGH-JKMN-PQRS"},{"code":"TVWX-YZ01-2345-6789"}],"remainingBalance":8,"createdUtc":1700000000}"#;

#[tokio::test]
async fn promo_batch_in_progress_is_retried_with_the_same_key() {
    let server = FakeServer::start(vec![
        problem("409 Conflict", "Reseller.RequestInProgress", Some(0)),
        response(
            "200 OK",
            "content-type: application/json\r\nidempotent-replayed: true\r\n",
            BATCH,
        ),
    ])
    .await;
    let issued = partner(&server, quick())
        .generate_promo_batch("pro", 2, None)
        .await
        .unwrap();
    assert!(issued.replayed);
    let batch = &issued.value;
    assert_eq!(batch.order_public_id, "0b6f6f2e-order");
    assert_eq!(batch.batch_id, "5d1c7a90-batch");
    assert_eq!(batch.plan_slug, "pro");
    assert_eq!(batch.remaining_balance, 8);
    assert_eq!(batch.created_utc, 1700000000);
    let codes: Vec<&str> = batch.codes.iter().map(|c| c.code.as_str()).collect();
    assert_eq!(codes, ["ABCD-EFGH-JKMN-PQRS", "TVWX-YZ01-2345-6789"]);
    // The codes never show in Debug output.
    let shown = format!("{issued:?}");
    assert!(!shown.contains("ABCD-EFGH"), "{shown}");

    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(issued.idempotency_key.len() >= 8);
    for request in &seen {
        assert!(
            request
                .head
                .starts_with("post /v1/billing/partner/promo-batches "),
            "{}",
            request.head
        );
        assert!(request.head.contains("x-client-id: rsc_test\r\n"));
        assert!(request.head.contains("content-type: application/json\r\n"));
        assert_eq!(
            request.body,
            serde_json::json!({
                "planSlug": "pro",
                "count": 2,
                "idempotencyKey": issued.idempotency_key,
            })
        );
    }
}

#[tokio::test]
async fn promo_generation_failure_is_definite_and_not_retried() {
    let server = FakeServer::start(vec![
        problem(
            "500 Internal Server Error",
            "Reseller.PromoGenerationFailed",
            None,
        ),
        response("200 OK", "content-type: application/json\r\n", BATCH),
    ])
    .await;
    let error = partner(&server, quick())
        .generate_promo_batch("pro", 2, Some("batch-key-0001"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::PromoGenerationFailed { .. }),
        "{error}"
    );
    assert!(error.is_definite());
    assert!(!error.is_retryable());
    assert_eq!(error.status(), Some(500));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["idempotencyKey"], "batch-key-0001");
}

#[tokio::test]
async fn promo_definite_refusals_come_back_at_once() {
    let server = FakeServer::start(vec![
        problem("402 Payment Required", "Reseller.InsufficientQuota", None),
        problem("422 Unprocessable Entity", "Reseller.UnknownPlan", None),
        problem(
            "422 Unprocessable Entity",
            "Reseller.IdempotencyKeyReused",
            None,
        ),
    ])
    .await;
    let client = partner(&server, quick());
    let error = client
        .generate_promo_batch("pro", 5, Some("batch-key-0002"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InsufficientQuota { .. }), "{error}");
    let error = client
        .generate_promo_batch("nope", 5, Some("batch-key-0002"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::UnknownPlan { .. }), "{error}");
    let error = client
        .generate_promo_batch("pro", 6, Some("batch-key-0002"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::IdempotencyKeyReused { .. }),
        "{error}"
    );
    assert!(error.is_definite());
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn expired_promo_codes_name_the_batch() {
    let body = serde_json::json!({
        "type": "about:blank", "title": "t", "status": 410,
        "detail": "the codes of this batch are no longer recoverable",
        "code": "Reseller.PromoCodesExpired",
        "orderPublicId": "0b6f6f2e-order", "batchId": "5d1c7a90-batch",
    })
    .to_string();
    let server = FakeServer::start(vec![response(
        "410 Gone",
        "content-type: application/problem+json\r\n",
        &body,
    )])
    .await;
    let error = partner(&server, quick())
        .generate_promo_batch("pro", 2, Some("batch-key-0003"))
        .await
        .unwrap_err();
    let Error::PromoCodesExpired { problem } = &error else {
        panic!("{error}");
    };
    assert_eq!(problem.order_public_id.as_deref(), Some("0b6f6f2e-order"));
    assert_eq!(problem.batch_id.as_deref(), Some("5d1c7a90-batch"));
    let problem = error.problem().unwrap();
    assert_eq!(problem.batch_id.as_deref(), Some("5d1c7a90-batch"));
    assert!(error.is_definite());
    assert_eq!(error.status(), Some(410));
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn promo_counts_and_keys_are_checked_locally() {
    let server = FakeServer::start(vec![]).await;
    let client = partner(&server, quick());
    for count in [0, 1001] {
        let error = client
            .generate_promo_batch("pro", count, None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::InvalidInput { field: "count", .. }),
            "{error}"
        );
    }
    let error = client
        .generate_promo_batch("pro", 1, Some("short"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidInput {
                field: "idempotencyKey",
                ..
            }
        ),
        "{error}"
    );
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn an_undecodable_batch_is_never_quoted() {
    // Codes as bare strings: serde's own message would quote the first one.
    let body = r#"{"orderPublicId":"o","batchId":"b","planSlug":"pro","codes":["SECR-ETCO-DE00-0000"],"remainingBalance":1,"createdUtc":1}"#;
    let server = FakeServer::start(vec![response(
        "200 OK",
        "content-type: application/json\r\n",
        body,
    )])
    .await;
    let error = partner(&server, quick())
        .generate_promo_batch("pro", 1, Some("batch-key-0004"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::UnexpectedResponse { status: 200, .. }),
        "{error}"
    );
    assert!(!error.is_definite());
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("SECR"), "{shown}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn promo_batch_transport_failures_keep_the_key() {
    // The first connection is closed without an answer: the outcome is unknown.
    let server = FakeServer::start(vec![
        String::new(),
        response("200 OK", "content-type: application/json\r\n", BATCH),
    ])
    .await;
    let issued = partner(&server, quick())
        .generate_promo_batch("pro", 2, Some("batch-key-0005"))
        .await
        .unwrap();
    assert!(!issued.replayed);
    assert_eq!(issued.idempotency_key, "batch-key-0005");
    assert_eq!(issued.value.codes.len(), 2);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|request| request.body["idempotencyKey"] == "batch-key-0005")
    );
}
