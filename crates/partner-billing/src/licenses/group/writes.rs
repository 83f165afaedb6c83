//! The group's set-oriented writes, from the decisions' charges: every balance, ledger entry,
//! license, chain end, event, outbox message and idempotency record, built once by name and
//! written in one statement on PostgreSQL, one per table on SQLite. The SQL text of each
//! backend is the database layer's (`db/dialect/group.rs`); rows cross it as JSON objects.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::AnyConnection;

use super::pending::Pending;
use super::read::GroupRead;
use crate::db::dialect::group::PerTable;
use crate::db::{Tx, json_param};
use crate::error::{Error, Result};
use crate::events::{self, EventData, EventRow, Subscribers};
use crate::idempotency::{KeyBatch, RecordRow};
use crate::plans::PlanRow;
use crate::quota::{BalanceChange, EntryKind, GroupDebit, LedgerRow};
use crate::wire::License;

/// One license the group charges (the decisions' output), with what its writes need.
pub(super) struct Charge {
    pub(super) index: usize,
    pub(super) plan: PlanRow,
    pub(super) user_id: i64,
    pub(super) actor: String,
    pub(super) license: License,
}

/// A license the group writes, by column name.
#[derive(Serialize)]
struct LicenseRow<'a> {
    license_id: &'a str,
    user_id: i64,
    plan_id: i64,
    account_id: i64,
    starts_utc: i64,
    expires_utc: Option<i64>,
}

/// A chain row the group moves: where it ended when read (`existed` false: no row yet), and
/// where it ends after the group's licenses.
#[derive(Debug, Serialize)]
struct ChainWrite {
    user_id: i64,
    plan_id: i64,
    existed: bool,
    before: Option<i64>,
    after: Option<i64>,
}

impl ChainWrite {
    /// One per (user, plan) the charges stack on, in charge order: the last one's end wins.
    fn for_charges(read: &GroupRead, charges: &[Charge]) -> Vec<Self> {
        let mut chains: Vec<Self> = Vec::new();
        for charge in charges {
            let plan_id = charge.plan.id.get();
            let after = charge.license.expires_utc;
            match chains
                .iter_mut()
                .find(|c| c.user_id == charge.user_id && c.plan_id == plan_id)
            {
                Some(chain) => chain.after = after,
                None => {
                    let read_end = read.heads.get(&(charge.user_id, plan_id));
                    chains.push(Self {
                        user_id: charge.user_id,
                        plan_id,
                        existed: read_end.is_some(),
                        before: read_end.copied().flatten(),
                        after,
                    });
                }
            }
        }
        chains.sort_by_key(|c| (c.user_id, c.plan_id));
        chains
    }
}

/// An event the group writes, with the endpoints it is queued for.
#[derive(Serialize)]
pub(super) struct GroupEvent {
    #[serde(flatten)]
    row: EventRow,
    endpoints: Vec<i64>,
}

/// An outbox message SQLite's group writes, by column name.
#[derive(Serialize)]
struct MessageRow {
    event_row_id: i64,
    endpoint_row_id: i64,
}

/// What SQLite's event insert answers for each row.
#[derive(sqlx::FromRow)]
struct InsertedEvent {
    id: i64,
    event_id: String,
}

/// The rows a group writes, built once, by name; one statement on PostgreSQL, one per table
/// on SQLite.
pub(super) struct Writes<'a> {
    balances: Vec<BalanceChange>,
    ledger: Vec<LedgerRow<'a>>,
    licenses: Vec<LicenseRow<'a>>,
    /// The idempotency records of the charged requests.
    records: Vec<RecordRow<'a>>,
    /// The events with an endpoint, in the order a single request records them.
    events: Vec<GroupEvent>,
    /// The advisory lock names of the recorded keys.
    lock_names: Vec<String>,
    /// Where each chain the group stacked on ends now.
    chains: Vec<ChainWrite>,
    now: i64,
}

