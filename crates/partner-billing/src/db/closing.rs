//! Closing the store writes what is still queued: a key's last use recorded off its request's
//! way (`Db::write_one_soon`) while another write held SQLite's one turn is not lost to a stop
//! that comes before its turn.

use std::pin::pin;
use std::time::Duration;

use super::Db;

#[tokio::test]
async fn a_bookkeeping_write_queued_when_the_store_closes_is_written() {
    let dir = partner_billing_testkit::TempDir::new();
    let url = format!("sqlite://{}", dir.path.join("t.db").display());
    let db = Db::connect(&url).await.expect("database");
    sqlx::query("CREATE TABLE noted (k TEXT NOT NULL)")
        .execute(db.pool())
        .await
        .expect("table");
    // Another write holds the turn: the bookkeeping write queues behind it.
    let other = db.begin_write().await.expect("a write");
    db.write_one_soon(
        "noted:k".to_owned(),
        sqlx::query("INSERT INTO noted (k) VALUES ('k')"),
    )
    .await
    .expect("queued");
    // The stop begins while it waits; then the other write ends and gives the turn back.
    let mut closing = pin!(db.close());
    assert!(futures_util::poll!(closing.as_mut()).is_pending());
    other.commit().await.expect("commit");
    // Done as soon as the write is, not when the close's bound runs out: the last queued
    // write's end wakes it.
    tokio::time::timeout(Duration::from_secs(2), closing)
        .await
        .expect("closed once the queued write was written");

    let reopened = Db::connect(&url).await.expect("database again");
    let noted: i64 = sqlx::query_scalar("SELECT count(*) FROM noted")
        .fetch_one(reopened.pool())
        .await
        .expect("count");
    assert_eq!(noted, 1, "the queued write was lost at close");
    reopened.close().await;
}
