//! Test harness: boots the real server on port 0 over a fresh database, SQLite or PostgreSQL.
#![forbid(unsafe_code)]

pub mod logs;
pub mod process;
pub mod product;
pub mod receiver;
pub mod seeded;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use partner_billing::accounts;
use partner_billing::clock::Clock;
use partner_billing::crypto::MasterKey;
use partner_billing::domain::{ClientId, Login, Password, PlanSlug};
use partner_billing::plans::{self, NewPlan};
use partner_billing::quota;
use partner_billing::store::Store;
use partner_billing_testkit::ScratchDatabase;
pub use partner_billing_testkit::TempDir;

/// Which database a scenario runs on.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite,
    Postgres(String),
}

impl Db {
    /// PostgreSQL when `PARTNER_BILLING_TEST_POSTGRES_URL` is set (else the test kit says once
    /// that the PostgreSQL scenarios are skipped).
    pub fn postgres() -> Option<Self> {
        partner_billing_testkit::postgres_url().map(Self::Postgres)
    }
}

/// A fresh, empty database for one test: its URL, and where it lives (see [`DatabaseHome`]).
pub async fn fresh_database(db: &Db) -> (String, DatabaseHome) {
    let dir = TempDir::new();
    match db {
        Db::Sqlite => {
            let url = format!("sqlite://{}", dir.path.join("billing.db").display());
            (url, DatabaseHome { dir, scratch: None })
        }
        Db::Postgres(url) => {
            let scratch = ScratchDatabase::create(url).await;
            let url = scratch.url.clone();
            let home = DatabaseHome {
                dir,
                scratch: Some(scratch),
            };
            (url, home)
        }
    }
}

/// Where a test's database lives: a directory of its own (the SQLite file; on PostgreSQL an
/// empty one, for a server process to work in) and the scratch PostgreSQL database. Both go
/// when the home is dropped (drop it after whatever still uses the database), except while a
/// failing test unwinds: that database is kept to look at, and a later run's clean-up drops it
/// once it is two hours old.
pub struct DatabaseHome {
    pub dir: TempDir,
    scratch: Option<ScratchDatabase>,
}

impl Drop for DatabaseHome {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(scratch) = self.scratch.take() {
            // On a thread and a runtime of its own: a drop cannot wait on the test's runtime.
            let dropped = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map(|runtime| runtime.block_on(scratch.drop_database()))
            });
            let _ = dropped.join();
        }
    }
}

/// A running server and direct access to its store (for operator set-up and for checks).
pub struct TestApp {
    pub base_url: String,
    /// The server's own metrics listener (`GET /metrics`).
    pub metrics_url: String,
    pub database_url: String,
    pub store: Store,
    pub http: reqwest::Client,
    master_key: [u8; 32],
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    /// The database, removed with the app (after [`stop`](Self::stop)); `None` on a replica.
    home: Option<DatabaseHome>,
}

/// What [`TestApp::close`] keeps of an app for [`TestApp::reopen`].
pub struct ClosedApp {
    pub database_url: String,
    clock: Clock,
    master_key: [u8; 32],
    group_commit: bool,
    home: Option<DatabaseHome>,
}

/// A reseller created by the operator, with one API key.
#[derive(Debug, Clone)]
pub struct Reseller {
    pub client_id: String,
    pub password: String,
    pub api_key_id: String,
    pub secret: String,
}

impl TestApp {
    /// Boots the server on 127.0.0.1:0 over a fresh database.
    pub async fn spawn(db: &Db) -> Self {
        Self::spawn_fresh(db, true).await
    }

    /// As [`spawn`](Self::spawn), with one transaction per license request
    /// (`--group-commit false`).
    pub async fn spawn_without_group_commit(db: &Db) -> Self {
        Self::spawn_fresh(db, false).await
    }

    async fn spawn_fresh(db: &Db, group_commit: bool) -> Self {
        logs::install();
        let (database_url, home) = fresh_database(db).await;
        Self::boot(
            database_url,
            Some(home),
            Clock::system(),
            rand::random(),
            group_commit,
        )
        .await
    }

    /// A second server over the same database, clock and master key: another replica, with
    /// its own connection pool and process-local state.
    pub async fn replica(&self) -> Self {
        Self::boot(
            self.database_url.clone(),
            None,
            self.store.clock().clone(),
            self.master_key,
            self.store.group_commit(),
        )
        .await
    }

