//! Direct license issue: one unit of quota for one subscription to a named login; and the
//! licenses a login holds, issued directly or redeemed from promo codes.

use crate::domain::Login;
use crate::error::{Error, Result};
use crate::idempotency::{self, Keyed, KeyedRequest, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::store::Store;
use crate::throttle;
use crate::wire::{License, UserLicenses};

mod group;
mod request;

pub use request::IssueLicense;

/// Issues one license, charging one unit, in one transaction with its ledger entry and
/// idempotency record. A retry with the same key replays the stored license.
///
/// Concurrent requests that would wait on the same lock share a transaction (see
/// `licenses/group.rs`); each still gets its own writes and its own answer.
pub async fn issue_license(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    let outcome = issue_license_once(store, account, request).await;
    if let Err(Error::UnknownLogin) = outcome {
        // No free oracle of registered logins (docs/security.md): past 100 unknown logins an
        // hour, the account is told to slow down instead.
        let subject = account.account_id.to_string();
        throttle::count(store, throttle::UNKNOWN_LOGIN_PER_ACCOUNT, &subject).await?;
    }
    outcome
}

/// Claims the key in this process (a second request with it meanwhile is in progress), then
/// hands the request to the license engine (`licenses/group.rs`): one piece of code decides
/// and writes every license, in a group of many or, with group commit off, a group of one.
async fn issue_license_once(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    let fingerprint = request::fingerprint(&request);
    let keyed = KeyedRequest {
        scope: Scope::Account(account.account_id),
        key: &request.idempotency_key,
        fingerprint: &fingerprint,
    };
    let _claim = match idempotency::claim(store, keyed, "license").await? {
        Keyed::Fresh(claim) => claim,
        Keyed::Replay(body) => return idempotency::replayed(&body),
    };
    group::issue(store, account, request).await
}

/// Every license of a registered login, direct and redeemed, expired ones included, oldest
/// first. An unregistered login is [`Error::UnknownLogin`].
pub async fn user_licenses(store: &Store, login: &Login) -> Result<UserLicenses> {
    let user_id: i64 = sqlx::query_scalar("SELECT id FROM users WHERE login = $1")
        .bind(login.as_str())
        .fetch_optional(store.pool())
        .await?
        .ok_or(Error::UnknownLogin)?;
    let licenses = sqlx::query_as(
        "SELECT l.license_id, p.slug AS plan_slug, l.source, a.client_id, l.batch_id, \
         l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc \
         FROM licenses l JOIN plans p ON p.id = l.plan_id LEFT JOIN accounts a ON a.id = l.account_id \
         WHERE l.user_id = $1 ORDER BY l.created_utc, l.id",
    )
    .bind(user_id)
    .fetch_all(store.pool())
    .await?;
    Ok(UserLicenses {
        login: login.to_string(),
        licenses,
    })
}
