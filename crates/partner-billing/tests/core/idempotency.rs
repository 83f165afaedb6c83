use partner_billing::Error;
use partner_billing::promo::{GeneratePromoBatch, generate_promo_batch};
use partner_billing::quota::balances;
use partner_billing::store::Store;

use crate::fixture::{key, plan, reseller};

async fn the_same_key_replays_and_charges_once(store: Store) {
    let r = reseller(&store, 10).await;
    let request = GeneratePromoBatch {
        plan: plan(),
        count: 3,
        idempotency_key: key("same-key-001"),
    };
    let first = generate_promo_batch(&store, &r.account, request.clone())
        .await
        .unwrap();
    assert!(!first.replayed);
    let again = generate_promo_batch(&store, &r.account, request)
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.value, first.value, "the same answer, codes included");
    let shown = balances(&store, r.account.account_id).await.unwrap();
    assert_eq!(shown.balances[0].remaining_balance, 7);
}

async fn the_same_key_for_another_request_is_refused(store: Store) {
    let r = reseller(&store, 10).await;
    let request = |count| GeneratePromoBatch {
        plan: plan(),
        count,
        idempotency_key: key("reused-key-01"),
    };
    generate_promo_batch(&store, &r.account, request(1))
        .await
        .unwrap();
    let err = generate_promo_batch(&store, &r.account, request(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::IdempotencyKeyReused), "{err:?}");
    let shown = balances(&store, r.account.account_id).await.unwrap();
    assert_eq!(shown.balances[0].remaining_balance, 9);
}

async fn a_refused_request_is_not_recorded(store: Store) {
    let r = reseller(&store, 1).await;
    let request = |count| GeneratePromoBatch {
        plan: plan(),
        count,
        idempotency_key: key("retry-key-001"),
    };
    let err = generate_promo_batch(&store, &r.account, request(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientQuota), "{err:?}");
    // Nothing was stored under the key, so the same key runs again (here with another count).
    let ok = generate_promo_batch(&store, &r.account, request(1))
        .await
        .unwrap();
    assert!(!ok.replayed);
}

on_both_databases!(
    the_same_key_replays_and_charges_once,
    the_same_key_for_another_request_is_refused,
    a_refused_request_is_not_recorded,
);
