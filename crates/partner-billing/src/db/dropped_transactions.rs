//! A transaction dropped at any moment, a write's or a list page's, leaves no pooled
//! connection inside it: sqlx 0.9.0 counts a transaction only once its `BEGIN` is answered,
//! so a future dropped while that `BEGIN` was on the wire handed its connection back to the
//! pool inside the transaction, where the next user's statements ran (and a write's stayed
//! uncommitted, or failed in a read-only one). Dropped futures are what a client that goes
//! away, or the stop's drain running out, leaves behind. PostgreSQL, whose state tells.

use std::pin::pin;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use super::Db;

/// Connections of the database that sit inside a transaction, waiting.
async fn idle_in_transaction(admin: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(admin)
    .await
    .expect("activity")
}

/// Polls `future` for `micros` microseconds (or until it is done), then drops it.
async fn drop_after<F: std::future::Future>(future: F, micros: u64) {
    let started = Instant::now();
    let mut future = pin!(future);
    while started.elapsed() < Duration::from_micros(micros) {
        if futures_util::poll!(future.as_mut()).is_ready() {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// A transaction still running on its own may hold its connection for a moment; none is left
/// in one.
async fn no_connection_left_in_a_transaction(admin: &mut PgConnection, what: &str, micros: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while idle_in_transaction(admin).await > 0 {
        assert!(
            Instant::now() < deadline,
            "{what} dropped after {micros} µs left its connection inside its transaction"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_dropped_midway_leaves_no_connection_inside_it() {
    let Some(url) = partner_billing_testkit::postgres_url() else {
        return;
    };
    let database = partner_billing_testkit::ScratchDatabase::create(&url).await;
    let db = Db::connect(&database.url).await.expect("database");
    let mut admin = PgConnection::connect(&database.url).await.expect("admin");
    // Dropped after 0, 1, 2, ... microseconds of polling: before its `BEGIN` is sent, while it
    // is on the wire, during the page, during the `COMMIT`, or never (done).
    for micros in 0..400_u64 {
        let page = db.page(sqlx::query_as::<_, (i64,)>("SELECT 1::bigint"));
        drop_after(page, micros).await;
        no_connection_left_in_a_transaction(&mut admin, "a list page", micros).await;
        drop_after(db.begin_write(), micros).await;
        no_connection_left_in_a_transaction(&mut admin, "a write", micros).await;
    }
    admin.close().await.expect("close");
    db.close().await;
    database.drop_database().await;
}
