//! `partner-billing promo generate` through the built binary, against a scripted HTTP server
//! (or none at all: what must be refused before anything is sent).

mod common;

use common::{TempDir, assert_one_line_error, assert_success, text};

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

const CLIENT_ID: &str = "rsc_AAAAAAAAAAAAAAAAAAAAAAAA";
const SECRET: &str = "rss_canary";

const BATCH: &str = r#"{"orderPublicId":"0b6f6f2e-order","batchId":"5d1c7a90-batch","planSlug":"pro","codes":[{"code":"ABCD-EFGH-JKMN-PQRS"},{"code":"TVWX-YZ01-2345-6789"}],"remainingBalance":8,"createdUtc":1700000000}"#;

/// A request as the fake server saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Value,
}

/// Answers each connection with the next scripted response, then closes it.
struct FakeServer {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    fn start(script: Vec<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let thread = std::thread::spawn(move || {
            for response in script {
                let Ok((mut socket, _)) = listener.accept() else {
                    return;
                };
                socket
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let read = socket.read(&mut chunk).unwrap();
                    assert!(read > 0, "connection closed mid-request");
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
                    let read = socket.read(&mut chunk).unwrap();
                    buffer.extend_from_slice(&chunk[..read]);
                }
                let body = serde_json::from_slice(&buffer[head_end..]).unwrap_or_default();
                record.lock().unwrap().push(Seen { head, body });
                socket.write_all(response.as_bytes()).unwrap();
                let _ = socket.shutdown(std::net::Shutdown::Write);
            }
        });
        Self {
            base_url,
            seen,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        // Unblocks a pending accept, so the thread ends.
        if let Some(addr) = self.base_url.strip_prefix("http://") {
            let _ = std::net::TcpStream::connect(addr);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn response(status: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
}

fn problem(status: &str, code: &str, extra: Value) -> String {
    let number: u16 = status[..3].parse().unwrap();
    let mut body = json!({
        "type": "about:blank", "title": "t", "status": number, "detail": "d", "code": code,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    response(
        status,
        "content-type: application/problem+json\r\n",
        &body.to_string(),
    )
}

/// Runs `partner-billing --base-url URL <args>` with only the credentials this test chooses.
fn run(base_url: &str, args: &[&str], credentials: bool) -> Output {
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
    command.output().expect("run partner-billing")
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
    let dir = TempDir::new("promo");
    let service = Untouched::new();
    let existing = dir.0.join("codes.csv");
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
    let dir = TempDir::new("promo");
    let service = Untouched::new();
    let out_file = dir.0.join("codes.csv");
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
    let dir = TempDir::new("promo");
    let service = Untouched::new();
    let out_file = dir.0.join("codes.csv");
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

#[test]
fn codes_go_to_a_new_private_csv_file() {
    let dir = TempDir::new("promo");
    let server = FakeServer::start(vec![response(
        "200 OK",
        "content-type: application/json\r\n",
        BATCH,
    )]);
    let out_file = dir.0.join("codes.csv");
    let out = run(
        &server.base_url,
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

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0]
            .head
            .starts_with("post /v1/billing/partner/promo-batches "),
        "{}",
        seen[0].head
    );
    assert!(
        seen[0]
            .head
            .contains(&format!("x-client-id: {}\r\n", CLIENT_ID.to_lowercase()))
    );
    assert_eq!(
        seen[0].body,
        json!({"planSlug": "pro", "count": 2, "idempotencyKey": "campaign-0001"})
    );
}

#[test]
fn json_with_out_prints_a_summary_without_codes() {
    let dir = TempDir::new("promo");
    let server = FakeServer::start(vec![response(
        "200 OK",
        "content-type: application/json\r\nidempotent-replayed: true\r\n",
        BATCH,
    )]);
    let out_file = dir.0.join("codes.csv");
    let out = run(
        &server.base_url,
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
    let key = server.seen()[0].body["idempotencyKey"].clone();
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

#[test]
fn without_out_codes_go_to_stdout_and_the_key_to_stderr() {
    let server = FakeServer::start(vec![response(
        "200 OK",
        "content-type: application/json\r\n",
        BATCH,
    )]);
    let out = run(
        &server.base_url,
        &["promo", "generate", "--plan", "pro", "--count", "2"],
        true,
    );
    assert_success(&out, &[]);
    assert_eq!(
        text(&out.stdout),
        "ABCD-EFGH-JKMN-PQRS\nTVWX-YZ01-2345-6789\n"
    );
    let key = server.seen()[0].body["idempotencyKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&key), "{stderr:?} lacks {key}");
    assert!(stderr.contains("5d1c7a90-batch"), "{stderr:?}");
    assert!(!stderr.contains("ABCD"), "{stderr:?}");
}

#[test]
fn json_without_out_prints_the_batch_and_the_key() {
    let server = FakeServer::start(vec![response(
        "200 OK",
        "content-type: application/json\r\n",
        BATCH,
    )]);
    let out = run(
        &server.base_url,
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

#[test]
fn failures_print_the_key_and_leave_no_file() {
    let dir = TempDir::new("promo");
    let out_file = dir.0.join("codes.csv");
    let cases = [
        (
            problem(
                "402 Payment Required",
                "Reseller.InsufficientQuota",
                json!({}),
            ),
            "Reseller.InsufficientQuota: d (nothing was charged; idempotency key campaign-0003)",
        ),
        (
            problem(
                "500 Internal Server Error",
                "Reseller.PromoGenerationFailed",
                json!({}),
            ),
            "(nothing was charged; retry with --idempotency-key campaign-0003)",
        ),
        (
            problem(
                "410 Gone",
                "Reseller.PromoCodesExpired",
                json!({"orderPublicId": "0b6f6f2e-order", "batchId": "5d1c7a90-batch"}),
            ),
            "order 0b6f6f2e-order, batch 5d1c7a90-batch",
        ),
        (
            problem("500 Internal Server Error", "Internal.Error", json!({})),
            "the outcome is unknown: retry with --idempotency-key campaign-0003",
        ),
        (response("401 Unauthorized", "", ""), "unauthorized"),
    ];
    for (answer, expected) in cases {
        let server = FakeServer::start(vec![answer]);
        let out = run(
            &server.base_url,
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
        assert_eq!(server.seen().len(), 1, "{expected}");
    }
}
