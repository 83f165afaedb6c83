//! Direct license issue: one unit of quota for one subscription to a named login; and the
//! licenses a login holds, issued directly or redeemed from promo codes.

use crate::domain::Login;
use crate::error::{Error, Result};
use crate::idempotency::{self, Keyed, KeyedRequest, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::store::Store;
use crate::throttle;
use crate::wire::{License, UserLicense, UserLicenses};

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
    /// One license of the login; a registered login with none is one row of nulls, an
    /// unregistered login no row at all.
    #[derive(sqlx::FromRow)]
    struct Row {
        license_id: Option<String>,
        plan_slug: Option<String>,
        source: Option<String>,
        client_id: Option<String>,
        batch_id: Option<String>,
        created_utc: Option<i64>,
        starts_utc: Option<i64>,
        expires_utc: Option<i64>,
        revoked_utc: Option<i64>,
    }
    // One statement on a kept connection: the login, then its licenses by `licenses_user_plan_end`.
    let query = sqlx::query_as::<_, Row>(
        "SELECT l.license_id, p.slug AS plan_slug, l.source, a.client_id, l.batch_id, \
         l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc \
         FROM users u LEFT JOIN licenses l ON l.user_id = u.id \
         LEFT JOIN plans p ON p.id = l.plan_id LEFT JOIN accounts a ON a.id = l.account_id \
         WHERE u.login = $1 ORDER BY l.created_utc, l.id",
    )
    .bind(login.as_str());
    let rows = {
        let mut reader = store.reader().await?;
        reader.run(|c| query.fetch_all(c)).await?
    };
    if rows.is_empty() {
        return Err(Error::UnknownLogin);
    }
    Ok(UserLicenses {
        login: login.to_string(),
        licenses: rows
            .into_iter()
            .filter_map(|row| {
                Some(UserLicense {
                    license_id: row.license_id?,
                    plan_slug: row.plan_slug?,
                    source: row.source?,
                    client_id: row.client_id,
                    batch_id: row.batch_id,
                    created_utc: row.created_utc?,
                    starts_utc: row.starts_utc?,
                    expires_utc: row.expires_utc,
                    revoked_utc: row.revoked_utc,
                })
            })
            .collect(),
    })
}
