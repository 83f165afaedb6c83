//! Subscriptions (docs/subscriptions.md): the period each license grants, a login's
//! entitlements folded from its licenses, and revocation.
//!
//! A license grants `[starts_utc, expires_utc)` of its plan. Where the next license of a login
//! and plan starts is kept in one row per login and plan (`subscriptions`, migration 0013): the
//! latest end among its unrevoked licenses, or NULL while a perpetual one is held. Every license
//! write and every revocation changes that row, so concurrent writers for one login and plan
//! meet on it (a conditional update, or its row lock) whatever process they run in.

use sqlx::AnyConnection;

use crate::audit::{Action, Entry, Origin, parse_reason};
use crate::domain::{ClientId, LicenseId, Login};
use crate::error::{Error, Result};
use crate::events::{self, EventData};
use crate::keys::PartnerAccount;
use crate::store::{Store, Tx};
use crate::wire::{Entitlement, Entitlements, LicenseRecord};

mod chain;

pub(crate) use chain::{Head, extend_head, lock_head, next_period};

/// What a login may use now and until when, one entry per plan with an unrevoked license that
/// has not ended, sorted by slug. An unregistered login is [`Error::UnknownLogin`].
pub async fn entitlements(store: &Store, login: &Login) -> Result<Entitlements> {
    /// One plan's entitlement; a registered login with none is one row of nulls, an
    /// unregistered login no row at all.
    #[derive(sqlx::FromRow)]
    struct Row {
        plan_slug: Option<String>,
        active_from_utc: Option<i64>,
        active_until_utc: Option<i64>,
    }
    let now = store.now_utc();
    // One statement on a kept connection: the login, then its licenses by `licenses_user_plan_end`.
    let query = sqlx::query_as::<_, Row>(
        "SELECT p.slug AS plan_slug, min(l.starts_utc) AS active_from_utc, \
         CASE WHEN count(l.id) > count(l.expires_utc) THEN NULL ELSE max(l.expires_utc) END \
         AS active_until_utc \
         FROM users u LEFT JOIN licenses l ON l.user_id = u.id AND l.revoked_utc IS NULL \
         AND (l.expires_utc IS NULL OR l.expires_utc > $2) \
         LEFT JOIN plans p ON p.id = l.plan_id \
         WHERE u.login = $1 GROUP BY p.slug ORDER BY p.slug",
    )
    .bind(login.as_str())
    .bind(now);
    let rows = {
        let mut reader = store.reader().await?;
        reader.run(|c| query.fetch_all(c)).await?
    };
    if rows.is_empty() {
        return Err(Error::UnknownLogin);
    }
    Ok(Entitlements {
        login: login.to_string(),
        entitlements: rows
            .into_iter()
            .filter_map(|row| {
                let active_from_utc = row.active_from_utc?;
                Some(Entitlement {
                    active_now: active_from_utc <= now,
                    plan_slug: row.plan_slug?,
                    active_from_utc,
                    active_until_utc: row.active_until_utc,
                })
            })
            .collect(),
    })
}

/// Who revokes a license: a reseller (its own licenses only) or the operator (any, with a
/// reason for the record: 1-500 characters, no control characters, as for a correction).
#[derive(Debug, Clone, Copy)]
pub enum Revoker<'a> {
    /// The reseller, with an API key or signed in to the panel.
    Reseller {
        account_id: i64,
        client_id: &'a ClientId,
    },
    Operator {
        reason: &'a str,
    },
}

impl<'a> Revoker<'a> {
    /// The reseller an API key acts for.
    pub fn api_key(account: &'a PartnerAccount) -> Self {
        Self::Reseller {
            account_id: account.account_id,
            client_id: &account.client_id,
        }
    }
}

/// The license as the reseller sees it, with what revocation needs.
#[derive(sqlx::FromRow)]
struct LicenseRow {
    #[sqlx(flatten)]
    license: LicenseRecord,
    user_id: i64,
    plan_id: i64,
    account_id: Option<i64>,
}

const LICENSE_SELECT: &str = "SELECT l.license_id, p.slug AS plan_slug, u.login, l.source, \
     l.batch_id, l.created_utc, l.starts_utc, l.expires_utc, l.revoked_utc, l.user_id, \
     l.plan_id, l.account_id \
     FROM licenses l JOIN users u ON u.id = l.user_id JOIN plans p ON p.id = l.plan_id \
     WHERE l.license_id = $1 AND ($2 = 0 OR l.account_id = $2)";

async fn find_license(
    conn: &mut AnyConnection,
    license_id: &LicenseId,
    account_id: i64,
) -> Result<LicenseRow> {
    sqlx::query_as(LICENSE_SELECT)
        .bind(license_id.to_string())
        .bind(account_id)
        .fetch_optional(conn)
        .await?
        .ok_or(Error::LicenseNotFound)
}