    async fn boot(
        database_url: String,
        home: Option<DatabaseHome>,
        clock: Clock,
        master_key: [u8; 32],
        group_commit: bool,
    ) -> Self {
        let store = Store::connect(&database_url, clock)
            .await
            .expect("store connects")
            .with_master_key(MasterKey::from_file_contents(&master_key).expect("32 bytes"))
            .with_group_commit(group_commit)
            .with_webhook_settings(receiver::test_webhook_settings());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base_url = format!("http://{}", listener.local_addr().expect("address"));
        let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let metrics_url = format!(
            "http://{}/metrics",
            metrics_listener.local_addr().expect("address")
        );
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(partner_billing_server::serve_with(
            listener,
            store.clone(),
            async {
                let _ = rx.await;
            },
            partner_billing_server::ServeOptions {
                metrics_listener: Some(metrics_listener),
                ..Default::default()
            },
        ));
        Self {
            base_url,
            metrics_url,
            database_url,
            store,
            http: reqwest::Client::new(),
            master_key,
            shutdown: Some(tx),
            server: Some(server),
            home,
        }
    }

    /// `n` server processes of the real binary over this app's database and master key:
    /// replicas that share nothing but the database.
    pub fn process_replicas(&self, n: usize) -> ProcessReplicas {
        let dir = TempDir::new();
        let key_file = dir.path.join("master.key");
        write_private(&key_file, hex::encode(self.master_key).as_bytes());
        let key_file = key_file.display().to_string();
        let servers = (0..n)
            .map(|_| {
                process::ServerProcess::start(
                    &self.database_url,
                    &dir.path,
                    &[("PARTNER_BILLING_MASTER_KEY_FILE", &key_file)],
                )
            })
            .collect();
        ProcessReplicas { servers, _dir: dir }
    }

    /// Stops this server and closes its connections, keeping the database; [`TestApp::reopen`]
    /// boots a server over it again. What stays between the two (a PostgreSQL database, or
    /// the SQLite file's directory) is returned, and goes when it is dropped: keep it while
    /// the database is still used.
    pub async fn close(mut self) -> ClosedApp {
        let closed = ClosedApp {
            database_url: self.database_url.clone(),
            clock: self.store.clock().clone(),
            master_key: self.master_key,
            group_commit: self.store.group_commit(),
            home: self.home.take(),
        };
        self.stop().await;
        closed
    }

    /// A server over a database a closed app left: the same clock, master key and settings.
    pub async fn reopen(closed: ClosedApp) -> Self {
        Self::boot(
            closed.database_url,
            closed.home,
            closed.clock,
            closed.master_key,
            closed.group_commit,
        )
        .await
    }