impl<'a> Writes<'a> {
    pub(super) fn new(
        batch: &[Pending],
        read: &GroupRead,
        remaining: &HashMap<(i64, i64), i64>,
        charges: &'a [Charge],
        keys: &KeyBatch<'a>,
        now: i64,
    ) -> Result<Self> {
        let mut balances: Vec<BalanceChange> = remaining
            .iter()
            .filter_map(|(&(account_id, plan_id), &after)| {
                let before = read.balances.get(&(account_id, plan_id)).copied()?;
                (after != before).then_some(BalanceChange {
                    account_id,
                    plan_id,
                    before,
                    after,
                })
            })
            .collect();
        balances.sort_unstable();
        let ledger = charges
            .iter()
            .map(|c| {
                GroupDebit {
                    account_id: batch[c.index].account.account_id,
                    plan_id: c.plan.id.get(),
                    units: 1,
                    balance_after: c.license.remaining_balance,
                    actor: &c.actor,
                    reference: &c.license.license_id,
                }
                .ledger_row()
            })
            .collect();
        let licenses = charges
            .iter()
            .map(|c| LicenseRow {
                license_id: c.license.license_id.as_str(),
                user_id: c.user_id,
                plan_id: c.plan.id.get(),
                account_id: batch[c.index].account.account_id,
                starts_utc: c.license.starts_utc,
                expires_utc: c.license.expires_utc,
            })
            .collect();
        let records = charges
            .iter()
            .map(|c| keys.record_row(c.index, &c.license))
            .collect::<Result<Vec<_>>>()?;
        let lock_names = keys.lock_names(charges.iter().map(|c| c.index));
        let events = group_events(batch, read, charges, now)?;
        Ok(Self {
            balances,
            ledger,
            licenses,
            records,
            events,
            lock_names,
            chains: ChainWrite::for_charges(read, charges),
            now,
        })
    }

