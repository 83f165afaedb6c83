//! `partner-billing promo generate` through the built binary, against a scripted HTTP server
//! (wiremock), or none at all: what must be refused before anything is sent.

mod common;

use common::{TempDir, assert_one_line_error, assert_success, text};

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const CLIENT_ID: &str = "rsc_AAAAAAAAAAAAAAAAAAAAAAAA";
const SECRET: &str = "rss_canary";

const BATCH: &str = r#"{"orderPublicId":"0b6f6f2e-order","batchId":"5d1c7a90-batch","planSlug":"pro","codes":[{"code":"ABCD-EFGH-JKMN-PQRS"},{"code":"TVWX-YZ01-2345-6789"}],"remainingBalance":8,"createdUtc":1700000000}"#;

const PROMO_BATCHES: &str = "/v1/billing/partner/promo-batches";

/// A scripted service: every `POST /v1/billing/partner/promo-batches` gets `answer`, and
/// exactly one such request must come (checked when the server drops: the CLI never retries
/// a definite outcome). The server runs on a thread of its own, so a test may block on the
/// CLI process meanwhile.
async fn service_answering(answer: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PROMO_BATCHES))
        .respond_with(answer)
        .expect(1)
        .mount(&server)
        .await;
    server
}

/// The one request the service received.
async fn the_request(server: &MockServer) -> Request {
    let mut seen = server.received_requests().await.expect("recording is on");
    assert_eq!(seen.len(), 1, "one request");
    seen.remove(0)
}

/// The JSON body of `request`.
fn body(request: &Request) -> Value {
    request.body_json().expect("a JSON body")
}

fn batch() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(BATCH, "application/json")
}

fn problem(status: u16, code: &str, extra: Value) -> ResponseTemplate {
    let mut body = json!({
        "type": "about:blank", "title": "t", "status": status, "detail": "d", "code": code,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    ResponseTemplate::new(status).set_body_raw(body.to_string(), "application/problem+json")
}

/// Runs `partner-billing --base-url URL <args>` with only the credentials this test chooses.
fn run(base_url: &str, args: &[&str], credentials: bool) -> Output {
    command(base_url, args, credentials)
        .output()
        .expect("run partner-billing")
}

/// `partner-billing --base-url URL <args>`, ready to run, with only the credentials this test
/// chooses.
fn command(base_url: &str, args: &[&str], credentials: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_partner-billing"));
    command.arg("--base-url").arg(base_url).args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PARTNER_BILLING_") {
            command.env_remove(name);
        }
    }
    if credentials {
        command
            .env("PARTNER_BILLING_CLIENT_ID", CLIENT_ID)
            .env("PARTNER_BILLING_SECRET", SECRET);
    }
    command
}

/// A listener that must never see a connection.
struct Untouched(TcpListener);

