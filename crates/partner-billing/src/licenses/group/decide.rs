//! The group's decisions, request by request in arrival order within each balance, from what
//! its one read found: no statement runs here.

use std::collections::{HashMap, HashSet};

use super::pending::Pending;
use super::read::GroupRead;
use super::writes::{Charge, Writes};
use crate::domain::LicenseId;
use crate::error::{Error, Result};
use crate::idempotency::{Fingerprint, KeyBatch, Keyed, KeyedRequest, Scope};
use crate::store::{FaultPoint, Store};
use crate::subscriptions::{Head, next_period};
use crate::wire::License;

/// What one request came to inside the shared transaction, before COMMIT: the key check's
/// outcome with the license a fresh request was charged for, or its refusal.
pub(super) type Step = Result<Keyed<License>>;

/// The decisions on a group: each request's step (`None` for a charge, filled in from
/// `charges`), the charges, and the balances they leave.
pub(super) struct Decided {
    pub(super) now: i64,
    steps: Vec<Option<Step>>,
    pub(super) charges: Vec<Charge>,
    remaining: HashMap<(i64, i64), i64>,
}

impl Decided {
    /// The rows the charges write; the `LicenseWrite` fault fails the whole group here.
    pub(super) fn writes<'a>(
        &'a self,
        store: &Store,
        batch: &'a [Pending],
        read: &GroupRead,
        keys: &KeyBatch<'a>,
    ) -> Result<Writes<'a>> {
        if store.fault(FaultPoint::LicenseWrite) {
            return Err(Error::Internal(
                "fault injection: license write failed".to_owned(),
            ));
        }
        Writes::new(batch, read, &self.remaining, &self.charges, keys, self.now)
    }

    pub(super) fn into_steps(self) -> Result<Vec<Step>> {
        let mut steps = self.steps;
        for charge in self.charges {
            steps[charge.index] = Some(Ok(Keyed::Fresh(charge.license)));
        }
        steps
            .into_iter()
            .map(|step| step.ok_or_else(|| Error::Internal("a request without a step".to_owned())))
            .collect()
    }
}

/// The batch's keyed requests, in batch order.
pub(super) fn keyed_requests<'a>(
    batch: &'a [Pending],
    fingerprints: &'a [Fingerprint],
) -> Vec<KeyedRequest<'a>> {
    batch
        .iter()
        .zip(fingerprints)
        .map(|(p, fingerprint)| KeyedRequest {
            scope: Scope::Account(p.account.account_id),
            key: &p.request.idempotency_key,
            fingerprint,
        })
        .collect()
}

/// The decisions, request by request, in the one order of checks of every keyed write: the
/// key (a replay, a key reused for another request, a key still in progress), then the plan,
/// then the balance and the login (at a balance below the cost the answer is insufficient
/// quota whatever the login, so it never tells whether a login is registered), then the
/// charge: a balance's first N requests in arrival order are charged when it covers them.
pub(super) fn decide(
    store: &Store,
    batch: &[Pending],
    keys: &KeyBatch<'_>,
    read: &GroupRead,
) -> Result<Decided> {
    let now = store.now_utc();
    let mut remaining = read.balances.clone();
    // Where each chain ends, moved on by each license decided: the second request of a group
    // for a login and plan stacks on the first.
    let mut heads: HashMap<(i64, i64), Head> = read
        .heads
        .iter()
        .map(|(&chain, &until)| (chain, Head::from_row(Some(until))))
        .collect();
    let mut steps = Vec::with_capacity(batch.len());
    let mut keys_seen = HashSet::with_capacity(batch.len());
    let mut charges = Vec::new();
    for (index, pending) in batch.iter().enumerate() {
        let account_id = pending.account.account_id;
        let key = pending.request.idempotency_key.as_str();
        // A retry can reach the queue while its original still waits there (the caller that
        // held the key went away): unless a record answers it, it is in progress, and its
        // retry replays the outcome.
        let first_in_group = keys_seen.insert((account_id, key));
        let stored = read.outcomes.get(&(account_id, key.to_owned()));
        match keys.check(index, stored, first_in_group) {
            Ok(Keyed::Fresh(())) => {}
            Ok(Keyed::Replay(body)) => {
                steps.push(Some(Ok(Keyed::Replay(body))));
                continue;
            }
            Err(err) => {
                steps.push(Some(Err(err)));
                continue;
            }
        }
        let Some(plan) = pending.plan else {
            steps.push(Some(Err(Error::UnknownPlan)));
            continue;
        };
        let row = (account_id, plan.id.get());
        let balance = remaining.get(&row).copied().unwrap_or(0);
        if balance < 1 {
            steps.push(Some(Err(Error::InsufficientQuota)));
            continue;
        }
        let Some(&user_id) = read.users.get(pending.request.login.as_str()) else {
            steps.push(Some(Err(Error::UnknownLogin)));
            continue;
        };
        // A perpetual plan held already is refused before the charge; else the license starts
        // where the login's chain of the plan ends.
        let chain = (user_id, plan.id.get());
        let head = heads.get(&chain).copied().unwrap_or(Head::None);
        let period = match next_period(head, plan.duration_days, now) {
            Ok(period) => period,
            Err(err) => {
                steps.push(Some(Err(err)));
                continue;
            }
        };
        heads.insert(chain, period.head());
        remaining.insert(row, balance - 1);
        let license = License {
            license_id: LicenseId::generate().to_string(),
            plan_slug: pending.request.plan.to_string(),
            login: pending.request.login.to_string(),
            remaining_balance: balance - 1,
            created_utc: now,
            starts_utc: period.starts_utc,
            expires_utc: period.expires_utc,
            revoked_utc: None,
        };
        // Filled in from `charges` once their writes have run.
        steps.push(None);
        charges.push(Charge {
            index,
            plan,
            user_id,
            actor: format!("api_key:{}", pending.account.api_key_id),
            license,
        });
    }
    Ok(Decided {
        now,
        steps,
        charges,
        remaining,
    })
}