    /// Whether the writes queue any webhook message.
    pub(super) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// SQLite: a statement per table (its statements cost no network round trip), inside the
    /// group's locked transaction.
    pub(super) async fn run_per_table(&self, sql: &PerTable, tx: &mut Tx) -> Result<()> {
        let updated = sqlx::query(sql.balances)
            .bind(json_param(&self.balances)?)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if usize::try_from(updated).ok() != Some(self.balances.len()) {
            return Err(Error::Internal(
                "a locked balance changed under its group transaction".to_owned(),
            ));
        }
        sqlx::query(sql.ledger)
            .bind(json_param(&self.ledger)?)
            .bind(EntryKind::License.as_str())
            .bind(self.now)
            .execute(&mut **tx)
            .await?;
        sqlx::query(sql.licenses)
            .bind(json_param(&self.licenses)?)
            .bind(self.now)
            .execute(&mut **tx)
            .await?;
        sqlx::query(sql.chains)
            .bind(json_param(&self.chains)?)
            .execute(&mut **tx)
            .await?;
        if !self.events.is_empty() {
            let rows: Vec<&EventRow> = self.events.iter().map(|e| &e.row).collect();
            let inserted: Vec<InsertedEvent> = sqlx::query_as(sql.events)
                .bind(json_param(&rows)?)
                .bind(self.now)
                .fetch_all(&mut **tx)
                .await?;
            let row_ids: HashMap<String, i64> =
                inserted.into_iter().map(|e| (e.event_id, e.id)).collect();
            let mut messages = Vec::new();
            for event in &self.events {
                let event_row_id = *row_ids
                    .get(&event.row.event_id)
                    .ok_or_else(|| Error::Internal("an event row went missing".to_owned()))?;
                messages.extend(event.endpoints.iter().map(|&endpoint_row_id| MessageRow {
                    event_row_id,
                    endpoint_row_id,
                }));
            }
            sqlx::query(sql.messages)
                .bind(json_param(&messages)?)
                .bind(self.now)
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query(sql.records)
            .bind(json_param(&self.records)?)
            .bind(self.now)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// PostgreSQL: every write in one statement of data-modifying CTEs (`sql`), one round trip.
    /// The outbox messages reference the events inserted beside them by event id. The
    /// statement checks its own work: unless every balance still held what was read and every
    /// row went in, it fails whole (`group_rows_written`, migration 0009) and this answers
    /// [`Written::Conflict`]; so it may run outside a transaction, committing on its own.
    pub(super) async fn run_one_statement(
        &self,
        sql: &'static str,
        conn: &mut AnyConnection,
    ) -> Result<Written> {
        let messages: usize = self.events.iter().map(|e| e.endpoints.len()).sum();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // `execute`, not `fetch_one`: it returns once the statement has ended (outside a
        // transaction: committed), not as soon as its row arrives.
        let written = sqlx::query(sql)
            .bind(json_param(&self.balances)?)
            .bind(json_param(&self.ledger)?)
            .bind(json_param(&self.licenses)?)
            .bind(json_param(&self.records)?)
            .bind(json_param(&self.events)?)
            .bind(self.now)
            .bind(count(self.balances.len()))
            .bind(count(self.ledger.len()))
            .bind(count(self.licenses.len()))
            .bind(count(self.records.len()))
            .bind(count(messages))
            .bind(json_param(&self.lock_names)?)
            .bind(json_param(&self.chains)?)
            .bind(count(self.chains.len()))
            .execute(&mut *conn)
            .await;
        match written {
            Ok(_) => Ok(Written::All),
            Err(err) if is_write_conflict(&err) => Ok(Written::Conflict),
            Err(err) => Err(err.into()),
        }
    }
}

/// The events of the charges, in the order a single request records them (the balance
/// crossing its low-balance threshold, then the license), each with the account's endpoints
/// subscribed to its type; events without an endpoint are left out.
fn group_events(
    batch: &[Pending],
    read: &GroupRead,
    charges: &[Charge],
    now: i64,
) -> Result<Vec<GroupEvent>> {
    let subscribers = Subscribers::from_rows(
        charges.iter().map(|c| batch[c.index].account.account_id),
        read.endpoints.iter().cloned(),
    );
    let mut events = Vec::new();
    for charge in charges {
        let account_id = batch[charge.index].account.account_id;
        let Some(subscribers) = subscribers.get(&account_id) else {
            continue;
        };
        let license = &charge.license;
        let mut data = Vec::with_capacity(2);
        if subscribers.wants("balance.low") {
            let threshold = read
                .thresholds
                .get(&(account_id, charge.plan.id.get()))
                .copied()
                .unwrap_or(0);
            if events::crosses_low_balance(threshold, 1, license.remaining_balance) {
                data.push(EventData::BalanceLow {
                    product_slug: license.plan_slug.clone(),
                    remaining_balance: license.remaining_balance,
                    threshold,
                });
            }
        }
        data.push(EventData::LicenseIssued {
            license_id: license.license_id.clone(),
            product_slug: license.plan_slug.clone(),
            login: license.login.clone(),
            remaining_balance: license.remaining_balance,
        });
        for data in data {
            let endpoints = subscribers.endpoints_for(&data);
            if !endpoints.is_empty() {
                events.push(GroupEvent {
                    row: events::event_row(account_id, &data, now)?,
                    endpoints,
                });
            }
        }
    }
    Ok(events)
}

/// What the group's PostgreSQL write statement came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// Every row, committed with the statement when it ran outside a transaction.
    All,
    /// Nothing: a balance no longer held what was read, a key already had a record or was
    /// locked by another replica, or two writers deadlocked on their rows.
    Conflict,
}

/// The errors by which the write statement says another writer got there first:
/// `group_rows_written`'s serialization failure, a unique violation, a deadlock.
fn is_write_conflict(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(sqlx::error::DatabaseError::code)
        .is_some_and(|code| matches!(code.as_ref(), "40001" | "23505" | "40P01"))
}