impl Untouched {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Self(listener)
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.0.local_addr().unwrap())
    }

    fn assert_untouched(&self) {
        match self.0.accept() {
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            other => panic!("the service was contacted: {other:?}"),
        }
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

#[test]
fn an_existing_out_file_is_refused_before_any_request() {
    let dir = TempDir::new();
    let service = Untouched::new();
    let existing = dir.path.join("codes.csv");
    std::fs::write(&existing, "precious\n").unwrap();
    for json in [false, true] {
        let mut args = vec![];
        if json {
            args.push("--json");
        }
        args.extend([
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "3",
            "--out",
            path_str(&existing),
        ]);
        let out = run(&service.base_url(), &args, true);
        assert_eq!(out.status.code(), Some(2));
        let stderr = assert_one_line_error(&out, "already exists");
        assert!(stderr.contains("codes.csv"), "{stderr}");
        assert!(stderr.contains("nothing charged"), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "precious\n");
    service.assert_untouched();
}

#[test]
fn bad_counts_and_keys_are_usage_errors() {
    let dir = TempDir::new();
    let service = Untouched::new();
    let out_file = dir.path.join("codes.csv");
    for (count, expected) in [
        ("0", "--count"),
        ("abc", "--count"),
        ("1001", "--count"),
        ("-1", "--count"),
        ("", "--count"),
    ] {
        let out = run(
            &service.base_url(),
            &[
                "promo",
                "generate",
                "--plan",
                "pro",
                "--count",
                count,
                "--out",
                path_str(&out_file),
            ],
            true,
        );
        assert_eq!(out.status.code(), Some(2), "{count:?}");
        assert_one_line_error(&out, expected);
    }
    let out = run(
        &service.base_url(),
        &[
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "2",
            "--idempotency-key",
            "short",
        ],
        true,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--idempotency-key");
    let out = run(
        &service.base_url(),
        &["promo", "generate", "--plan", "Not A Slug", "--count", "2"],
        true,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--plan");
    let out = run(
        &service.base_url(),
        &["promo", "generate", "--count", "2"],
        true,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--plan");
    assert!(!out_file.exists());
    service.assert_untouched();
}

#[test]
fn missing_credentials_create_no_file() {
    let dir = TempDir::new();
    let service = Untouched::new();
    let out_file = dir.path.join("codes.csv");
    let out = run(
        &service.base_url(),
        &[
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "2",
            "--out",
            path_str(&out_file),
        ],
        false,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "PARTNER_BILLING_CLIENT_ID");
    assert!(!out_file.exists());
    service.assert_untouched();
}

#[tokio::test]
async fn codes_go_to_a_new_private_csv_file() {
    let dir = TempDir::new();
    let server = service_answering(batch()).await;
    let out_file = dir.path.join("codes.csv");
    let out = run(
        &server.uri(),
        &[
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "2",
            "--idempotency-key",
            "campaign-0001",
            "--out",
            path_str(&out_file),
        ],
        true,
    );
    assert_success(&out, &[]);
    let csv = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(
        csv,
        "code,batch_id,order_public_id,plan_slug\n\
         ABCD-EFGH-JKMN-PQRS,5d1c7a90-batch,0b6f6f2e-order,pro\n\
         TVWX-YZ01-2345-6789,5d1c7a90-batch,0b6f6f2e-order,pro\n"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let stdout = text(&out.stdout);
    for expected in [
        "5d1c7a90-batch",
        "0b6f6f2e-order",
        "campaign-0001",
        "remainingBalance: 8",
        "2 written to",
    ] {
        assert!(stdout.contains(expected), "{stdout:?} lacks {expected:?}");
    }
    assert!(!stdout.contains("ABCD"), "codes on stdout: {stdout:?}");

    let request = the_request(&server).await;
    assert_eq!(
        request.headers.get("x-client-id").map(|v| v.as_bytes()),
        Some(CLIENT_ID.as_bytes())
    );
    assert_eq!(
        body(&request),
        json!({"planSlug": "pro", "count": 2, "idempotencyKey": "campaign-0001"})
    );
}

#[tokio::test]
async fn json_with_out_prints_a_summary_without_codes() {
    let dir = TempDir::new();
    let server = service_answering(batch().insert_header("idempotent-replayed", "true")).await;
    let out_file = dir.path.join("codes.csv");
    let out = run(
        &server.uri(),
        &[
            "--json",
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "2",
            "--out",
            path_str(&out_file),
        ],
        true,
    );
    assert_success(&out, &[]);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = body(&the_request(&server).await)["idempotencyKey"].clone();
    assert!(key.as_str().is_some_and(|k| k.len() >= 8), "{key}");
    assert_eq!(
        value,
        json!({
            "out": path_str(&out_file),
            "orderPublicId": "0b6f6f2e-order",
            "batchId": "5d1c7a90-batch",
            "planSlug": "pro",
            "count": 2,
            "remainingBalance": 8,
            "createdUtc": 1700000000,
            "idempotencyKey": key,
            "replayed": true,
        })
    );
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap().lines().count(),
        3
    );
}

#[tokio::test]
async fn without_out_codes_go_to_stdout_and_the_key_to_stderr() {
    let server = service_answering(batch()).await;
    let out = run(
        &server.uri(),
        &["promo", "generate", "--plan", "pro", "--count", "2"],
        true,
    );
    assert_success(&out, &[]);
    assert_eq!(
        text(&out.stdout),
        "ABCD-EFGH-JKMN-PQRS\nTVWX-YZ01-2345-6789\n"
    );
    let key = body(&the_request(&server).await)["idempotencyKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&key), "{stderr:?} lacks {key}");
    assert!(stderr.contains("5d1c7a90-batch"), "{stderr:?}");
    assert!(!stderr.contains("ABCD"), "{stderr:?}");
}

/// Codes sent to a stdout whose reader went away (`| head -1`) are not a quiet end: the batch
/// is charged, so the one line says how to get the same codes again.
#[tokio::test]
async fn codes_into_a_closed_stdout_say_how_to_get_them_again() {
    let server = service_answering(batch()).await;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let args = [
        "promo",
        "generate",
        "--plan",
        "pro",
        "--count",
        "2",
        "--idempotency-key",
        "campaign-0009",
    ];
    let out = command(&server.uri(), &args, true)
        .stdout(writer)
        .output()
        .expect("run partner-billing");
    assert_eq!(out.status.code(), Some(1));
    let stderr = assert_one_line_error(&out, "the batch was charged");
    assert!(
        stderr.contains("--idempotency-key campaign-0009"),
        "{stderr}"
    );
}

#[tokio::test]
async fn json_without_out_prints_the_batch_and_the_key() {
    let server = service_answering(batch()).await;
    let out = run(
        &server.uri(),
        &[
            "--json",
            "promo",
            "generate",
            "--plan",
            "pro",
            "--count",
            "2",
            "--idempotency-key",
            "campaign-0002",
        ],
        true,
    );
    assert_success(&out, &[]);
    let mut expected: Value = serde_json::from_str(BATCH).unwrap();
    expected["idempotencyKey"] = json!("campaign-0002");
    expected["replayed"] = json!(false);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value, expected);
    assert!(out.stderr.is_empty(), "{:?}", text(&out.stderr));
}

#[tokio::test]
async fn failures_print_the_key_and_leave_no_file() {
    let dir = TempDir::new();
    let out_file = dir.path.join("codes.csv");
    let cases = [
        (
            problem(402, "Reseller.InsufficientQuota", json!({})),
            "Reseller.InsufficientQuota: d (nothing was charged; idempotency key campaign-0003)",
        ),
        (
            problem(500, "Reseller.PromoGenerationFailed", json!({})),
            "(nothing was charged; retry with --idempotency-key campaign-0003)",
        ),
        // The service's own words already say it: said once.
        (
            ResponseTemplate::new(500).set_body_raw(
                json!({
                    "type": "about:blank", "title": "t", "status": 500,
                    "code": "Reseller.PromoGenerationFailed",
                    "detail": "The codes could not be produced. Nothing was charged and nothing issued; retry with the same idempotency key.",
                })
                .to_string(),
                "application/problem+json",
            ),
            "nothing issued; retry with the same idempotency key (retry with --idempotency-key campaign-0003)",
        ),
        (
            problem(
                410,
                "Reseller.PromoCodesExpired",
                json!({"orderPublicId": "0b6f6f2e-order", "batchId": "5d1c7a90-batch"}),
            ),
            "order 0b6f6f2e-order, batch 5d1c7a90-batch",
        ),
        (
            problem(500, "Internal.Error", json!({})),
            "the outcome is unknown: retry with --idempotency-key campaign-0003",
        ),
        (ResponseTemplate::new(401), "unauthorized"),
    ];
    for (answer, expected) in cases {
        let server = service_answering(answer).await;
        let out = run(
            &server.uri(),
            &[
                "promo",
                "generate",
                "--plan",
                "pro",
                "--count",
                "2",
                "--idempotency-key",
                "campaign-0003",
                "--out",
                path_str(&out_file),
            ],
            true,
        );
        assert_eq!(out.status.code(), Some(1), "{expected}");
        let stderr = assert_one_line_error(&out, expected);
        assert!(stderr.contains("campaign-0003"), "{stderr}");
        assert!(!out_file.exists(), "{expected}: the file was left behind");
        // Definite outcomes are not retried: one request each.
        assert_eq!(the_request(&server).await.url.path(), PROMO_BATCHES);
    }
}
