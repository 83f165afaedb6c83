//! A fresh database per run, and its seed: one plan, registered logins, reseller accounts each
//! with one API key and ample credit, all made through the core library (timed apart from the
//! measurements).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, anyhow};
use sqlx::Connection;

use partner_billing::accounts;
use partner_billing::clock::Clock;
use partner_billing::domain::{ClientId, Login, Password, PlanSlug};
use partner_billing::keys;
use partner_billing::plans::{self, NewPlan};
use partner_billing::quota;
use partner_billing::store::Store;
use partner_billing_tests::TempDir;

/// The plan every scenario charges.
pub const PLAN: &str = "bench";

/// Registered end-user logins that licenses are issued to.
const LOGINS: usize = 1000;

/// Credit per account: enough for any run (promo batches take 1000 units each).
const CREDIT: i64 = 1_000_000_000;

/// How many seeding tasks run at once.
const SEED_TASKS: usize = 16;

/// A database made for this run, with a temporary directory for the master key and the
/// server's logs.
pub struct FreshDb {
    pub url: String,
    label: &'static str,
    dir: TempDir,
    /// PostgreSQL: the URL we connected to, and the database made beside it.
    postgres: Option<(String, String)>,
}

impl FreshDb {
    /// `sqlite`: a new file in a temporary directory. A PostgreSQL URL: `CREATE DATABASE
    /// pbbench_<random>` on that server.
    pub async fn create(spec: &str) -> anyhow::Result<Self> {
        let dir = TempDir::new();
        // Mode 0600: the server refuses a key file others can read.
        partner_billing_tests::write_private(
            &dir.path.join("master.key"),
            hex_key(&rand::random::<[u8; 32]>()).as_bytes(),
        );
        if spec == "sqlite" {
            let url = format!("sqlite://{}", dir.path.join("billing.db").display());
            return Ok(Self {
                url,
                label: "sqlite",
                dir,
                postgres: None,
            });
        }
        if !(spec.starts_with("postgres://") || spec.starts_with("postgresql://")) {
            anyhow::bail!("--database takes `sqlite` or a postgres:// URL, not {spec:?}");
        }
        let name = format!(
            "pbbench_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let mut conn = sqlx::PgConnection::connect(spec)
            .await
            .context("PostgreSQL is not reachable at the given URL")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .context("cannot create the benchmark database")?;
        let _ = conn.close().await;
        let (base, query) = match spec.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (spec, String::new()),
        };
        let server = base
            .rsplit_once('/')
            .filter(|(server, _)| server.len() > "postgres:/".len())
            .map_or(base, |(server, _)| server);
        Ok(Self {
            url: format!("{server}/{name}{query}"),
            label: "postgres",
            dir,
            postgres: Some((spec.to_owned(), name)),
        })
    }

    pub fn label(&self) -> &'static str {
        self.label
    }

    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    pub fn key_file(&self) -> PathBuf {
        self.dir.path.join("master.key")
    }

    /// Drops the PostgreSQL database (the temporary directory goes with `self`).
    pub async fn remove(self) {
        if let Some((admin_url, name)) = &self.postgres {
            let dropped = async {
                let mut conn = sqlx::PgConnection::connect(admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            }
            .await;
            if let Err(err) = dropped {
                eprintln!("loadbench: could not drop database {name}: {err}");
            }
        }
    }
}

fn hex_key(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One seeded reseller.
#[derive(Debug, Clone)]
pub struct Account {
    pub client_id: String,
    pub secret: String,
}

/// What the scenarios use.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub accounts: Arc<Vec<Account>>,
    pub logins: Arc<Vec<String>>,
    /// The panel password of the first account (the hot one), for `--lists`.
    pub first_password: String,
    pub seconds: f64,
}

/// Seeds `count` accounts. Only the first is created with `accounts::create_reseller` (an
/// argon2id hash, ~tens of ms); the others are inserted with that function's statement and the
/// first account's hash, since no scenario logs in to the panel. Keys and credit go through
/// `keys::create_api_key` and `quota::credit`, as an operator would make them.
pub async fn seed(url: &str, count: usize) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let store = Store::connect(url, Clock::system())
        .await
        .context("cannot open the benchmark database")?;
    let slug = PlanSlug::parse("slug", PLAN)?;
    plans::create_plan(
        &store,
        NewPlan::new(slug.clone(), "Load benchmark", Some(30), None, None)?,
        &partner_billing::audit::Origin::cli(),
    )
    .await?;
    let logins: Vec<String> = (0..LOGINS).map(|i| format!("bench-user-{i:04}")).collect();
    let logins = Arc::new(logins);
    let first_password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let first = accounts::create_reseller(
        &store,
        "Loadbench 0",
        Password::parse("password", &first_password)?,
        &partner_billing::audit::Origin::cli(),
    )
    .await?;
    let password_hash: String =
        sqlx::query_scalar("SELECT password_hash FROM accounts WHERE client_id = $1")
            .bind(first.as_str())
            .fetch_one(store.pool())
            .await?;

    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..SEED_TASKS {
        let store = store.clone();
        let logins = Arc::clone(&logins);
        let password_hash = password_hash.clone();
        let first = first.clone();
        let slug = slug.clone();
        tasks.spawn(async move {
            for i in (task..LOGINS).step_by(SEED_TASKS) {
                plans::add_user(&store, &Login::parse("login", &logins[i])?, &partner_billing::audit::Origin::cli()).await?;
            }
            let mut made = Vec::new();
            for i in (task..count).step_by(SEED_TASKS) {
                let client_id = if i == 0 {
                    first.clone()
                } else {
                    let client_id = ClientId::generate();
                    // accounts.rs create_reseller's statement.
                    sqlx::query(
                        "INSERT INTO accounts (client_id, name, password_hash, standing, created_utc) \
                         VALUES ($1, $2, $3, 'good', $4)",
                    )
                    .bind(client_id.as_str())
                    .bind(format!("Loadbench {i}"))
                    .bind(password_hash.as_str())
                    .bind(store.now_utc())
                    .execute(store.pool())
                    .await?;
                    client_id
                };
                let account_id: i64 =
                    sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
                        .bind(client_id.as_str())
                        .fetch_one(store.pool())
                        .await?;
                let origin = partner_billing::audit::Origin::cli();
                let key =
                    keys::create_api_key(&store, account_id, Some("loadbench"), &origin).await?;
                let credit = quota::Correction {
                    client_id: &client_id,
                    plan: &slug,
                    units: CREDIT,
                    reason: "loadbench seed",
                    reference: None,
                };
                quota::credit(&store, &credit, &origin).await?;
                made.push((
                    i,
                    Account {
                        client_id: client_id.to_string(),
                        secret: key.secret,
                    },
                ));
            }
            Ok::<_, anyhow::Error>(made)
        });
    }
    let mut made = Vec::with_capacity(count);
    while let Some(joined) = tasks.join_next().await {
        made.extend(joined.map_err(|e| anyhow!("seeding task failed: {e}"))??);
    }
    made.sort_by_key(|(i, _)| *i);
    store.close().await;
    Ok(Seeded {
        accounts: Arc::new(made.into_iter().map(|(_, a)| a).collect()),
        logins,
        first_password,
        seconds: started.elapsed().as_secs_f64(),
    })
}
