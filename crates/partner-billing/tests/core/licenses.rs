use partner_billing::Error;
use partner_billing::domain::Login;
use partner_billing::licenses::{IssueLicense, issue_license};
use partner_billing::plans::register_user;
use partner_billing::quota::balances;
use partner_billing::store::{Backend, Store};

use crate::fixture::{key, plan, reseller, wait_for_groups};

/// A caller that gives up leaves its request queued for the group; its retry with the same key
/// can join that very group. The group then holds one key twice: the retry is answered "in
/// progress" (and replays once the original is in), the original and every other request of
/// the group are served, and the key is charged once.
async fn a_retry_queued_beside_its_original_is_in_progress(store: Store) {
    let r = reseller(&store, 10).await;
    let alice = Login::parse("login", "alice").unwrap();
    register_user(&store, &alice, &partner_billing::audit::Origin::cli())
        .await
        .unwrap();
    let request = |text: &str| IssueLicense {
        plan: plan(),
        login: alice.clone(),
        idempotency_key: key(text),
    };
    // Hold what every group needs before its first statement can finish.
    let mut blocker = store.begin_write().await.unwrap();
    if store.backend() == Backend::Postgres {
        sqlx::query("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *blocker)
            .await
            .unwrap();
    }
    let spawn = |text: &str| {
        let (store, account, request) = (store.clone(), r.account.clone(), request(text));
        tokio::spawn(async move { issue_license(&store, &account, request).await })
    };
    // A first group, held at its first statement; the next requests wait in the queue.
    let plug = spawn("plug-0001");
    wait_for_groups(&store, 0, 1).await;
    let original = spawn("twice-001");
    wait_for_groups(&store, 1, 1).await;
    // The caller goes away; its request stays queued.
    original.abort();
    let _ = original.await;
    let retry = spawn("twice-001");
    let other = spawn("other-001");
    wait_for_groups(&store, 3, 1).await;
    blocker.rollback().await.unwrap();

    assert!(
        !plug
            .await
            .unwrap()
            .expect("the first group is served")
            .replayed
    );

    let retried = retry.await.unwrap();
    assert!(
        matches!(retried, Err(Error::RequestInProgress)),
        "the retry beside its original is in progress: {:?}",
        retried.map(|o| o.replayed)
    );
    let other = other
        .await
        .unwrap()
        .expect("the group's other request is served");
    assert!(!other.replayed);
    let again = issue_license(&store, &r.account, request("twice-001"))
        .await
        .expect("the retry after the group replays");
    assert!(again.replayed, "the original was issued once");
    let shown = balances(&store, r.account.account_id).await.unwrap();
    assert_eq!(
        shown.balances[0].remaining_balance, 7,
        "three keys, three units"
    );
}

on_both_databases!(a_retry_queued_beside_its_original_is_in_progress);
