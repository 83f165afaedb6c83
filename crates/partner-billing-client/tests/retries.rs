//! The SDK against a scripted HTTP server (wiremock): what is retried, what is not, and what is
//! sent.
//!
//! Each mock says how often it must be hit (`expect`); the server checks that when it is
//! dropped, so "not retried" fails the test if the SDK sends the request a second time.
//!
//! Over 450 lines on purpose: one scripted server and its helpers, and a row of short
//! scenarios that read best side by side.

use std::time::Duration;

use partner_billing_client::{Credentials, Error, PanelClient, PartnerClient, RetryPolicy};
use wiremock::matchers::{any, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const LICENSES: &str = "/v1/billing/partner/licenses";
const BALANCES: &str = "/v1/billing/partner/balances";
const PROMO_BATCHES: &str = "/v1/billing/partner/promo-batches";
const API_KEYS: &str = "/v1/billing/resellers/me/api-keys";

const LICENSE: &str = r#"{"licenseId":"6f1c","planSlug":"pro","login":"alice","remainingBalance":4,"createdUtc":1700000000,"startsUtc":1700000000,"expiresUtc":null,"revokedUtc":null}"#;

const BATCH: &str = r#"{"orderPublicId":"0b6f6f2e-order","batchId":"5d1c7a90-batch","planSlug":"pro","codes":[{"code":"ABCD-EFGH-JKMN-PQRS"},{"code":"TVWX-YZ01-2345-6789"}],"remainingBalance":8,"createdUtc":1700000000}"#;

/// An RFC 9457 problem as the server sends it, with `Retry-After` when given.
fn problem(status: u16, code: &str, retry_after: Option<u32>) -> ResponseTemplate {
    let body = serde_json::json!({
        "type": "about:blank", "title": "t", "status": status, "detail": "d", "code": code,
    });
    let answer =
        ResponseTemplate::new(status).set_body_raw(body.to_string(), "application/problem+json");
    match retry_after {
        Some(seconds) => answer.insert_header("retry-after", seconds.to_string()),
        None => answer,
    }
}

/// A JSON success.
fn json(status: u16, body: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(body, "application/json")
}

/// A JSON success marked as a stored result (`Idempotent-Replayed: true`).
fn replayed(body: &str) -> ResponseTemplate {
    json(200, body).insert_header("idempotent-replayed", "true")
}

/// Answers `method_name path_value` with `answers` one after another, each exactly once: an
/// earlier mock has a higher priority and stops matching after its one use.
async fn answer_in_turn(
    server: &MockServer,
    method_name: &str,
    path_value: &str,
    answers: Vec<ResponseTemplate>,
) {
    for (turn, answer) in answers.into_iter().enumerate() {
        let priority = u8::try_from(turn + 1).expect("a short script");
        Mock::given(method(method_name))
            .and(path(path_value))
            .respond_with(answer)
            .up_to_n_times(1)
            .expect(1)
            .with_priority(priority)
            .mount(server)
            .await;
    }
}

/// Answers `method_name path_value` with `answer`, and expects exactly `times` such requests.
async fn answer_times(
    server: &MockServer,
    method_name: &str,
    path_value: &str,
    answer: ResponseTemplate,
    times: u64,
) {
    Mock::given(method(method_name))
        .and(path(path_value))
        .respond_with(answer)
        .expect(times)
        .mount(server)
        .await;
}

/// Fails the test if any request at all reaches the server.
async fn expect_no_request(server: &MockServer) {
    Mock::given(any())
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(server)
        .await;
}

/// Every request the server received, in order.
async fn received(server: &MockServer) -> Vec<Request> {
    server
        .received_requests()
        .await
        .expect("request recording is on by default")
}

/// A request header as text ("" when absent).
fn header<'a>(request: &'a Request, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
}

fn body(request: &Request) -> serde_json::Value {
    request.body_json().expect("a JSON body")
}

