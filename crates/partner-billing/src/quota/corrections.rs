//! The operator's corrections of a balance: a credit (a top-up) and an adjustment (either
//! sign, never below zero). With a reference either is idempotent per account and reference:
//! the same correction again changes nothing and answers as the first did (`replayed`); the
//! reference on another correction is refused, nothing changed.
//!
//! Kept apart from the partner write path on purpose: one transaction per command, the
//! reference's unique index (migration 0012) as the only arbiter between concurrent runs.

use serde::Serialize;

use super::ledger::{EntryKind, NewEntry, try_append_entry};
use crate::accounts::account_id_of;
use crate::audit::{Action, Entry, Origin, parse_reason};
use crate::db::{Tx, is_unique_violation};
use crate::domain::{ClientId, InvalidField, PlanId, PlanSlug};
use crate::error::{Error, Result};
use crate::limits::{CREDIT_MAX_UNITS, OPERATOR_REFERENCE_MAX_CHARS};
use crate::plans::find_plan;
use crate::store::Store;

/// One correction as the operator asked for it.
#[derive(Debug, Clone, Copy)]
pub struct Correction<'a> {
    pub client_id: &'a ClientId,
    pub plan: &'a PlanSlug,
    /// Units to add (a credit: 1 to 10^9; an adjustment: non-zero, either sign).
    pub units: i64,
    /// Why, for the ledger and the trail: 1-500 characters, no control characters.
    pub reason: &'a str,
    /// Makes the correction idempotent: 1-128 visible ASCII characters.
    pub reference: Option<&'a str>,
}

/// What a correction did (or, `replayed`, what the first run of its reference did).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Corrected {
    pub product_slug: String,
    /// The balance right after the correction.
    pub remaining_balance: i64,
    /// The reference had been applied before: nothing changed this time.
    pub replayed: bool,
}

/// Credits `units` of a plan to an account (the operator's top-up).
pub async fn credit(
    store: &Store,
    correction: &Correction<'_>,
    origin: &Origin,
) -> Result<Corrected> {
    if !(1..=CREDIT_MAX_UNITS).contains(&correction.units) {
        return Err(InvalidField::new("units", "must be between 1 and 1000000000").into());
    }
    correct(store, EntryKind::Credit, correction, origin).await
}

/// Adds `units` (negative: takes them away) to a balance. A negative adjustment that would take
/// the balance below zero is [`Error::InsufficientQuota`], nothing changed.
pub async fn adjust(
    store: &Store,
    correction: &Correction<'_>,
    origin: &Origin,
) -> Result<Corrected> {
    check_adjustment_units(correction.units)?;
    correct(store, EntryKind::Adjustment, correction, origin).await
}

/// An adjustment's units: not zero, and at most the largest credit either way.
pub fn check_adjustment_units(units: i64) -> std::result::Result<i64, InvalidField> {
    if units == 0 || units.unsigned_abs() > CREDIT_MAX_UNITS.unsigned_abs() {
        return Err(InvalidField::new(
            "units",
            "must be a non-zero whole number between -1000000000 and 1000000000",
        ));
    }
    Ok(units)
}

fn parse_reference(reference: Option<&str>) -> Result<Option<&str>> {
    match reference {
        Some(r)
            if r.is_empty()
                || r.len() > OPERATOR_REFERENCE_MAX_CHARS
                || !r.bytes().all(|b| (0x21..=0x7e).contains(&b)) =>
        {
            Err(InvalidField::new("reference", "must be 1-128 visible ASCII characters").into())
        }
        other => Ok(other),
    }
}

async fn correct(
    store: &Store,
    kind: EntryKind,
    correction: &Correction<'_>,
    origin: &Origin,
) -> Result<Corrected> {
    let reason = parse_reason(correction.reason)?;
    let reference = parse_reference(correction.reference)?;
    let account_id = account_id_of(store, correction.client_id).await?;
    // A concurrent run of the same reference makes the loser's ledger insert a unique
    // violation; its second pass finds the winner's entry and replays it.
    let mut retried = false;
    loop {
        let mut tx = store.begin_write().await?;
        match apply(
            store, &mut tx, kind, account_id, correction, reason, reference, origin,
        )
        .await
        {
            Ok(Applied::Replayed(corrected)) => {
                tx.rollback().await?;
                return Ok(corrected);
            }
            Ok(Applied::Written(corrected, written)) => {
                tx.commit().await?;
                written.committed(store);
                tracing::info!(
                    client_id = %correction.client_id,
                    plan = %correction.plan,
                    units = correction.units,
                    kind = kind.as_str(),
                    "quota corrected"
                );
                return Ok(corrected);
            }
            Err(NotApplied::Conflict) if !retried => retried = true,
            Err(NotApplied::Conflict) => {
                return Err(Error::Internal(
                    "an operator reference kept conflicting".to_owned(),
                ));
            }
            Err(NotApplied::Failed(err)) => return Err(err),
        }
    }
}

