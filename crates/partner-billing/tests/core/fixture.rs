//! A reseller with an API key and a plan, as most core tests start.

use std::time::{Duration, Instant};

use partner_billing::accounts::create_reseller;
use partner_billing::domain::{ClientId, IdempotencyKey, Password, PlanSlug, Secret};
use partner_billing::keys::{PartnerAccount, authenticate_api_key, create_api_key};
use partner_billing::plans::{NewPlan, create_plan};
use partner_billing::quota::credit;
use partner_billing::store::Store;
use partner_billing::wire::CreatedApiKey;

pub const PLAN: &str = "pro";

/// A reseller authenticated by a fresh key, holding `units` of plan [`PLAN`].
pub struct Reseller {
    pub account: PartnerAccount,
    pub client_id: ClientId,
    /// The key it authenticated with, to present again.
    pub key: CreatedApiKey,
}

pub fn plan() -> PlanSlug {
    PlanSlug::parse("planSlug", PLAN).unwrap()
}

pub fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse("idempotencyKey", text).unwrap()
}

/// The account's row id, as the panel knows it.
pub async fn account_id(store: &Store, client_id: &ClientId) -> i64 {
    sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
        .bind(client_id.as_str())
        .fetch_one(store.pool())
        .await
        .unwrap()
}

pub async fn reseller(store: &Store, units: i64) -> Reseller {
    if partner_billing::plans::list_plans(store)
        .await
        .unwrap()
        .is_empty()
    {
        let new_plan = NewPlan::new(plan(), "Pro", Some(30), Some(1), Some(30)).unwrap();
        create_plan(store, new_plan, &partner_billing::audit::Origin::cli())
            .await
            .unwrap();
    }
    let password = Password::parse("password", "correct horse battery").unwrap();
    let client_id = create_reseller(
        store,
        "Reseller",
        password,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    if units > 0 {
        credit(
            store,
            &partner_billing::quota::Correction {
                client_id: &client_id,
                plan: &plan(),
                units,
                reason: "top-up",
                reference: None,
            },
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
    }
    let id = account_id(store, &client_id).await;
    let created = create_api_key(
        store,
        id,
        Some("main"),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let account = authenticate_api_key(
        store,
        &created.client_id,
        &Secret::from_presented(created.secret.clone()),
    )
    .await
    .unwrap();
    Reseller {
        account,
        client_id,
        key: created,
    }
}

/// Waits until the license groups hold exactly `waiting` requests queued for a group
/// transaction and `running` inside one. A request is queued before its lane's committer
/// takes it, so "one running" is what says a group has begun.
pub async fn wait_for_groups(store: &Store, waiting: usize, running: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (now_waiting, now_running, _) = store.license_group_stats();
        if (now_waiting, now_running) == (waiting, running) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the license groups reach {waiting} waiting, {running} running \
             (now {now_waiting}, {now_running})"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