fn quick() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
        .with_request_timeout(Duration::from_secs(5))
}

fn partner(server: &MockServer, policy: RetryPolicy) -> PartnerClient {
    PartnerClient::new(server.uri(), Credentials::new("rsc_test", "rss_canary"))
        .unwrap()
        .with_retry_policy(policy)
}

#[tokio::test]
async fn in_progress_is_retried_with_the_same_key() {
    let server = MockServer::start().await;
    answer_in_turn(
        &server,
        "POST",
        LICENSES,
        vec![
            problem(409, "Reseller.RequestInProgress", Some(0)),
            problem(503, "Service.Unavailable", Some(0)),
            replayed(LICENSE),
        ],
    )
    .await;
    let issued = partner(&server, quick())
        .issue_license("pro", "alice", None)
        .await
        .unwrap();
    assert!(issued.replayed);
    assert_eq!(issued.value.remaining_balance, 4);
    let seen = received(&server).await;
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert_eq!(header(request, "x-client-id"), "rsc_test");
        assert_eq!(header(request, "x-client-secret"), "rss_canary");
        let sent = body(request);
        assert_eq!(sent["idempotencyKey"], issued.idempotency_key.as_str());
        assert_eq!(sent["planSlug"], "pro");
        assert_eq!(sent["login"], "alice");
    }
}

#[tokio::test]
async fn definite_outcomes_are_returned_at_once() {
    let server = MockServer::start().await;
    answer_in_turn(
        &server,
        "POST",
        LICENSES,
        vec![
            problem(402, "Reseller.InsufficientQuota", None),
            problem(500, "Reseller.PromoGenerationFailed", None),
        ],
    )
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
    let seen = received(&server).await;
    assert_eq!(seen.len(), 2);
    assert_eq!(body(&seen[0])["idempotencyKey"], "key-00000001");
}

#[tokio::test]
async fn no_retry_policy_shows_the_raw_conflict() {
    let server = MockServer::start().await;
    answer_times(
        &server,
        "POST",
        LICENSES,
        problem(409, "Reseller.RequestInProgress", Some(1)),
        1,
    )
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
    let server = MockServer::start().await;
    answer_times(
        &server,
        "GET",
        BALANCES,
        problem(503, "Service.Unavailable", Some(0)),
        3,
    )
    .await;
    let error = partner(&server, quick().with_max_attempts(3))
        .balances()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ServiceUnavailable { .. }), "{error}");
}

#[tokio::test]
async fn empty_401_is_unauthorized_and_never_retried() {
    let server = MockServer::start().await;
    answer_times(&server, "GET", BALANCES, ResponseTemplate::new(401), 1).await;
    let error = partner(&server, quick()).balances().await.unwrap_err();
    assert!(matches!(error, Error::Unauthorized), "{error}");
}

