//! Direct license issue: one unit of quota for one subscription to a named login; and the
//! licenses a login holds, issued directly or redeemed from promo codes.

use sqlx::AnyConnection;
use uuid::Uuid;

use crate::domain::{IdempotencyKey, Login, PlanSlug, UserId};
use crate::error::{Error, Result};
use crate::events::{EventData, Subscribers};
use crate::idempotency::{self, Begun, Fingerprint, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::plans::{PlanRow, find_plan, find_user};
use crate::quota::{Charge, EntryKind, debit};
use crate::store::{FaultPoint, Store, Tx};
use crate::subscriptions;
use crate::throttle;
use crate::wire::{IssueLicenseRequest, License, UserLicenses};

mod group;

/// A parsed license request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueLicense {
    pub plan: PlanSlug,
    pub login: Login,
    pub idempotency_key: IdempotencyKey,
}

impl TryFrom<&IssueLicenseRequest> for IssueLicense {
    type Error = Error;

    fn try_from(request: &IssueLicenseRequest) -> Result<Self> {
        Ok(Self {
            plan: PlanSlug::parse("planSlug", &request.plan_slug)?,
            login: Login::parse("login", &request.login)?,
            idempotency_key: IdempotencyKey::parse("idempotencyKey", &request.idempotency_key)?,
        })
    }
}

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

async fn issue_license_once(
    store: &Store,
    account: &PartnerAccount,
    request: IssueLicense,
) -> Result<Outcome<License>> {
    let scope = Scope::Account(account.account_id);
    let claim = idempotency::claim(store, scope, &request.idempotency_key)?;
    if store.group_commit() {
        let outcome = group::issue(store, account, request).await;
        drop(claim);
        return outcome;
    }
    let fingerprint = fingerprint(&request);
    let mut tx =
        match idempotency::begin(store, &claim, scope, &request.idempotency_key, &fingerprint)
            .await?
        {
            Begun::Replay(body) => return idempotency::replayed(&body),
            Begun::Fresh(tx) => tx,
        };
    let result = async {
        let target = Target::find(&mut tx, account, &request).await?;
        write_license(store, &mut tx, account, &request, target, &fingerprint).await
    }
    .await;
    let license = idempotency::settle(tx, result).await?;
    tracing::info!(client_id = %account.client_id, license_id = %license.license_id, plan = %request.plan, "license issued");
    Ok(Outcome {
        value: license,
        replayed: false,
    })
}

/// What makes two license requests the same request.
fn fingerprint(request: &IssueLicense) -> Fingerprint {
    Fingerprint::new("license", &[request.plan.as_str(), request.login.as_str()])
}

/// The plan and the login a license is for, as rows. Plans and logins are only ever added, so
/// they can be looked up before the transaction that uses them.
#[derive(Debug, Clone, Copy)]
struct Target {
    plan: PlanRow,
    user_id: UserId,
}

impl Target {
    /// Unknown plan, then unknown login. An unknown login with a balance below the cost is
    /// [`Error::InsufficientQuota`], as a registered one would be: the answer never tells
    /// whether a login is registered unless the request could have been charged.
    async fn find(
        conn: &mut AnyConnection,
        account: &PartnerAccount,
        request: &IssueLicense,
    ) -> Result<Self> {
        let plan = find_plan(conn, &request.plan).await?;
        let user_id = match find_user(conn, &request.login).await {
            Err(Error::UnknownLogin) => {
                let remaining: Option<i64> = sqlx::query_scalar(
                    "SELECT remaining FROM balances WHERE account_id = $1 AND plan_id = $2",
                )
                .bind(account.account_id)
                .bind(plan.id)
                .fetch_optional(&mut *conn)
                .await?;
                return Err(if remaining.unwrap_or(0) < 1 {
                    Error::InsufficientQuota
                } else {
                    Error::UnknownLogin
                });
            }
            other => other?,
        };
        Ok(Self { plan, user_id })
    }
}

/// The writes of one license inside `tx`: the debit and its ledger entry, the license, and
/// the idempotency record. Every refusal (insufficient quota) comes before the first write.
async fn write_license(
    store: &Store,
    tx: &mut Tx,
    account: &PartnerAccount,
    request: &IssueLicense,
    Target { plan, user_id }: Target,
    fingerprint: &Fingerprint,
) -> Result<License> {
    let scope = Scope::Account(account.account_id);
    let now = store.now_utc();
    let license_id = Uuid::new_v4().to_string();
    let actor = format!("api_key:{}", account.api_key_id);
    let remaining = debit(
        tx,
        &Charge {
            account_id: account.account_id,
            plan_id: plan.id,
            units: 1,
            kind: EntryKind::License,
            actor: &actor,
            reference: &license_id,
            now_utc: now,
        },
    )
    .await?;
    // After the balance (a charge it could not pay is refused first): a perpetual plan already
    // held is refused, else the license starts where the login's latest one of the plan ends.
    let head = subscriptions::lock_head(tx, user_id.get(), plan.id.get(), now).await?;
    let period = subscriptions::next_period(head, plan.duration_days, now)?;
    let subscribers = Subscribers::load(tx, account.account_id).await?;
    subscribers
        .after_debit(store, tx, plan.id, request.plan.as_str(), 1, remaining)
        .await?;
    if store.fault(FaultPoint::LicenseWrite) {
        return Err(Error::Internal(
            "fault injection: license write failed".to_owned(),
        ));
    }
    sqlx::query(
        "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
         VALUES ($1, $2, $3, $4, 'direct', $5, $6, $7)",
    )
    .bind(license_id.as_str())
    .bind(user_id)
    .bind(plan.id)
    .bind(account.account_id)
    .bind(now)
    .bind(period.starts_utc)
    .bind(period.expires_utc)
    .execute(&mut **tx)
    .await?;
    subscriptions::extend_head(tx, user_id.get(), plan.id.get(), &period).await?;
    let license = License {
        license_id,
        plan_slug: request.plan.to_string(),
        login: request.login.to_string(),
        remaining_balance: remaining,
        created_utc: now,
        starts_utc: period.starts_utc,
        expires_utc: period.expires_utc,
        revoked_utc: None,
    };
    subscribers
        .record(
            store,
            tx,
            EventData::LicenseIssued {
                license_id: license.license_id.clone(),
                product_slug: license.plan_slug.clone(),
                login: license.login.clone(),
                remaining_balance: remaining,
            },
        )
        .await?;
    idempotency::record(
        tx,
        scope,
        &request.idempotency_key,
        fingerprint,
        &license,
        now,
    )
    .await?;
    Ok(license)
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
