//! The core's test kit: one async test body, run on SQLite and, when
//! `PARTNER_BILLING_TEST_POSTGRES_URL` is set, on PostgreSQL, each time on a fresh database
//! with the migrations applied and a master key set. The directories and scratch databases
//! come from `partner-billing-testkit`, which the other suites share.
//!
//! ```ignore
//! async fn credit_shows_in_the_balance(store: Store) { … }
//! on_both_databases!(credit_shows_in_the_balance);
//! ```

use std::path::PathBuf;

use partner_billing::clock::Clock;
use partner_billing::crypto::MasterKey;
use partner_billing::store::Store;
use partner_billing_testkit::{ScratchDatabase, TempDir, postgres_url};

/// Declares one `#[tokio::test]` per body and database: `sqlite::name` and `postgres::name`
/// (which passes, doing nothing but saying so once per test binary, when no PostgreSQL URL is
/// set). Each body is an `async fn(Store)` in the module that invokes the macro.
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
    Postgres(ScratchDatabase),
}

impl TestDb {
    /// A store on a new SQLite file in a temporary directory.
    pub async fn sqlite() -> Self {
        let dir = TempDir::new().keep();
        let url = format!("sqlite://{}", dir.join("billing.db").display());
        Self {
            store: connect(&url).await,
            place: Place::Sqlite(dir),
        }
    }

    /// A store on a new PostgreSQL database, or `None` when no URL is set (the test kit then
    /// says once that the PostgreSQL runs are skipped).
    pub async fn postgres() -> Option<Self> {
        let database = ScratchDatabase::create(&postgres_url()?).await;
        Some(Self {
            store: connect(&database.url).await,
            place: Place::Postgres(database),
        })
    }

    /// Closes the store and removes its database.
    pub async fn finish(self) {
        self.store.close().await;
        match self.place {
            Place::Sqlite(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Place::Postgres(database) => database.drop_database().await,
        }
    }
}

async fn connect(url: &str) -> Store {
    Store::connect(url, Clock::system())
        .await
        .expect("connect and migrate")
        .with_master_key(MasterKey::generate())
}