#[tokio::test]
async fn transport_errors_are_retried_and_never_show_the_secret() {
    // Nothing listens on this port: every connection is refused.
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
    let server = MockServer::start().await;
    let slow = json(200, r#"{"balances":[]}"#).set_delay(Duration::from_secs(30));
    answer_times(&server, "GET", BALANCES, slow, 1).await;
    let policy = RetryPolicy::none().with_request_timeout(Duration::from_millis(200));
    let error = partner(&server, policy).balances().await.unwrap_err();
    assert!(matches!(error, Error::Timeout), "{error}");
}

#[tokio::test]
async fn bad_idempotency_keys_are_refused_locally() {
    let server = MockServer::start().await;
    expect_no_request(&server).await;
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
}

#[tokio::test]
async fn key_creation_is_not_resent_after_an_unknown_outcome() {
    let server = MockServer::start().await;
    answer_times(
        &server,
        "POST",
        API_KEYS,
        problem(503, "Service.Unavailable", Some(0)),
        1,
    )
    .await;
    let panel = PanelClient::with_session_token(server.uri(), "rps_canary")
        .unwrap()
        .with_retry_policy(quick());
    let error = panel.create_api_key(Some("ci")).await.unwrap_err();
    assert!(matches!(error, Error::ServiceUnavailable { .. }), "{error}");
    let seen = received(&server).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(header(&seen[0], "authorization"), "Bearer rps_canary");
    assert_eq!(body(&seen[0])["name"], "ci");
}

#[tokio::test]
async fn panel_login_keeps_the_session() {
    let server = MockServer::start().await;
    answer_times(
        &server,
        "POST",
        "/v1/billing/resellers/sessions",
        json(
            201,
            r#"{"sessionToken":"rps_token","expiresUtc":1700043200}"#,
        ),
        1,
    )
    .await;
    // The key id is one path segment: its slash is percent-encoded.
    answer_times(
        &server,
        "DELETE",
        "/v1/billing/resellers/me/api-keys/rsk_x%2Fy",
        ResponseTemplate::new(204),
        1,
    )
    .await;
    let mut panel = PanelClient::new(server.uri())
        .unwrap()
        .with_retry_policy(quick());
    let session = panel.login("rsc_test", "hunter2hunter2").await.unwrap();
    assert_eq!(session.expires_utc, 1700043200);
    assert_eq!(panel.session_expires_utc(), Some(1700043200));
    panel.revoke_api_key("rsk_x/y").await.unwrap();
    let seen = received(&server).await;
    assert_eq!(body(&seen[0])["clientId"], "rsc_test");
    assert_eq!(header(&seen[1], "authorization"), "Bearer rps_token");
}

#[tokio::test]
async fn promo_batch_in_progress_is_retried_with_the_same_key() {
    let server = MockServer::start().await;
    answer_in_turn(
        &server,
        "POST",
        PROMO_BATCHES,
        vec![
            problem(409, "Reseller.RequestInProgress", Some(0)),
            replayed(BATCH),
        ],
    )
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

    let seen = received(&server).await;
    assert_eq!(seen.len(), 2);
    assert!(issued.idempotency_key.len() >= 8);
    for request in &seen {
        assert_eq!(header(request, "x-client-id"), "rsc_test");
        assert_eq!(header(request, "content-type"), "application/json");
        assert_eq!(
            body(request),
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
    let server = MockServer::start().await;
    answer_times(
        &server,
        "POST",
        PROMO_BATCHES,
        problem(500, "Reseller.PromoGenerationFailed", None),
        1,
    )
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
    let seen = received(&server).await;
    assert_eq!(body(&seen[0])["idempotencyKey"], "batch-key-0001");
}

#[tokio::test]
async fn promo_definite_refusals_come_back_at_once() {
    let server = MockServer::start().await;
    answer_in_turn(
        &server,
        "POST",
        PROMO_BATCHES,
        vec![
            problem(402, "Reseller.InsufficientQuota", None),
            problem(422, "Reseller.UnknownPlan", None),
            problem(422, "Reseller.IdempotencyKeyReused", None),
        ],
    )
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
}

#[tokio::test]
async fn expired_promo_codes_name_the_batch() {
    let body = serde_json::json!({
        "type": "about:blank", "title": "t", "status": 410,
        "detail": "the codes of this batch are no longer recoverable",
        "code": "Reseller.PromoCodesExpired",
        "orderPublicId": "0b6f6f2e-order", "batchId": "5d1c7a90-batch",
    });
    let gone =
        ResponseTemplate::new(410).set_body_raw(body.to_string(), "application/problem+json");
    let server = MockServer::start().await;
    answer_times(&server, "POST", PROMO_BATCHES, gone, 1).await;
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
}

#[tokio::test]
async fn promo_counts_and_keys_are_checked_locally() {
    let server = MockServer::start().await;
    expect_no_request(&server).await;
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
}

#[tokio::test]
async fn an_undecodable_batch_is_never_quoted() {
    // Codes as bare strings: serde's own message would quote the first one.
    let body = r#"{"orderPublicId":"o","batchId":"b","planSlug":"pro","codes":["SECR-ETCO-DE00-0000"],"remainingBalance":1,"createdUtc":1}"#;
    let server = MockServer::start().await;
    answer_times(&server, "POST", PROMO_BATCHES, json(200, body), 1).await;
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
}

#[tokio::test]
async fn promo_batch_transport_failures_keep_the_key() {
    let server = MockServer::start().await;
    // The first request's connection is closed without an answer: the outcome is unknown.
    Mock::given(method("POST"))
        .and(path(PROMO_BATCHES))
        .respond_with_err(|_: &Request| {
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "hung up")
        })
        .up_to_n_times(1)
        .expect(1)
        .with_priority(1)
        .mount(&server)
        .await;
    answer_times(&server, "POST", PROMO_BATCHES, json(200, BATCH), 1).await;
    let issued = partner(&server, quick())
        .generate_promo_batch("pro", 2, Some("batch-key-0005"))
        .await
        .unwrap();
    assert!(!issued.replayed);
    assert_eq!(issued.idempotency_key, "batch-key-0005");
    assert_eq!(issued.value.codes.len(), 2);
    let seen = received(&server).await;
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|request| body(request)["idempotencyKey"] == "batch-key-0005")
    );
}

