//! Plans (products) and end-user logins, managed by the operator.

use serde::Serialize;
use sqlx::AnyConnection;

use crate::audit::{Action, Entry, Origin};
use crate::db::is_unique_violation;
use crate::domain::{InvalidField, Login, PlanId, PlanSlug, UserId};
use crate::error::{Error, Result};
use crate::limits;
use crate::store::Store;
use crate::utc::SECONDS_PER_DAY;
use crate::wire::EndUser;

/// When a license granted at `now_utc` for a plan of `duration_days` ends (plan durations are
/// whole days); never without one.
pub(crate) fn license_expiry(duration_days: Option<i64>, now_utc: i64) -> Option<i64> {
    duration_days.map(|days| now_utc + days * SECONDS_PER_DAY)
}

/// A plan and its promo policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub slug: String,
    pub name: String,
    /// Subscription length of a license; `None` for no end.
    pub duration_days: Option<i64>,
    /// How many redemptions each promo code allows.
    pub redemptions_per_code: i64,
    /// How long promo codes stay valid after generation.
    pub code_validity_days: i64,
    pub created_utc: i64,
}

/// What the operator gives to create a plan.
#[derive(Debug, Clone)]
pub struct NewPlan {
    pub slug: PlanSlug,
    pub name: String,
    pub duration_days: Option<i64>,
    pub redemptions_per_code: i64,
    pub code_validity_days: i64,
}

impl NewPlan {
    /// Checks the operator's values; the slug is parsed by the caller.
    pub fn new(
        slug: PlanSlug,
        name: &str,
        duration_days: Option<i64>,
        redemptions_per_code: Option<i64>,
        code_validity_days: Option<i64>,
    ) -> Result<Self, InvalidField> {
        if name.trim().is_empty() || name.chars().count() > 200 {
            return Err(InvalidField::new("name", "must be 1-200 characters"));
        }
        let positive = |field, value: Option<i64>, default| match value {
            None => Ok(default),
            Some(v) if (1..=limits::PLAN_SETTING_MAX).contains(&v) => Ok(v),
            Some(_) => Err(InvalidField::new(
                field,
                format!("must be between 1 and {}", limits::PLAN_SETTING_MAX),
            )),
        };
        let duration_days = match duration_days {
            None => None,
            Some(d) => Some(positive("durationDays", Some(d), 0)?),
        };
        Ok(Self {
            slug,
            name: name.to_owned(),
            duration_days,
            redemptions_per_code: positive("redemptionsPerCode", redemptions_per_code, 1)?,
            code_validity_days: positive("codeValidityDays", code_validity_days, 365)?,
        })
    }
}

pub async fn create_plan(store: &Store, plan: NewPlan, origin: &Origin) -> Result<Plan> {
    let now = store.now_utc();
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO plans (slug, name, duration_days, redemptions_per_code, code_validity_days, created_utc) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(plan.slug.as_str())
    .bind(plan.name.as_str())
    .bind(plan.duration_days)
    .bind(plan.redemptions_per_code)
    .bind(plan.code_validity_days)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(|e| if is_unique_violation(&e) { Error::AlreadyExists("plan") } else { e.into() })?;
    let written = Entry::new(Action::PlanCreated, None)
        .id("productSlug", plan.slug.as_str())
        .text("name", Some(&plan.name))
        .value("durationDays", plan.duration_days)
        .value("redemptionsPerCode", plan.redemptions_per_code)
        .value("codeValidityDays", plan.code_validity_days)
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    Ok(Plan {
        slug: plan.slug.to_string(),
        name: plan.name,
        duration_days: plan.duration_days,
        redemptions_per_code: plan.redemptions_per_code,
        code_validity_days: plan.code_validity_days,
        created_utc: now,
    })
}

pub async fn list_plans(store: &Store) -> Result<Vec<Plan>> {
    Ok(sqlx::query_as(
        "SELECT slug, name, duration_days, redemptions_per_code, code_validity_days, created_utc \
         FROM plans ORDER BY slug",
    )
    .fetch_all(store.pool())
    .await?)
}

/// A plan's row id and what a charge needs of it.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub(crate) struct PlanRow {
    pub id: PlanId,
    pub duration_days: Option<i64>,
    pub redemptions_per_code: i64,
    pub code_validity_days: i64,
}

/// Plans remembered by slug, at most [`PLAN_CACHE`] of them (held in the runtime's slot for
/// them).
#[derive(Default)]
struct PlanCache(std::sync::Mutex<std::collections::HashMap<String, PlanRow>>);

/// Plans remembered at most.
const PLAN_CACHE: usize = 1024;

/// The plan named `slug`, from memory when it was found before: a plan row never changes once
/// added (nothing updates or deletes one). An unknown plan is looked up again every time: it
/// may be added later.
pub(crate) async fn cached_plan(store: &Store, slug: &PlanSlug) -> Result<PlanRow> {
    let cache: &PlanCache = store.runtime().plans.get_or_default();
    let lock = || cache.0.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(plan) = lock().get(slug.as_str()) {
        return Ok(*plan);
    }
    let plan = {
        let mut conn = store.pool().acquire().await?;
        find_plan(&mut conn, slug).await?
    };
    let mut plans = lock();
    if plans.len() < PLAN_CACHE {
        plans.insert(slug.as_str().to_owned(), plan);
    }
    Ok(plan)
}

pub(crate) async fn find_plan(conn: &mut AnyConnection, slug: &PlanSlug) -> Result<PlanRow> {
    sqlx::query_as(
        "SELECT id, duration_days, redemptions_per_code, code_validity_days FROM plans WHERE slug = $1",
    )
    .bind(slug.as_str())
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::UnknownPlan)
}

/// Registers a login; registering it again is a no-op. Returns whether it was new.
///
/// Only a registration that adds the login is an entry of the trail (`user.created`).
pub async fn add_user(store: &Store, login: &Login, origin: &Origin) -> Result<bool> {
    let mut tx = store.begin_write().await?;
    let result = sqlx::query(
        "INSERT INTO users (login, created_utc) VALUES ($1, $2) ON CONFLICT (login) DO NOTHING",
    )
    .bind(login.as_str())
    .bind(store.now_utc())
    .execute(&mut *tx)
    .await?;
    if result.rows_affected() != 1 {
        tx.rollback().await?;
        return Ok(false);
    }
    let written = Entry::new(Action::UserCreated, None)
        .id("login", login.as_str())
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    Ok(true)
}

/// A login registered, and whether this call registered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub user: EndUser,
    /// `false` when the login was registered before.
    pub created: bool,
}

/// Registers a login (the product API's `POST /users`): idempotent, and answers with the
/// login's first registration time either way.
pub async fn register_user(store: &Store, login: &Login, origin: &Origin) -> Result<Registration> {
    let created = add_user(store, login, origin).await?;
    let created_utc: i64 = sqlx::query_scalar("SELECT created_utc FROM users WHERE login = $1")
        .bind(login.as_str())
        .fetch_one(store.pool())
        .await?;
    Ok(Registration {
        user: EndUser {
            login: login.to_string(),
            created_utc,
        },
        created,
    })
}

pub(crate) async fn find_user(conn: &mut AnyConnection, login: &Login) -> Result<UserId> {
    sqlx::query_scalar("SELECT id FROM users WHERE login = $1")
        .bind(login.as_str())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(Error::UnknownLogin)
}