/// What one pass of a correction did.
enum Applied {
    Replayed(Corrected),
    Written(Corrected, crate::audit::Written),
}

/// Why one pass of a correction wrote nothing.
enum NotApplied {
    /// Another run of the same reference committed first: look again.
    Conflict,
    Failed(Error),
}

impl From<Error> for NotApplied {
    fn from(err: Error) -> Self {
        Self::Failed(err)
    }
}

impl From<sqlx::Error> for NotApplied {
    fn from(err: sqlx::Error) -> Self {
        Self::Failed(err.into())
    }
}

#[allow(clippy::too_many_arguments)]
async fn apply(
    store: &Store,
    tx: &mut Tx,
    kind: EntryKind,
    account_id: i64,
    correction: &Correction<'_>,
    reason: &str,
    reference: Option<&str>,
    origin: &Origin,
) -> std::result::Result<Applied, NotApplied> {
    let plan = find_plan(&mut *tx, correction.plan).await?;
    let product_slug = correction.plan.to_string();
    if let Some(reference) = reference {
        let earlier: Option<EarlierCorrection> = sqlx::query_as(
            "SELECT kind, plan_id, delta, balance_after FROM ledger_entries \
             WHERE account_id = $1 AND reference = $2 AND kind IN ('credit', 'adjustment')",
        )
        .bind(account_id)
        .bind(reference)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(earlier) = earlier {
            if earlier.kind == kind.as_str()
                && earlier.plan_id == plan.id
                && earlier.delta == correction.units
            {
                return Ok(Applied::Replayed(Corrected {
                    product_slug,
                    remaining_balance: earlier.balance_after,
                    replayed: true,
                }));
            }
            return Err(NotApplied::Failed(
                InvalidField::new(
                    "reference",
                    "was already used for a different credit or adjustment of this account",
                )
                .into(),
            ));
        }
    }
    let remaining: Option<i64> = if correction.units > 0 {
        sqlx::query_scalar(
            "INSERT INTO balances (account_id, plan_id, remaining) VALUES ($1, $2, $3) \
             ON CONFLICT (account_id, plan_id) DO UPDATE \
             SET remaining = balances.remaining + excluded.remaining RETURNING remaining",
        )
        .bind(account_id)
        .bind(plan.id)
        .bind(correction.units)
        .fetch_optional(&mut **tx)
        .await?
    } else {
        // The same conditional update as a debit: under concurrent debits the row lock makes
        // each see the others' results, so the balance never goes below zero.
        sqlx::query_scalar(
            "UPDATE balances SET remaining = remaining - $1 \
             WHERE account_id = $2 AND plan_id = $3 AND remaining >= $1 RETURNING remaining",
        )
        .bind(-correction.units)
        .bind(account_id)
        .bind(plan.id)
        .fetch_optional(&mut **tx)
        .await?
    };
    let remaining = remaining.ok_or(NotApplied::Failed(Error::InsufficientQuota))?;
    let actor = origin.actor().label();
    let entry = NewEntry {
        account_id,
        plan_id: plan.id,
        kind,
        delta: correction.units,
        balance_after: remaining,
        actor: &actor,
        reason: Some(reason),
        reference,
        created_utc: store.now_utc(),
    };
    if let Err(err) = try_append_entry(tx, &entry).await {
        return Err(if is_unique_violation(&err) {
            NotApplied::Conflict
        } else {
            err.into()
        });
    }
    if kind == EntryKind::Credit {
        crate::events::record(
            store,
            tx,
            account_id,
            crate::events::EventData::BalanceCredited {
                product_slug: product_slug.clone(),
                units: correction.units,
                remaining_balance: remaining,
                reason: reason.to_owned(),
            },
        )
        .await?;
    }
    let action = match kind {
        EntryKind::Credit => Action::QuotaCredited,
        _ => Action::QuotaAdjusted,
    };
    let mut audit = Entry::new(action, Some(account_id))
        .id("productSlug", product_slug.clone())
        .value("units", correction.units)
        .value("remainingBalance", remaining)
        .text("reason", Some(reason));
    if let Some(reference) = reference {
        audit = audit.id("reference", reference);
    }
    let written = audit.write(store, tx, origin).await?;
    Ok(Applied::Written(
        Corrected {
            product_slug,
            remaining_balance: remaining,
            replayed: false,
        },
        written,
    ))
}

#[derive(sqlx::FromRow)]
struct EarlierCorrection {
    kind: String,
    plan_id: PlanId,
    delta: i64,
    balance_after: i64,
}
