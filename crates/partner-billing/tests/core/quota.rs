use futures_util::TryStreamExt;
use partner_billing::Error;
use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::promo::{GeneratePromoBatch, generate_promo_batch};
use partner_billing::quota::{LedgerEntry, audit_verify, balances, credit, ledger};
use partner_billing::store::Store;

use crate::fixture::{account_id, key, plan, reseller};

async fn all_entries(
    store: &Store,
    client_id: &ClientId,
    plan: Option<&PlanSlug>,
) -> Vec<LedgerEntry> {
    ledger(store, client_id, plan)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

async fn credit_adds_to_the_balance_and_the_ledger(store: Store) {
    let r = reseller(&store, 10).await;
    let balance = credit(
        &store,
        &partner_billing::quota::Correction {
            client_id: &r.client_id,
            plan: &plan(),
            units: 5,
            reason: "more",
            reference: None,
        },
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert_eq!(balance.remaining_balance, 15);
    let shown = balances(&store, r.account.account_id).await.unwrap();
    assert_eq!(shown.balances.len(), 1);
    assert_eq!(shown.balances[0].product_slug, "pro");
    assert_eq!(shown.balances[0].remaining_balance, 15);
    let entries = all_entries(&store, &r.client_id, None).await;
    let deltas: Vec<(String, i64, i64)> = entries
        .iter()
        .map(|e| (e.kind.clone(), e.delta, e.balance_after))
        .collect();
    assert_eq!(
        deltas,
        [("credit".into(), 10, 10), ("credit".into(), 5, 15)]
    );
    assert_eq!(entries[1].reason.as_deref(), Some("more"));
    assert!(
        credit(
            &store,
            &partner_billing::quota::Correction {
                client_id: &r.client_id,
                plan: &plan(),
                units: 0,
                reason: "none",
                reference: None
            },
            &partner_billing::audit::Origin::cli()
        )
        .await
        .is_err()
    );
}

async fn a_debit_charges_once_and_never_below_zero(store: Store) {
    let r = reseller(&store, 3).await;
    let batch = |count, text| GeneratePromoBatch {
        plan: plan(),
        count,
        idempotency_key: key(text),
    };
    let charged = generate_promo_batch(&store, &r.account, batch(2, "debit-one"))
        .await
        .unwrap();
    assert_eq!(charged.value.remaining_balance, 1);
    let refused = generate_promo_batch(&store, &r.account, batch(2, "debit-two"))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::InsufficientQuota), "{refused:?}");
    let shown = balances(&store, r.account.account_id).await.unwrap();
    assert_eq!(shown.balances[0].remaining_balance, 1);
    let entries = all_entries(&store, &r.client_id, Some(&plan())).await;
    assert_eq!(entries.len(), 2, "the refused debit wrote no entry");
    assert_eq!(entries[1].kind, "promo_batch");
    assert_eq!(entries[1].delta, -2);
    assert_eq!(
        entries[1].reference.as_deref(),
        Some(charged.value.order_public_id.as_str())
    );
    let audit = audit_verify(&store).await.unwrap();
    assert_eq!(audit.balances_checked, 1);
    assert!(audit.discrepancies.is_empty());
}

/// The ledger is read a chunk at a time: a ledger longer than several chunks comes back
/// whole, once each, oldest first, and an unknown account fails before anything is read.
async fn a_long_ledger_streams_whole_and_in_order(store: Store) {
    const ENTRIES: i64 = 2_345;
    let r = reseller(&store, 1).await;
    let id = account_id(&store, &r.client_id).await;
    // One credit of one unit is already there: add the rest as credits of one unit each.
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, \
         reason, created_utc) \
         SELECT $2, (SELECT id FROM plans WHERE slug = $3), 'credit', 1, i, 'cli:test', \
         'bulk', i FROM n",
    )
    .bind(ENTRIES)
    .bind(id)
    .bind(plan().as_str())
    .execute(store.pool())
    .await
    .unwrap();
    let entries = all_entries(&store, &r.client_id, None).await;
    let balances: Vec<i64> = entries.iter().map(|e| e.balance_after).collect();
    assert_eq!(balances, (1..=ENTRIES).collect::<Vec<_>>());
    assert_eq!(
        all_entries(&store, &r.client_id, Some(&plan())).await.len() as i64,
        ENTRIES
    );
    let other = PlanSlug::parse("planSlug", "other").unwrap();
    assert!(
        all_entries(&store, &r.client_id, Some(&other))
            .await
            .is_empty()
    );
    let unknown = ClientId::parse("clientId", "rsc_000000000000000000000000").unwrap();
    assert!(matches!(
        ledger(&store, &unknown, None).await.err(),
        Some(Error::NotFound("reseller"))
    ));
}

on_both_databases!(
    credit_adds_to_the_balance_and_the_ledger,
    a_debit_charges_once_and_never_below_zero,
    a_long_ledger_streams_whole_and_in_order,
);
