//! The chain of a login's periods of one plan: where a new license starts, what a revocation
//! gives back, and the row that says where the chain ends.

use crate::error::{Error, Result};
use crate::plans::license_expiry;
use crate::store::Tx;

/// Where a login's subscription to a plan ends, as its `subscriptions` row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// No row: the login never held the plan.
    None,
    /// The latest end among its unrevoked licenses (in the past when all have ended, or when a
    /// revocation left none).
    Until(i64),
    /// It holds an unrevoked license of a perpetual plan.
    Perpetual,
}

impl Head {
    /// The head as read: no row, or the row's `until_utc`.
    pub(crate) fn from_row(row: Option<Option<i64>>) -> Self {
        match row {
            None => Self::None,
            Some(Some(until)) => Self::Until(until),
            Some(None) => Self::Perpetual,
        }
    }
}

/// The period a new license grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Period {
    pub(crate) starts_utc: i64,
    pub(crate) expires_utc: Option<i64>,
}

impl Period {
    /// The head the chain has after this license.
    pub(crate) fn head(&self) -> Head {
        match self.expires_utc {
            Some(until) => Head::Until(until),
            None => Head::Perpetual,
        }
    }
}

/// The period of a new license of a plan of `duration_days` (none: perpetual) for a login whose
/// chain is at `head`: a renewal starts where the latest unexpired license ends, else now. A
/// perpetual plan already held is [`Error::LicenseAlreadyActive`].
pub(crate) fn next_period(head: Head, duration_days: Option<i64>, now: i64) -> Result<Period> {
    let starts_utc = match (duration_days, head) {
        (None, Head::Perpetual) => return Err(Error::LicenseAlreadyActive),
        (Some(_), Head::Until(until)) => until.max(now),
        _ => now,
    };
    Ok(Period {
        starts_utc,
        expires_utc: license_expiry(duration_days, starts_utc),
    })
}

/// What a revocation at `now` takes from a license of `[starts, expires)`: the time it had
/// left, all of it when it had not started, none once it has ended.
pub(crate) fn unused_seconds(starts: i64, expires: i64, now: i64) -> i64 {
    (expires - starts.max(now)).max(0)
}

/// Locks the chain's row of a login and plan until the transaction ends, creating it (as "not
/// held, starts now") when the login never held the plan, and answers where the chain ends.
/// A write of one license takes it before it decides the license's period.
pub(crate) async fn lock_head(tx: &mut Tx, user_id: i64, plan_id: i64, now: i64) -> Result<Head> {
    let until: Option<i64> = sqlx::query_scalar(
        "INSERT INTO subscriptions (user_id, plan_id, until_utc) VALUES ($1, $2, $3) \
         ON CONFLICT (user_id, plan_id) DO UPDATE SET until_utc = subscriptions.until_utc \
         RETURNING until_utc",
    )
    .bind(user_id)
    .bind(plan_id)
    .bind(now)
    .fetch_one(&mut **tx)
    .await?;
    Ok(Head::from_row(Some(until)))
}

/// Records the end of the chain after a new license of `period` (its row locked by
/// [`lock_head`]).
pub(crate) async fn extend_head(
    tx: &mut Tx,
    user_id: i64,
    plan_id: i64,
    period: &Period,
) -> Result<()> {
    sqlx::query("UPDATE subscriptions SET until_utc = $3 WHERE user_id = $1 AND plan_id = $2")
        .bind(user_id)
        .bind(plan_id)
        .bind(period.expires_utc)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Sets the chain's row from the unrevoked licenses left (after a revocation): the latest end,
/// NULL while a perpetual one is held, `now` when none is left.
pub(super) async fn recompute_head(
    tx: &mut Tx,
    user_id: i64,
    plan_id: i64,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO subscriptions (user_id, plan_id, until_utc) \
         SELECT $1, $2, CASE WHEN count(*) = 0 THEN $3 \
         WHEN count(*) > count(expires_utc) THEN NULL ELSE max(expires_utc) END \
         FROM licenses WHERE user_id = $1 AND plan_id = $2 AND revoked_utc IS NULL \
         ON CONFLICT (user_id, plan_id) DO UPDATE SET until_utc = excluded.until_utc",
    )
    .bind(user_id)
    .bind(plan_id)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn a_renewal_starts_where_the_latest_unexpired_license_ends() {
        let now = 1_000 * DAY;
        let first = next_period(Head::None, Some(30), now).unwrap();
        assert_eq!(
            first,
            Period {
                starts_utc: now,
                expires_utc: Some(now + 30 * DAY)
            }
        );
        // Renewed five days early: nothing lost.
        let early = next_period(first.head(), Some(30), now + 25 * DAY).unwrap();
        assert_eq!(early.starts_utc, now + 30 * DAY);
        assert_eq!(early.expires_utc, Some(now + 60 * DAY));
        // After the end, a new license starts now.
        let late = next_period(Head::Until(now - DAY), Some(30), now).unwrap();
        assert_eq!(late.starts_utc, now);
    }

    #[test]
    fn a_perpetual_plan_is_held_once() {
        let held = next_period(Head::None, None, 10).unwrap();
        assert_eq!(
            held,
            Period {
                starts_utc: 10,
                expires_utc: None
            }
        );
        assert!(matches!(
            next_period(held.head(), None, 20),
            Err(Error::LicenseAlreadyActive)
        ));
        // Revoked (the row holds the revocation time): held again from now.
        assert_eq!(
            next_period(Head::Until(15), None, 20).unwrap().starts_utc,
            20
        );
    }

    #[test]
    fn revocation_takes_the_unused_time() {
        assert_eq!(unused_seconds(0, 30, 10), 20, "running: what is left");
        assert_eq!(unused_seconds(30, 60, 10), 30, "not started: all of it");
        assert_eq!(unused_seconds(0, 30, 40), 0, "ended: nothing");
    }
}