    /// The master key's bytes, for a server process over this app's database.
    pub fn master_key(&self) -> [u8; 32] {
        self.master_key
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// Creates a plan with no subscription length.
    pub async fn plan(&self, slug: &str) {
        self.plan_with_days(slug, None).await;
    }

    pub async fn plan_with_days(&self, slug: &str, days: Option<i64>) {
        let slug = PlanSlug::parse("slug", slug).expect("slug");
        let plan = NewPlan::new(slug, "Test plan", days, None, None).expect("plan");
        plans::create_plan(&self.store, plan, &partner_billing::audit::Origin::cli())
            .await
            .expect("create plan");
    }

    /// Registers an end-user login.
    pub async fn user(&self, login: &str) {
        plans::add_user(
            &self.store,
            &Login::parse("login", login).expect("login"),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .expect("add user");
    }

    /// Creates a reseller, logs in to the panel over HTTP and creates one API key.
    pub async fn reseller(&self) -> Reseller {
        let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
        let client_id = accounts::create_reseller(
            &self.store,
            "Acme Resale",
            Password::parse("password", &password).unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .expect("create reseller");
        let token = self.session(client_id.as_str(), &password).await;
        let key: serde_json::Value = self
            .http
            .post(self.url("/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"name": "test"}))
            .send()
            .await
            .expect("create key")
            .json()
            .await
            .expect("key body");
        Reseller {
            client_id: client_id.to_string(),
            password,
            api_key_id: key["apiKeyId"].as_str().expect("apiKeyId").to_owned(),
            secret: key["secret"].as_str().expect("secret").to_owned(),
        }
    }

    /// Logs in to the panel; returns the session token.
    pub async fn session(&self, client_id: &str, password: &str) -> String {
        panel_session(&self.http, &self.base_url, client_id, password).await
    }

    /// Credits quota as the operator.
    pub async fn credit(&self, reseller: &Reseller, plan: &str, units: i64) {
        quota::credit(
            &self.store,
            &partner_billing::quota::Correction {
                client_id: &ClientId::parse("clientId", &reseller.client_id).unwrap(),
                plan: &PlanSlug::parse("plan", plan).unwrap(),
                units,
                reason: "test credit",
                reference: None,
            },
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .expect("credit");
    }

    /// The balance of one plan as the operator sees it (None when never credited).
    pub async fn balance(&self, reseller: &Reseller, plan: &str) -> Option<i64> {
        let balances = quota::balances_for(
            &self.store,
            &ClientId::parse("clientId", &reseller.client_id).unwrap(),
        )
        .await
        .expect("balances");
        balances
            .balances
            .into_iter()
            .find(|b| b.product_slug == plan)
            .map(|b| b.remaining_balance)
    }

    /// A request builder carrying the reseller's API key in the dedicated headers.
    pub fn partner(
        &self,
        method: reqwest::Method,
        path: &str,
        reseller: &Reseller,
    ) -> reqwest::RequestBuilder {
        partner_request(&self.http, &self.base_url, method, path, reseller)
    }

    /// The whole ledger of the reseller's account, oldest first, as the operator reads it.
    pub async fn ledger(&self, client_id: &str) -> Vec<partner_billing::quota::LedgerEntry> {
        use futures_util::TryStreamExt;
        let client_id = partner_billing::domain::ClientId::parse("clientId", client_id).unwrap();
        partner_billing::quota::ledger(&self.store, &client_id, None)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    }

    /// Waits until the partner API's ledger feed hands out every entry committed so far. On
    /// PostgreSQL the feed holds an entry back while any older transaction of the server runs
    /// (in any database: another test's, say), so that it never skips one committed late; a test
    /// that counts the feed's entries after its writes waits for this first.
    pub async fn ledger_feed_settled(&self) {
        receiver::eventually("the ledger feed to settle", || async {
            partner_billing::reads::ledger_feed_settled(&self.store)
                .await
                .expect("the feed's horizon")
                .then_some(())
        })
        .await;
    }

    /// Checks every balance against its ledger.
    pub async fn assert_audit_clean(&self) {
        let report = quota::audit_verify(&self.store).await.expect("audit");
        assert!(
            report.discrepancies.is_empty(),
            "audit found {:?}",
            report.discrepancies
        );
    }

    /// Stops the server, draining requests, and removes its database (stop the replicas
    /// first: their connections are closed with it).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.store.close().await;
        // `home` goes with `self`, after the server and its pool.
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Server processes started by [`TestApp::process_replicas`]; killed on drop.
pub struct ProcessReplicas {
    pub servers: Vec<process::ServerProcess>,
    _dir: TempDir,
}

impl ProcessReplicas {
    /// The base URL of each process.
    pub fn base_urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.base_url.clone()).collect()
    }
}

/// Checks an id as the service issues `licenseId` and `batchId`: a hyphenated lower-case UUID,
/// time-ordered (version 7), so that an id made later sorts after it.
pub fn assert_time_ordered_id(id: &str) {
    let parsed = uuid::Uuid::parse_str(id).unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(
        id,
        parsed.hyphenated().to_string(),
        "hyphenated, lower case"
    );
    assert_eq!(
        parsed.get_version_num(),
        7,
        "{id}: time-ordered (version 7)"
    );
}

/// Writes a file readable by its owner only (mode 0600), as a master key file must be.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write private file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    }
}

/// Logs in to the panel of the server at `base_url`; returns the session token.
pub async fn panel_session(
    http: &reqwest::Client,
    base_url: &str,
    client_id: &str,
    password: &str,
) -> String {
    let response = http
        .post(format!("{base_url}/v1/billing/resellers/sessions"))
        .json(&serde_json::json!({"clientId": client_id, "password": password}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), 201, "panel login");
    let body: serde_json::Value = response.json().await.expect("session body");
    body["sessionToken"].as_str().expect("token").to_owned()
}

/// A request to `base_url` carrying the reseller's API key in the dedicated headers.
pub fn partner_request(
    http: &reqwest::Client,
    base_url: &str,
    method: reqwest::Method,
    path: &str,
    reseller: &Reseller,
) -> reqwest::RequestBuilder {
    http.request(method, format!("{base_url}{path}"))
        .header("X-Client-Id", &reseller.client_id)
        .header("X-Client-Secret", &reseller.secret)
}

/// Header names and values that must be identical across rejections (`Date` varies, and so
/// does the request's own `X-Request-Id`: its value, never its presence).
pub fn header_shape(response: &reqwest::Response) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str() != "date")
        .map(|(n, v)| match n.as_str() {
            "x-request-id" => (n.as_str().to_owned(), "(per request)".to_owned()),
            _ => (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()),
        })
        .collect();
    headers.sort();
    headers
}

/// Asserts the service's one 401: empty body. Returns its header shape for comparison.
pub async fn expect_empty_401(what: &str, response: reqwest::Response) -> Vec<(String, String)> {
    assert_eq!(response.status(), 401, "{what}");
    let headers = header_shape(&response);
    let body = response.bytes().await.expect("401 body");
    assert!(
        body.is_empty(),
        "{what}: 401 body must be empty, got {body:?}"
    );
    headers
}

/// Runs a scenario on SQLite, and on PostgreSQL when its URL is set.
#[macro_export]
macro_rules! both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::Db::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    if let Some(db) = $crate::Db::postgres() {
                        super::$name(db).await
                    }
                }
            )*
        }
    };
}