/// A database failover as the issue measured it: the service answers 503 with
/// `Retry-After: 2` for 10 to 14 s. The default budget outlasts it whatever the jitter, with
/// or without `Retry-After`, and still ends.
#[test]
fn the_default_budget_outlasts_a_failover() {
    let policy = RetryPolicy::default();
    for retry_after in [None, Some(1), Some(2), Some(5)] {
        let retry_after = retry_after.map(Duration::from_secs);
        for answer_time in [Duration::ZERO, Duration::from_millis(50)] {
            let mut elapsed = answer_time;
            let mut attempt = 1;
            while let Some(wait) = policy.next_retry(attempt, elapsed, retry_after) {
                elapsed += wait + answer_time;
                attempt += 1;
            }
            assert!(
                elapsed >= Duration::from_secs(30),
                "gave up after {elapsed:?} and {attempt} attempts (Retry-After {retry_after:?})"
            );
            assert!(elapsed <= policy.retry_budget + answer_time, "{elapsed:?}");
        }
    }
}

/// Six `503 Retry-After: 1` in a row (the SDK used to give up after five attempts): the
/// default policy carries the write through, every attempt with the same key.
#[tokio::test]
async fn a_failover_longer_than_five_attempts_is_retried_through() {
    let server = MockServer::start().await;
    let mut answers = vec![problem(503, "Service.Unavailable", Some(1)); 6];
    answers.push(json(200, LICENSE));
    answer_in_turn(&server, "POST", LICENSES, answers).await;
    let issued = partner(&server, RetryPolicy::default())
        .issue_license("pro", "alice", None)
        .await
        .unwrap();
    assert!(!issued.replayed);
    let seen = received(&server).await;
    assert_eq!(seen.len(), 7);
    for request in &seen {
        assert_eq!(
            body(request)["idempotencyKey"],
            issued.idempotency_key.as_str()
        );
    }
}

/// The budget ends the retries even when attempts are left.
#[tokio::test]
async fn retries_stop_at_the_budget() {
    let server = MockServer::start().await;
    answer_times(
        &server,
        "GET",
        BALANCES,
        problem(503, "Service.Unavailable", Some(1)),
        2,
    )
    .await;
    let policy = quick()
        .with_backoff(Duration::from_millis(5), Duration::from_secs(2))
        .with_max_attempts(10)
        .with_retry_budget(Duration::from_millis(1900));
    let error = partner(&server, policy).balances().await.unwrap_err();
    assert!(matches!(error, Error::ServiceUnavailable { .. }), "{error}");
}
