use futures_util::TryStreamExt;
use partner_billing::Error;
use partner_billing::audit::Origin;
use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::plans::{NewPlan, create_plan};
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

/// Adds ledger entries `2..=last` to the reseller's account, one unit each, straight in the
/// table (no balance behind them: these tests read the ledger, they do not audit it); every
/// third entry on plan `other`, the rest on [`PLAN`](crate::fixture::PLAN). `balance_after`
/// holds the entry's number, so the order read back can be checked.
async fn bulk_entries(store: &Store, client_id: &ClientId, last: i64) {
    let id = account_id(store, client_id).await;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
         INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, \
         reason, created_utc) \
         SELECT $2, (SELECT id FROM plans WHERE slug = CASE WHEN i % 3 = 0 THEN 'other' \
         ELSE $3 END), 'credit', 1, i, 'cli:test', 'bulk', i FROM n",
    )
    .bind(last)
    .bind(id)
    .bind(plan().as_str())
    .execute(store.pool())
    .await
    .unwrap();
}

async fn other_plan(store: &Store) -> PlanSlug {
    let other = PlanSlug::parse("planSlug", "other").unwrap();
    let new_plan = NewPlan::new(other.clone(), "Other", Some(30), Some(1), Some(30)).unwrap();
    create_plan(store, new_plan, &Origin::cli()).await.unwrap();
    other
}

/// The ledger is read a chunk at a time: a ledger of several chunks comes back whole, once
/// each, oldest first, with or without a plan filter (each here a whole number of chunks, so
/// the read past the last one is tried too), and an unknown account fails before anything is
/// read.
async fn a_long_ledger_streams_whole_and_in_order(store: Store) {
    let r = reseller(&store, 1).await;
    let other = other_plan(&store).await;
    bulk_entries(&store, &r.client_id, 3_000).await;
    let numbers = |entries: Vec<LedgerEntry>| -> Vec<i64> {
        entries.iter().map(|e| e.balance_after).collect()
    };
    let all = all_entries(&store, &r.client_id, None).await;
    assert_eq!(numbers(all), (1..=3_000).collect::<Vec<_>>());
    let pro = all_entries(&store, &r.client_id, Some(&plan())).await;
    assert!(pro.iter().all(|e| e.product_slug == "pro"));
    assert_eq!(
        numbers(pro),
        (1..=3_000).filter(|i| i % 3 != 0).collect::<Vec<_>>()
    );
    let others = all_entries(&store, &r.client_id, Some(&other)).await;
    assert_eq!(
        numbers(others),
        (1..=1_000).map(|i| i * 3).collect::<Vec<_>>()
    );
    let unknown = ClientId::parse("clientId", "rsc_000000000000000000000000").unwrap();
    assert!(matches!(
        ledger(&store, &unknown, None).await.err(),
        Some(Error::NotFound("reseller"))
    ));
}

/// A ledger read a chunk at a time is one snapshot: an entry committed while it is read is not
/// in it (chunks read in snapshots of their own would take it, and on PostgreSQL, whose ids are
/// not handed out in commit order, could skip an entry committed behind a later one).
async fn a_ledger_read_is_one_snapshot(store: Store) {
    let r = reseller(&store, 1).await;
    other_plan(&store).await;
    bulk_entries(&store, &r.client_id, 1_500).await;
    let mut entries = std::pin::pin!(ledger(&store, &r.client_id, None).await.unwrap());
    // The first item comes with the first chunk read.
    let first = entries.try_next().await.unwrap().unwrap();
    assert_eq!(first.balance_after, 1);
    credit(
        &store,
        &partner_billing::quota::Correction {
            client_id: &r.client_id,
            plan: &plan(),
            units: 5,
            reason: "during the read",
            reference: None,
        },
        &Origin::cli(),
    )
    .await
    .unwrap();
    let rest: Vec<LedgerEntry> = entries.try_collect().await.unwrap();
    assert_eq!(rest.len(), 1_499);
    assert!(rest.iter().all(|e| e.reason.as_deref() == Some("bulk")));
    let after = all_entries(&store, &r.client_id, None).await;
    assert_eq!(after.len(), 1_501);
    assert_eq!(after[1_500].reason.as_deref(), Some("during the read"));
}

/// A license naming an account and plan with no balance behind it (what no write path makes)
/// fails the audit: with no foreign key on those columns (PostgreSQL), the audit is the check.
async fn a_license_without_its_balance_fails_the_audit(store: Store) {
    let r = reseller(&store, 3).await;
    let other = other_plan(&store).await;
    assert!(audit_verify(&store).await.is_ok());
    let id = account_id(&store, &r.client_id).await;
    sqlx::query("INSERT INTO users (login, created_utc) VALUES ('orphan-owner', 0)")
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, \
         starts_utc, expires_utc) SELECT 'orphan', u.id, p.id, $1, 'direct', 0, 0, NULL \
         FROM users u, plans p WHERE u.login = 'orphan-owner' AND p.slug = $2",
    )
    .bind(id)
    .bind(other.as_str())
    .execute(store.pool())
    .await
    .unwrap();
    let err = audit_verify(&store).await.unwrap_err();
    assert!(
        err.to_string().contains("1 licenses have no balance"),
        "{err}"
    );
}

on_both_databases!(
    a_license_without_its_balance_fails_the_audit,
    credit_adds_to_the_balance_and_the_ledger,
    a_debit_charges_once_and_never_below_zero,
    a_long_ledger_streams_whole_and_in_order,
    a_ledger_read_is_one_snapshot,
);
