//! The group's one read of everything its decisions need: every login, stored outcome,
//! balance, webhook endpoint, low-balance threshold and subscription chain end, in one
//! statement. The SQL text of each backend is the database layer's (`db/dialect/group.rs`);
//! rows come back by name, as JSON objects tagged by kind.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;

use super::pending::Pending;
use crate::db::json_param;
use crate::error::{Error, Result};
use crate::idempotency::StoredOutcome;

/// What the group reads, in one statement.
#[derive(Default)]
pub(super) struct GroupRead {
    /// User ids by login; unregistered logins are absent.
    pub(super) users: HashMap<String, i64>,
    /// Stored outcomes by (account, key).
    pub(super) outcomes: HashMap<(i64, String), StoredOutcome>,
    /// Balances by (account, plan); a pair without a balance row is absent.
    pub(super) balances: HashMap<(i64, i64), i64>,
    /// Enabled webhook endpoints: (account, endpoint row, event types).
    pub(super) endpoints: Vec<(i64, i64, String)>,
    /// Low-balance thresholds by (account, plan).
    pub(super) thresholds: HashMap<(i64, i64), i64>,
    /// Where each (user, plan) chain of the group ends: `until_utc` of its `subscriptions`
    /// row (NULL: a perpetual license held); a pair without a row is absent.
    pub(super) heads: HashMap<(i64, i64), Option<i64>>,
}

/// One row of the group read: a JSON object tagged by `kind`, members named after columns.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ReadRow {
    User {
        id: i64,
        login: String,
    },
    Outcome {
        account_id: i64,
        key: String,
        operation: String,
        fingerprint: String,
        response_body: String,
    },
    Balance {
        account_id: i64,
        plan_id: i64,
        remaining: i64,
    },
    Endpoint {
        account_id: i64,
        id: i64,
        event_types: String,
    },
    Threshold {
        account_id: i64,
        plan_id: i64,
        threshold: i64,
    },
    Chain {
        user_id: i64,
        plan_id: i64,
        until_utc: Option<i64>,
    },
}

/// A (login, plan) chain the group reads the end of.
#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct ChainParam<'a> {
    login: &'a str,
    plan: i64,
}

/// The read's one column.
#[derive(sqlx::FromRow)]
struct ReadItem {
    item: String,
}

/// A key the group reads the stored outcome of.
#[derive(Serialize)]
struct KeyParam<'a> {
    account_id: i64,
    key: &'a str,
}

/// A balance the group reads.
#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct BalanceParam {
    account_id: i64,
    plan_id: i64,
}

/// Reads, in one statement (`sql`, the dialect's read with or without locks), everything the
/// group's decisions need: the logins' user ids, the keys' stored outcomes, the balances, the
/// accounts' enabled endpoints and low-balance thresholds. Under the locked way on PostgreSQL
/// it follows the statement that took the keys' advisory locks, so its snapshot sees every
/// outcome committed under them.
pub(super) async fn read_group(
    conn: &mut AnyConnection,
    sql: &'static str,
    batch: &[Pending],
) -> Result<GroupRead> {
    let logins: BTreeSet<&str> = batch.iter().map(|p| p.request.login.as_str()).collect();
    let keys: Vec<KeyParam<'_>> = batch
        .iter()
        .map(|p| KeyParam {
            account_id: p.account.account_id,
            key: p.request.idempotency_key.as_str(),
        })
        .collect();
    let balances: BTreeSet<BalanceParam> = batch
        .iter()
        .filter_map(|p| {
            Some(BalanceParam {
                account_id: p.account.account_id,
                plan_id: p.plan?.id.get(),
            })
        })
        .collect();
    let accounts: BTreeSet<i64> = batch.iter().map(|p| p.account.account_id).collect();
    let chains: BTreeSet<ChainParam<'_>> = batch
        .iter()
        .filter_map(|p| {
            Some(ChainParam {
                login: p.request.login.as_str(),
                plan: p.plan?.id.get(),
            })
        })
        .collect();
    let found: Vec<ReadItem> = sqlx::query_as(sql)
        .bind(json_param(&logins)?)
        .bind(json_param(&keys)?)
        .bind(json_param(&balances)?)
        .bind(json_param(&accounts)?)
        .bind(json_param(&chains)?)
        .fetch_all(&mut *conn)
        .await?;
    let mut read = GroupRead::default();
    for ReadItem { item } in found {
        let row: ReadRow = serde_json::from_str(&item)
            .map_err(|e| Error::Internal(format!("a group read row is unreadable: {e}")))?;
        match row {
            ReadRow::User { id, login } => {
                read.users.insert(login, id);
            }
            ReadRow::Outcome {
                account_id,
                key,
                operation,
                fingerprint,
                response_body,
            } => {
                read.outcomes.insert(
                    (account_id, key),
                    StoredOutcome {
                        operation,
                        fingerprint,
                        response_body,
                    },
                );
            }
            ReadRow::Balance {
                account_id,
                plan_id,
                remaining,
            } => {
                read.balances.insert((account_id, plan_id), remaining);
            }
            ReadRow::Endpoint {
                account_id,
                id,
                event_types,
            } => read.endpoints.push((account_id, id, event_types)),
            ReadRow::Threshold {
                account_id,
                plan_id,
                threshold,
            } => {
                read.thresholds.insert((account_id, plan_id), threshold);
            }
            ReadRow::Chain {
                user_id,
                plan_id,
                until_utc,
            } => {
                read.heads.insert((user_id, plan_id), until_utc);
            }
        }
    }
    Ok(read)
}
