use partner_billing::Error;
use partner_billing::domain::Login;
use partner_billing::operators::OperatorIdentity;
use partner_billing::plans::add_user;
use partner_billing::promo::{GeneratePromoBatch, generate_promo_batch, normalize_code};
use partner_billing::redemption::{RedeemPromoCode, redeem_promo_code};
use partner_billing::store::Store;

use crate::fixture::{key, plan, reseller};

async fn a_batch_stores_only_hashes_and_its_codes_redeem(store: Store) {
    let r = reseller(&store, 5).await;
    let batch = generate_promo_batch(
        &store,
        &r.account,
        GeneratePromoBatch {
            plan: plan(),
            count: 2,
            idempotency_key: key("batch-key-001"),
        },
    )
    .await
    .unwrap()
    .value;
    assert_eq!(batch.codes.len(), 2);
    assert_eq!(batch.remaining_balance, 3);
    let stored: Vec<String> = sqlx::query_scalar("SELECT code_hash FROM promo_codes")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    for code in &batch.codes {
        let plain = normalize_code(&code.code).unwrap();
        assert!(stored.iter().all(|hash| !hash.contains(&plain)));
    }

    let login = Login::parse("login", "alice").unwrap();
    add_user(&store, &login, &partner_billing::audit::Origin::cli())
        .await
        .unwrap();
    let console = OperatorIdentity::console();
    let redeem = |code: &str, text| RedeemPromoCode::new(code, login.clone(), key(text));
    let code = batch.codes[0].code.as_str();
    let license = redeem_promo_code(&store, &console, redeem(code, "redeem-key-01"))
        .await
        .unwrap();
    assert!(!license.replayed);
    assert_eq!(license.value.batch_id, batch.batch_id);
    assert_eq!(license.value.plan_slug, "pro");
    assert_eq!(license.value.source, "promo");
    assert_eq!(license.value.client_id, r.client_id.as_str());
    let replay = redeem_promo_code(&store, &console, redeem(code, "redeem-key-01"))
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.value, license.value);
    let err = redeem_promo_code(&store, &console, redeem(code, "redeem-key-02"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyRedeemed), "{err:?}");
    let err = redeem_promo_code(
        &store,
        &console,
        redeem("0000-0000-0000-0000", "redeem-key-03"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::CodeNotFound), "{err:?}");
}

async fn a_code_of_one_redemption_is_exhausted_for_the_next_login(store: Store) {
    let r = reseller(&store, 1).await;
    let batch = generate_promo_batch(
        &store,
        &r.account,
        GeneratePromoBatch {
            plan: plan(),
            count: 1,
            idempotency_key: key("batch-key-002"),
        },
    )
    .await
    .unwrap()
    .value;
    let console = OperatorIdentity::console();
    let code = batch.codes[0].code.as_str();
    for (login, text) in [("bob", "redeem-bob-01"), ("carol", "redeem-carol-1")] {
        let login = Login::parse("login", login).unwrap();
        add_user(&store, &login, &partner_billing::audit::Origin::cli())
            .await
            .unwrap();
        let result = redeem_promo_code(
            &store,
            &console,
            RedeemPromoCode::new(code, login, key(text)),
        )
        .await;
        if text.starts_with("redeem-bob") {
            result.unwrap();
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, Error::CodeExhausted), "{err:?}");
        }
    }
}

on_both_databases!(
    a_batch_stores_only_hashes_and_its_codes_redeem,
    a_code_of_one_redemption_is_exhausted_for_the_next_login,
);