/// The license a `licenseId` names; any other text, malformed or not, names none: it is
/// answered [`Error::LicenseNotFound`] like an unknown id, and never sent to the database.
pub(crate) fn parse_license_id(license_id: &str) -> Result<LicenseId> {
    LicenseId::parse("licenseId", license_id).map_err(|_| Error::LicenseNotFound)
}

/// One license of the reseller's (`account_id`), as it shows it; any other id is
/// [`Error::LicenseNotFound`].
pub async fn reseller_license(
    store: &Store,
    account_id: i64,
    license_id: &str,
) -> Result<LicenseRecord> {
    let license_id = parse_license_id(license_id)?;
    if account_id == 0 {
        return Err(Error::LicenseNotFound);
    }
    let mut conn = store.pool().acquire().await?;
    Ok(find_license(&mut conn, &license_id, account_id)
        .await?
        .license)
}

/// Revokes a license: it grants nothing from now on, and the login's later licenses of the plan
/// move earlier by its unused time, so the login keeps exactly the time of its other licenses.
/// The license keeps its period as granted. Revoking a revoked license changes nothing and
/// answers it as it is. An id that is not one of the reseller's licenses, malformed or not, is
/// [`Error::LicenseNotFound`]. No unit goes back to the balance.
///
/// A revocation that changes the license writes its `license.revoked` entry (by `origin`'s
/// actor, with the operator's reason) in the same transaction; a repeat writes none.
pub async fn revoke_license(
    store: &Store,
    revoker: Revoker<'_>,
    license_id: &str,
    origin: &Origin,
) -> Result<LicenseRecord> {
    // Account 0 is no account: the operator may revoke any license.
    let account_id = match revoker {
        Revoker::Reseller { account_id, .. } => account_id,
        Revoker::Operator { reason } => {
            parse_reason(reason)?;
            0
        }
    };
    let license_id = parse_license_id(license_id)?;
    let mut tx = store.begin_write().await?;
    let chain = find_license(&mut tx, &license_id, account_id).await?;
    if chain.license.revoked_utc.is_some() {
        return Ok(chain.license);
    }
    // The login's chain row first, then its licenses: the order every license write takes
    // them in, so a revocation never deadlocks with an issue or another revocation. Under that
    // lock the license is read again: a revocation that committed meanwhile may have moved it,
    // or revoked it.
    let now = store.now_utc();
    lock_head(&mut tx, chain.user_id, chain.plan_id, now).await?;
    let found = find_license(&mut tx, &license_id, account_id).await?;
    if found.license.revoked_utc.is_some() {
        tx.rollback().await?;
        return Ok(found.license);
    }
    sqlx::query("UPDATE licenses SET revoked_utc = $2 WHERE license_id = $1")
        .bind(license_id.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    let (user_id, plan_id, owner) = (found.user_id, found.plan_id, found.account_id);
    let license = LicenseRecord {
        revoked_utc: Some(now),
        ..found.license
    };
    shift_later_licenses(&mut tx, user_id, plan_id, &license, now).await?;
    chain::recompute_head(&mut tx, user_id, plan_id, now).await?;
    if let Some(owner) = owner {
        events::record(
            store,
            &mut tx,
            owner,
            EventData::LicenseRevoked {
                license_id: license.license_id.clone(),
                product_slug: license.plan_slug.clone(),
                login: license.login.clone(),
                revoked_utc: now,
            },
        )
        .await?;
    }
    let mut entry = Entry::new(Action::LicenseRevoked, owner)
        .id("licenseId", license.license_id.clone())
        .id("productSlug", license.plan_slug.clone())
        .id("login", license.login.clone());
    if let Revoker::Operator { reason } = revoker {
        entry = entry.text("reason", Some(reason));
    }
    let written = entry.write(store, &mut tx, origin).await?;
    tx.commit().await?;
    written.committed(store);
    store.wake_webhook_worker();
    match revoker {
        Revoker::Reseller { client_id, .. } => tracing::info!(
            client_id = %client_id,
            license_id = %license.license_id,
            plan = %license.plan_slug,
            "license revoked"
        ),
        Revoker::Operator { reason } => tracing::info!(
            license_id = %license.license_id,
            plan = %license.plan_slug,
            reason,
            "license revoked by the operator"
        ),
    }
    Ok(license)
}

/// Moves the login's licenses of the plan that follow the revoked one earlier by its unused
/// time: from now to its end, or its whole length when it had not started.
async fn shift_later_licenses(
    tx: &mut Tx,
    user_id: i64,
    plan_id: i64,
    license: &LicenseRecord,
    now: i64,
) -> Result<()> {
    let Some(expires) = license.expires_utc else {
        return Ok(());
    };
    let unused = chain::unused_seconds(license.starts_utc, expires, now);
    if unused == 0 {
        return Ok(());
    }
    sqlx::query(
        "UPDATE licenses SET starts_utc = starts_utc - $4, expires_utc = expires_utc - $4 \
         WHERE user_id = $1 AND plan_id = $2 AND revoked_utc IS NULL AND starts_utc >= $3",
    )
    .bind(user_id)
    .bind(plan_id)
    .bind(expires)
    .bind(unused)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
