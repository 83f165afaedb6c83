use partner_billing::Error;
use partner_billing::accounts::{
    Standing, account_profile, authenticate_session, create_reseller, create_session,
    list_resellers, set_standing, show_reseller,
};
use partner_billing::domain::{Password, Secret};
use partner_billing::keys::authenticate_api_key;
use partner_billing::store::Store;

use crate::fixture::{account_id, reseller};

async fn a_reseller_is_listed_and_shown(store: Store) {
    let password = Password::parse("password", "another long password").unwrap();
    let client_id = create_reseller(
        &store,
        "Acme",
        password,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let shown = show_reseller(&store, &client_id).await.unwrap();
    assert_eq!(shown.client_id, client_id.as_str());
    assert_eq!(shown.name, "Acme");
    assert_eq!(shown.standing, "good");
    assert_eq!(shown.active_api_keys, 0);
    let r = reseller(&store, 0).await;
    let listed = list_resellers(&store).await.unwrap();
    assert_eq!(listed.len(), 2);
    let with_key = listed
        .iter()
        .find(|s| s.client_id == r.client_id.as_str())
        .unwrap();
    assert_eq!(with_key.active_api_keys, 1);
    let profile = account_profile(&store, account_id(&store, &client_id).await)
        .await
        .unwrap();
    assert_eq!(profile.name, "Acme");
    assert_eq!(profile.standing, "good");
}

async fn a_session_opens_with_the_password_and_closes_on_suspension(store: Store) {
    let r = reseller(&store, 0).await;
    let wrong = create_session(
        &store,
        r.client_id.as_str(),
        Password::presented("not the password"),
        None,
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(wrong, Error::Unauthorized), "{wrong:?}");
    let session = create_session(
        &store,
        r.client_id.as_str(),
        Password::presented("correct horse battery"),
        None,
        None,
    )
    .await
    .unwrap();
    let token = Secret::from_presented(session.session_token.clone());
    let panel = authenticate_session(&store, &token).await.unwrap();
    assert_eq!(panel.account_id, r.account.account_id);

    set_standing(
        &store,
        &r.client_id,
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    assert!(matches!(
        authenticate_session(&store, &token).await,
        Err(Error::Unauthorized)
    ));
    assert_eq!(
        show_reseller(&store, &r.client_id).await.unwrap().standing,
        "suspended"
    );
    set_standing(
        &store,
        &r.client_id,
        Standing::Good,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    authenticate_session(&store, &token).await.unwrap();
}

async fn a_suspended_account_s_keys_stop_working(store: Store) {
    let r = reseller(&store, 0).await;
    let id = r.account.account_id;
    let key = partner_billing::keys::create_api_key(
        &store,
        id,
        None,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let secret = || Secret::from_presented(key.secret.clone());
    authenticate_api_key(&store, &key.client_id, &secret())
        .await
        .unwrap();
    set_standing(
        &store,
        &r.client_id,
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let err = authenticate_api_key(&store, &key.client_id, &secret())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized), "{err:?}");
}

on_both_databases!(
    a_reseller_is_listed_and_shown,
    a_session_opens_with_the_password_and_closes_on_suspension,
    a_suspended_account_s_keys_stop_working,
);
