//! Starting and stopping the real binary: the master key is checked at start, and SIGTERM
//! drains and exits cleanly.

use std::process::{Command, Stdio};
use std::time::Duration;

use partner_billing_tests::TempDir;
use partner_billing_tests::process::{ServerProcess, binary};

/// Runs the server expecting it to refuse to start; returns its stderr.
fn refuses_to_start(dir: &TempDir, key_file: Option<&std::path::Path>) -> String {
    let database = dir.path.join("billing.db");
    let mut command = Command::new(binary("partner-billing-server"));
    command
        .env_clear()
        .env(
            "PARTNER_BILLING_DATABASE_URL",
            format!("sqlite://{}", database.display()),
        )
        .env("PARTNER_BILLING_LISTEN", "127.0.0.1:0")
        // The refusal stays one line even where backtraces are asked for.
        .env("RUST_BACKTRACE", "1")
        .current_dir(&dir.path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(path) = key_file {
        command.env("PARTNER_BILLING_MASTER_KEY_FILE", path);
    }
    let output = command.output().expect("run server");
    assert!(
        !output.status.success(),
        "the server started with a bad master key"
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn a_bad_master_key_stops_the_server_at_start() {
    let dir = TempDir::new();
    let configured_missing = dir.path.join("missing.key");
    let stderr = refuses_to_start(&dir, Some(&configured_missing));
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(
        !dir.path.join("billing.db").exists(),
        "refused before the database was created"
    );
    assert!(
        !configured_missing.exists(),
        "a configured key is never invented"
    );

    let malformed = dir.path.join("malformed.key");
    partner_billing_tests::write_private(&malformed, b"not a key");
    let stderr = refuses_to_start(&dir, Some(&malformed));
    assert!(stderr.contains("malformed"), "{stderr}");

    let unreadable = dir.path.join("a-directory.key");
    std::fs::create_dir(&unreadable).unwrap();
    let stderr = refuses_to_start(&dir, Some(&unreadable));
    assert!(stderr.contains("cannot be read"), "{stderr}");

    // A well-formed key that others can read is refused as exposed.
    let exposed = dir.path.join("exposed.key");
    std::fs::write(&exposed, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(
        &exposed,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let stderr = refuses_to_start(&dir, Some(&exposed));
    assert!(stderr.contains("readable by group or others"), "{stderr}");
    assert!(
        !stderr.contains(&"ab".repeat(32)),
        "the key is never shown: {stderr}"
    );

    // Every refusal came before the database was opened: none was created.
    assert!(
        !dir.path.join("billing.db").exists(),
        "a refused key file left a database behind"
    );
}

#[test]
fn an_admin_command_with_a_missing_key_file_creates_no_database() {
    let dir = TempDir::new();
    let database = dir.path.join("billing.db");
    let output = Command::new(binary("partner-billing"))
        .env_clear()
        .env(
            "PARTNER_BILLING_DATABASE_URL",
            format!("sqlite://{}", database.display()),
        )
        .env(
            "PARTNER_BILLING_MASTER_KEY_FILE",
            dir.path.join("missing.key"),
        )
        .args(["admin", "plan", "list"])
        .current_dir(&dir.path)
        .output()
        .expect("run admin");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(
        !database.exists(),
        "refused before the database was created"
    );
}

#[test]
fn the_default_master_key_is_created_private_beside_the_database() {
    let dir = TempDir::new();
    let data = dir.path.join("data");
    std::fs::create_dir(&data).unwrap();
    let url = format!("sqlite://{}", data.join("billing.db").display());
    let mut server = ServerProcess::start(&url, &dir.path, &[]);
    let key = data.join("partner-billing.key");
    let metadata = std::fs::metadata(&key).expect("key created beside the database");
    assert_eq!(metadata.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
    }
    let first = std::fs::read(&key).unwrap();
    let status = server
        .terminate(Duration::from_secs(15))
        .expect("SIGTERM stops the server");
    assert!(status.success(), "graceful shutdown exits 0, got {status}");
    // A restart reuses the key.
    let mut again = ServerProcess::start(&url, &dir.path, &[]);
    assert_eq!(std::fs::read(&key).unwrap(), first);
    assert!(
        again
            .terminate(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.path.join("billing.db").display());
    let mut server = ServerProcess::start(&url, &dir.path, &[]);
    let health = reqwest::get(format!("{}/healthz", server.base_url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.json::<serde_json::Value>().await.unwrap()["status"],
        "ok"
    );
    let status = server
        .terminate(Duration::from_secs(15))
        .expect("exits after SIGTERM");
    assert!(status.success(), "{status}");
    assert!(
        reqwest::get(format!("{}/healthz", server.base_url))
            .await
            .is_err(),
        "no longer listening"
    );
}
