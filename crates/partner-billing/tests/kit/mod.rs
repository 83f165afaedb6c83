//! The core's test kit: one async test body, run on SQLite and, when
//! `PARTNER_BILLING_TEST_POSTGRES_URL` is set, on PostgreSQL, each time on a fresh database
//! with the migrations applied and a master key set.
//!
//! ```ignore
//! async fn credit_shows_in_the_balance(store: Store) { … }
//! on_both_databases!(credit_shows_in_the_balance);
//! ```

use std::path::PathBuf;

use partner_billing::clock::Clock;
use partner_billing::crypto::MasterKey;
use partner_billing::store::Store;

/// Declares one `#[tokio::test]` per body and database: `sqlite::name` and `postgres::name`
/// (which passes, doing nothing, when no PostgreSQL URL is set). Each body is an
/// `async fn(Store)` in the module that invokes the macro.
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::kit::TestDb::sqlite().await;
                    super::$name(db.store.clone()).await;
                    db.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = $crate::kit::TestDb::postgres().await {
                        super::$name(db.store.clone()).await;
                        db.finish().await;
                    }
                }
            )*
        }
    };
}

/// A store on a database of its own, removed by [`finish`](Self::finish) (a failed test
/// leaves its database for a look; the next PostgreSQL run drops those older than two hours).
pub struct TestDb {
    pub store: Store,
    place: Place,
}

enum Place {
    Sqlite(PathBuf),
    Postgres { admin_url: String, name: String },
}

impl TestDb {
    /// A store on a new SQLite file in a temporary directory.
    pub async fn sqlite() -> Self {
        let dir = std::env::temp_dir().join(format!("pbc-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let url = format!("sqlite://{}", dir.join("billing.db").display());
        Self {
            store: connect(&url).await,
            place: Place::Sqlite(dir),
        }
    }

    /// A store on a new PostgreSQL database, or `None` when no URL is set.
    pub async fn postgres() -> Option<Self> {
        use sqlx::Connection;
        let url = std::env::var("PARTNER_BILLING_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty());
        let Some(url) = url else {
            eprintln!("PARTNER_BILLING_TEST_POSTGRES_URL is not set: PostgreSQL run skipped");
            return None;
        };
        let admin_url = std::env::var("PARTNER_BILLING_TEST_POSTGRES_ADMIN_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| url.clone());
        // The `pbt_<unix time>_` prefix is the end-to-end suite's: its clean-up of abandoned
        // databases covers these too.
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = format!("pbt_{created}_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .expect("PostgreSQL reachable");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
        Some(Self {
            store: connect(&format!("{base}/{name}")).await,
            place: Place::Postgres { admin_url, name },
        })
    }

    /// Closes the store and removes its database.
    pub async fn finish(self) {
        self.store.close().await;
        match self.place {
            Place::Sqlite(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Place::Postgres { admin_url, name } => {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            }
        }
    }
}

async fn connect(url: &str) -> Store {
    Store::connect(url, Clock::system())
        .await
        .expect("connect and migrate")
        .with_master_key(MasterKey::generate())
}
