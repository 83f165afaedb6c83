use partner_billing::Error;
use partner_billing::domain::Secret;
use partner_billing::keys::{
    authenticate_api_key, create_api_key, list_api_keys, revoke_api_key, roll_api_key,
};
use partner_billing::store::Store;
use partner_billing::wire::CreatedApiKey;

use crate::fixture::reseller;

async fn authenticate(store: &Store, key: &CreatedApiKey) -> Result<i64, Error> {
    authenticate_api_key(
        store,
        &key.client_id,
        &Secret::from_presented(key.secret.clone()),
    )
    .await
    .map(|account| account.account_id)
}

async fn a_created_key_authenticates_until_revoked(store: Store) {
    let r = reseller(&store, 0).await;
    let id = r.account.account_id;
    let key = create_api_key(
        &store,
        id,
        Some("second"),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(authenticate(&store, &key).await.unwrap(), id);
    let wrong = CreatedApiKey {
        secret: format!("{}x", key.secret),
        ..key.clone()
    };
    assert!(matches!(
        authenticate(&store, &wrong).await,
        Err(Error::Unauthorized)
    ));
    revoke_api_key(
        &store,
        id,
        &key.api_key_id,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    revoke_api_key(
        &store,
        id,
        &key.api_key_id,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .expect("revoking again succeeds");
    assert!(matches!(
        authenticate(&store, &key).await,
        Err(Error::Unauthorized)
    ));
    let listed = list_api_keys(&store, id).await.unwrap();
    let shown = listed
        .api_keys
        .iter()
        .find(|k| k.api_key_id == key.api_key_id)
        .unwrap();
    assert_eq!(shown.status, "revoked");
    assert_eq!(shown.name.as_deref(), Some("second"));
}

async fn a_rolled_key_stops_at_its_expiry(store: Store) {
    let r = reseller(&store, 0).await;
    let id = r.account.account_id;
    let old = create_api_key(
        &store,
        id,
        Some("rolled"),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let new = roll_api_key(
        &store,
        id,
        &old.api_key_id,
        Some(0),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(new.name.as_deref(), Some("rolled"));
    assert_eq!(authenticate(&store, &new).await.unwrap(), id);
    assert!(matches!(
        authenticate(&store, &old).await,
        Err(Error::Unauthorized)
    ));
    let listed = list_api_keys(&store, id).await.unwrap();
    let status = |key: &CreatedApiKey| {
        listed
            .api_keys
            .iter()
            .find(|k| k.api_key_id == key.api_key_id)
            .map(|k| k.status.clone())
    };
    assert_eq!(status(&old).as_deref(), Some("expired"));
    assert_eq!(status(&new).as_deref(), Some("active"));
    let err = roll_api_key(
        &store,
        id,
        &old.api_key_id,
        None,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::ApiKeyNotFound), "{err:?}");
}

async fn an_account_holds_at_most_five_active_keys(store: Store) {
    let r = reseller(&store, 0).await;
    let id = r.account.account_id;
    for _ in 0..4 {
        create_api_key(&store, id, None, &partner_billing::audit::Origin::cli())
            .await
            .unwrap();
    }
    let err = create_api_key(&store, id, None, &partner_billing::audit::Origin::cli())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ApiKeyLimitReached), "{err:?}");
    let other = reseller(&store, 0).await;
    let foreign = revoke_api_key(
        &store,
        other.account.account_id,
        r.account.api_key_id.as_str(),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap_err();
    assert!(matches!(foreign, Error::ApiKeyNotFound), "{foreign:?}");
}

/// A new reseller holding `units`, its account id and a key of its own to present.
async fn reseller_with_key(store: &Store, units: i64) -> (i64, CreatedApiKey) {
    let reseller = reseller(store, units).await;
    (reseller.account.account_id, reseller.key)
}

/// Key checks that arrive together are read in one statement, sent by one of the callers: a
/// caller that goes away meanwhile (its client disconnected, its task aborted) takes no one
/// else's answer with it.
async fn callers_that_go_away_leave_the_others_answered(store: Store) {
    let mut keys = Vec::new();
    for i in 0..4 {
        keys.push(reseller_with_key(&store, i).await);
    }
    for round in 0..50 {
        let calls: Vec<_> = (0..40)
            .map(|n| {
                let (account, key) = keys[n % keys.len()].clone();
                let store = store.clone();
                tokio::spawn(async move { (account, authenticate(&store, &key).await) })
            })
            .collect();
        // A few turns of the scheduler, more each round, then every third caller goes: before
        // its read, midway through it (while sending the shared statement for the others), or
        // after it.
        for _ in 0..round {
            tokio::task::yield_now().await;
        }
        let mut kept = Vec::new();
        for (n, call) in calls.into_iter().enumerate() {
            if n % 3 == 0 {
                call.abort();
            } else {
                kept.push(call);
            }
        }
        for call in kept {
            let (account, answer) = call.await.unwrap();
            assert_eq!(answer.unwrap(), account);
        }
    }
}

on_both_databases!(
    callers_that_go_away_leave_the_others_answered,
    a_created_key_authenticates_until_revoked,
    a_rolled_key_stops_at_its_expiry,
    an_account_holds_at_most_five_active_keys,
);

/// A key check that finds every kept connection busy waits no longer than any read waits for
/// a connection (the pool's acquire timeout, 5 s on PostgreSQL), then answers "unavailable"
/// (the server's 503), and the next check, once a connection is free, passes as before.
/// PostgreSQL only: the same code waits SQLite's 30 s busy timeout there, too long for a test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_check_with_no_connection_free_gives_up_at_the_acquire_timeout() {
    let Some(db) = crate::kit::TestDb::postgres().await else {
        return;
    };
    let store = db.store.clone();
    let (account, key) = reseller_with_key(&store, 1).await;
    // Every kept connection, taken until none is left (a take that waits is none).
    let mut held = Vec::new();
    while let Ok(reader) =
        tokio::time::timeout(std::time::Duration::from_millis(200), store.reader()).await
    {
        held.push(reader.unwrap());
    }
    assert!(!held.is_empty());
    let started = std::time::Instant::now();
    let refused = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        authenticate(&store, &key),
    )
    .await
    .expect("the key check gave up within 20 s");
    let waited = started.elapsed();
    assert!(matches!(refused, Err(Error::Unavailable(_))), "{refused:?}");
    assert!(
        (std::time::Duration::from_secs(4)..std::time::Duration::from_secs(10)).contains(&waited),
        "waited {waited:?}"
    );
    drop(held);
    assert_eq!(authenticate(&store, &key).await.unwrap(), account);
    db.finish().await;
}

/// A kept connection taken and given back unused (as when a key check finds its key already
/// sent with another caller's statement) stays kept: the next read runs on that same
/// connection instead of opening a new one. PostgreSQL only: it tells connections apart by
/// their backend's process id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_given_back_unused_is_kept() {
    let Some(db) = crate::kit::TestDb::postgres().await else {
        return;
    };
    let store = db.store.clone();
    async fn backend_pid(store: &Store) -> i32 {
        let mut reader = store.reader().await.unwrap();
        reader
            .run(|c| sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(c))
            .await
            .unwrap()
    }
    let first = backend_pid(&store).await;
    drop(store.reader().await.unwrap());
    assert_eq!(backend_pid(&store).await, first);
    db.finish().await;
}
