//! Every write waits its turn holding no connection, so a slow write never leaves the others
//! without one.
//!
//! On SQLite one transaction writes at a time. A small write sent straight on a pooled connection
//! (an API key's `last_used_utc`, a panel session's touch, an attempt counter) would wait for
//! SQLite's lock while holding that connection; a few of them behind a slow promo batch took every
//! connection, the batch could not get one for its next read, and every request stalled until
//! the busy timeout (30 s), answered 500 ("database is locked") and 503. Here a promo batch is
//! held inside its write while requests with never-used keys (each writes its `last_used_utc`)
//! and a plain read arrive: the read and the keys' first uses are answered while the batch is
//! still held, everything completes once it is released, and every key then shows its use.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use partner_billing::audit::Origin;
use partner_billing::keys;
use partner_billing::store::HoldPoint;
use partner_billing_tests::receiver::eventually;
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};

both_databases!(a_write_held_open_leaves_connections_for_reads);

/// Keys that have never been used: each first use writes its `last_used_utc`.
const FRESH_KEYS: usize = 4;

async fn a_write_held_open_leaves_connections_for_reads(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 100).await;
    let account_id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
        .bind(&r.client_id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    // The reseller's own key, used once: its next uses write nothing.
    let balances = app.partner(Method::GET, "/v1/billing/partner/balances", &r);
    assert_eq!(balances.send().await.unwrap().status(), 200);
    let mut fresh = Vec::new();
    for i in 0..FRESH_KEYS {
        let key = keys::create_api_key(
            &app.store,
            account_id,
            Some(&format!("k{i}")),
            &Origin::cli(),
        )
        .await
        .unwrap();
        fresh.push(Reseller {
            secret: key.secret,
            api_key_id: key.api_key_id,
            ..r.clone()
        });
    }

    // A promo batch holds the write (on SQLite, the process's turn and the database's lock).
    let hold = app.store.hold(HoldPoint::PromoWriteOpen, account_id);
    let batch = app
        .partner(Method::POST, "/v1/billing/partner/promo-batches", &r)
        .json(&json!({"planSlug": "pro", "count": 1, "idempotencyKey": "held-batch"}))
        .send();
    let batch = tokio::spawn(batch);
    hold.wait_for_arrivals(1).await;

    // First uses of the fresh keys: each writes its last use.
    let firsts: Vec<_> = fresh
        .iter()
        .map(|key| {
            tokio::spawn(
                app.partner(Method::GET, "/v1/billing/partner/balances", key)
                    .send(),
            )
        })
        .collect();
    // Had those writes each taken a pooled connection to wait for the lock, the pool would now
    // be all checked out: give them the chance (bounded; with the fix it never happens).
    let pool = app.store.pool();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until
        && !(pool.num_idle() == 0 && pool.size() == pool.options().get_max_connections())
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A plain read is answered while the batch is still held.
    let read = app
        .partner(Method::GET, "/v1/billing/partner/licenses", &r)
        .send();
    let read = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a read is served while a write is held open")
        .unwrap();
    assert_eq!(read.status(), 200);
    // The fresh keys' first uses too: their last use is not waited for.
    for first in firsts {
        let answered = tokio::time::timeout(Duration::from_secs(10), first)
            .await
            .expect("a first use is answered while a write is held open");
        assert_eq!(answered.unwrap().unwrap().status(), 200);
    }
    assert_eq!(hold.arrived(), 1, "the batch is still held");

    hold.release();
    assert_eq!(batch.await.unwrap().unwrap().status(), 200);
    // Nor is it dropped: each fresh key shows its use once the batch's write is done (it
    // waited for the turn off the request's way). Before, a use while the turn was taken was
    // skipped, and a key used once (a rolled key's last call) showed none.
    eventually("every used key shows its use", || async {
        let unused: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM api_keys WHERE account_id = $1 AND last_used_utc IS NULL",
        )
        .bind(account_id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
        (unused == 0).then_some(())
    })
    .await;
    app.stop().await;
}
