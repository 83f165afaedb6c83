//! What every test suite of the workspace shares, so that each exists once: a temporary
//! directory removed on drop, and a scratch PostgreSQL database per test on the server that
//! `PARTNER_BILLING_TEST_POSTGRES_URL` names.
//!
//! It knows no Partner Billing type and depends on none of the workspace's crates, so the core's
//! own unit tests can use it as well as the core's test kit, the CLI's tests and the end-to-end
//! harness above them all.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Once;

use sqlx::{Connection, PgConnection};

/// The PostgreSQL server the tests run on (test traffic goes there).
pub const POSTGRES_URL_ENV: &str = "PARTNER_BILLING_TEST_POSTGRES_URL";

/// Where scratch databases are created and dropped when test traffic goes through a pooler
/// (such as PgBouncer, which passes every database name through): a direct connection.
pub const POSTGRES_ADMIN_URL_ENV: &str = "PARTNER_BILLING_TEST_POSTGRES_ADMIN_URL";

/// A scratch database older than this is a run's leftover (a failed test keeps its database
/// for a look); a run going on beside this one keeps its younger ones.
const LEFTOVER_AFTER_SECONDS: u64 = 2 * 3600;

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("pbt-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self { path }
    }

    /// The directory, kept from now on (removed by whoever takes it): a test that fails before
    /// its clean-up leaves it for a look.
    pub fn keep(self) -> PathBuf {
        let path = self.path.clone();
        std::mem::forget(self);
        path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The PostgreSQL server's URL from [`POSTGRES_URL_ENV`], or `None`, and then a line on
/// standard error, once per test binary, that its PostgreSQL runs are skipped. The line is
/// written past the test harness's capture of `eprintln!`, so a passing run shows it too.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var(POSTGRES_URL_ENV)
        .ok()
        .filter(|url| !url.is_empty());
    if url.is_none() {
        static SKIPPED: Once = Once::new();
        SKIPPED.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "{POSTGRES_URL_ENV} is not set: the PostgreSQL runs of this test binary are skipped"
            );
        });
    }
    url
}

/// A database of its own for one test, `pbt_<unix time>_<random>`, on the test server.
#[derive(Debug)]
pub struct ScratchDatabase {
    /// The database's URL: the server's URL with this database's name.
    pub url: String,
    admin_url: String,
    name: String,
}

impl ScratchDatabase {
    /// Creates a database on the server of `server_url`, over [`POSTGRES_ADMIN_URL_ENV`] when
    /// set. Before the first one of a process, drops the scratch databases earlier runs left
    /// behind (created more than two hours ago, or named without a time).
    pub async fn create(server_url: &str) -> Self {
        let admin_url = std::env::var(POSTGRES_ADMIN_URL_ENV)
            .ok()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| server_url.to_owned());
        drop_leftovers(&admin_url).await;
        // The creation time in the name lets a later run tell abandoned databases from those
        // of a run still going.
        let name = format!("pbt_{}_{}", unix_now(), uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin_url)
            .await
            .expect("PostgreSQL reachable");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let base = server_url
            .rsplit_once('/')
            .map_or(server_url, |(base, _)| base);
        Self {
            url: format!("{base}/{name}"),
            admin_url,
            name,
        }
    }

    /// Drops the database, closing whatever connections it still has. A failure is told on
    /// standard error (the database is then left for a later run's clean-up).
    pub async fn drop_database(self) {
        let dropped = match PgConnection::connect(&self.admin_url).await {
            Ok(mut conn) => sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut conn)
            .await
            .map(drop),
            Err(err) => Err(err),
        };
        if let Err(err) = dropped {
            let _ = writeln!(
                std::io::stderr(),
                "scratch database {} not dropped: {err}",
                self.name
            );
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Drops, once per process, the scratch databases that earlier runs left behind.
async fn drop_leftovers(admin_url: &str) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        let mut conn = PgConnection::connect(admin_url)
            .await
            .expect("PostgreSQL reachable");
        let names: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'pbt\\_%'")
                .fetch_all(&mut conn)
                .await
                .expect("list test databases");
        let cutoff = unix_now().saturating_sub(LEFTOVER_AFTER_SECONDS);
        let abandoned = names.into_iter().filter(|name| {
            name.split('_')
                .nth(1)
                .and_then(|t| t.parse::<u64>().ok())
                .is_none_or(|created| created < cutoff)
        });
        for name in abandoned {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await;
        }
    })
    .await;
}
