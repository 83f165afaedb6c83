//! The master key is bound to its database, and the files the service creates are private
//! (docs/security.md).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use partner_billing::crypto::MasterKey;
use partner_billing_tests::process::{ServerProcess, binary};
use partner_billing_tests::{Db, TempDir, both_databases, fresh_database, write_private};

both_databases!(a_key_other_than_the_databases_is_refused_at_every_start);

/// Runs `program` with `args` over `database_url` in `dir`, expecting it to refuse; returns its
/// stderr. Bounded: a process that starts serving instead is killed and the test fails.
fn refuses(
    program: &str,
    args: &[&str],
    database_url: &str,
    dir: &Path,
    key: Option<&Path>,
) -> String {
    let mut command = Command::new(binary(program));
    command
        .args(args)
        .env_clear()
        .env("PARTNER_BILLING_DATABASE_URL", database_url)
        .env("PARTNER_BILLING_LISTEN", "127.0.0.1:0")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(key) = key {
        command.env("PARTNER_BILLING_MASTER_KEY_FILE", key);
    }
    let mut child = command.spawn().expect("start");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{program} {args:?} kept running instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().expect("output");
    assert!(!status.success(), "{program} {args:?} must refuse");
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

async fn a_key_other_than_the_databases_is_refused_at_every_start(db: Db) {
    let (url, _home) = fresh_database(&db).await;
    let dir = TempDir::new();
    let first = dir.path.join("first.key");
    let second = dir.path.join("second.key");
    write_private(&first, hex::encode(rand::random::<[u8; 32]>()).as_bytes());
    write_private(&second, hex::encode(rand::random::<[u8; 32]>()).as_bytes());
    let first_arg = first.display().to_string();
    let second_arg = second.display().to_string();

    // The first start records the key's fingerprint.
    let server = ServerProcess::start(
        &url,
        &dir.path,
        &[("PARTNER_BILLING_MASTER_KEY_FILE", &first_arg)],
    );
    drop(server);
    let recorded: String = {
        let store =
            partner_billing::store::Store::connect(&url, partner_billing::clock::Clock::system())
                .await
                .unwrap();
        let fingerprint = sqlx::query_scalar("SELECT fingerprint FROM master_key_check")
            .fetch_one(store.pool())
            .await
            .unwrap();
        store.close().await;
        fingerprint
    };
    let key = MasterKey::from_file_contents(&std::fs::read(&first).unwrap()).unwrap();
    assert_eq!(recorded, key.fingerprint());
    assert!(!recorded.contains(&hex::encode(std::fs::read(&first).unwrap())));

    // Another key: refused by the server and by every admin command, naming the file.
    let stderr = refuses(
        "partner-billing-server",
        &[],
        &url,
        &dir.path,
        Some(&second),
    );
    assert!(
        stderr.contains(&second_arg) && stderr.contains("another key"),
        "{stderr}"
    );
    let stderr = refuses(
        "partner-billing",
        &["admin", "plan", "list"],
        &url,
        &dir.path,
        Some(&second),
    );
    assert!(stderr.contains(&second_arg), "{stderr}");

    // The right key, readable by others: refused.
    chmod(&first, 0o644);
    let stderr = refuses("partner-billing-server", &[], &url, &dir.path, Some(&first));
    assert!(
        stderr.contains(&first_arg) && stderr.contains("group or others"),
        "{stderr}"
    );
    let stderr = refuses(
        "partner-billing",
        &["admin", "plan", "list"],
        &url,
        &dir.path,
        Some(&first),
    );
    assert!(stderr.contains(&first_arg), "{stderr}");
    chmod(&first, 0o600);

    // A named file that is missing: refused.
    let missing = dir.path.join("missing.key");
    let stderr = refuses(
        "partner-billing-server",
        &[],
        &url,
        &dir.path,
        Some(&missing),
    );
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");

    // A second replica started elsewhere with the default key file does not mint a key.
    let elsewhere = TempDir::new();
    let default_key = match &db {
        Db::Sqlite => Path::new(url.trim_start_matches("sqlite://"))
            .parent()
            .unwrap()
            .join("partner-billing.key"),
        Db::Postgres(_) => elsewhere.path.join("partner-billing.key"),
    };
    let stderr = refuses("partner-billing-server", &[], &url, &elsewhere.path, None);
    // The file as the server names it: beside a SQLite database, or in the working directory.
    let shown = match &db {
        Db::Sqlite => default_key.display().to_string(),
        Db::Postgres(_) => "partner-billing.key".to_owned(),
    };
    assert!(
        stderr.contains(&shown) && stderr.contains("already has a master key"),
        "{stderr}"
    );
    assert!(!default_key.exists(), "no key was minted");

    // The right key still starts.
    let server = ServerProcess::start(
        &url,
        &dir.path,
        &[("PARTNER_BILLING_MASTER_KEY_FILE", &first_arg)],
    );
    let health = reqwest::get(format!("{}/healthz", server.base_url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn files_the_service_creates_are_private() {
    let dir = TempDir::new();
    let data = dir.path.join("data");
    std::fs::create_dir(&data).unwrap();
    let database = data.join("billing.db");
    let url = format!("sqlite://{}", database.display());
    let server = ServerProcess::start(&url, &dir.path, &[]);
    // A write, so that the WAL and its index are in use.
    let health = reqwest::get(format!("{}/healthz", server.base_url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    for name in [
        "billing.db",
        "billing.db-wal",
        "billing.db-shm",
        "partner-billing.key",
    ] {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
    drop(server);
}

#[tokio::test]
async fn the_sqlite_wal_is_bounded() {
    let app = partner_billing_tests::TestApp::spawn(&Db::Sqlite).await;
    let limit: i64 = sqlx::query_scalar("PRAGMA journal_size_limit")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(limit, 64 * 1024 * 1024);
    app.stop().await;
}
