//! The group transaction's statements: the one read of everything its decisions need, and
//! the set-oriented writes (one statement on PostgreSQL, one per table on SQLite).

use std::collections::{BTreeSet, HashMap};

use sqlx::AnyConnection;

use crate::db::{Backend, Tx, json_param};
use crate::error::{Error, Result};
use crate::events::{self, EventData, Subscribers};
use crate::idempotency::{self, GroupKeyedRequest};
use crate::quota::{self, EntryKind, GroupDebit};
use crate::store::Store;

use super::{Charge, Pending};

/// What the group reads, in one statement, once its keys are locked.
#[derive(Default)]
pub(super) struct GroupRead {
    /// User ids by login; unregistered logins are absent.
    pub(super) users: HashMap<String, i64>,
    /// Stored outcomes by (account, key).
    pub(super) outcomes: HashMap<(i64, String), idempotency::StoredOutcome>,
    /// Balances by (account, plan), locked; a pair without a balance row is absent.
    pub(super) balances: HashMap<(i64, i64), i64>,
    /// Enabled webhook endpoints: (account, endpoint row, event types).
    pub(super) endpoints: Vec<(i64, i64, String)>,
    /// Low-balance thresholds by (account, plan).
    pub(super) thresholds: HashMap<(i64, i64), i64>,
    /// Where each (user, plan) chain of the group ends: `until_utc` of its `subscriptions`
    /// row (NULL: a perpetual license held); a pair without a row is absent.
    pub(super) heads: HashMap<(i64, i64), Option<i64>>,
}

/// One (login, plan) pair of the group, for the read of its chain row.
#[derive(serde::Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct ChainKey<'a> {
    login: &'a str,
    plan: i64,
}

/// How the group's read treats the balance rows it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lock {
    /// Read as they are: the write guards them (PostgreSQL's first try).
    None,
    /// Locked until the transaction ends, in (account, plan) order (PostgreSQL); SQLite's write
    /// lock covers them either way.
    ForUpdate,
}

/// The PostgreSQL read with or without `FOR UPDATE OF b` on the balances. It reads through
/// `small_json_array` (migration 0009) rather than `json_array_elements`: with a small row
/// estimate the planner probes each table's index once per element instead of hashing a scan
/// of the whole table.
macro_rules! postgres_group_read {
    ($lock:literal, $lock_chains:literal) => {
        concat!(
            "WITH bal AS MATERIALIZED (SELECT b.account_id, b.plan_id, b.remaining \
             FROM small_json_array($3::json) AS j JOIN balances b \
             ON b.account_id = (j->>0)::bigint AND b.plan_id = (j->>1)::bigint \
             ORDER BY b.account_id, b.plan_id",
            $lock,
            "), chain AS MATERIALIZED (SELECT s.user_id, s.plan_id, s.until_utc \
             FROM small_json_array($5::json) AS j JOIN users u ON u.login = j->>'login' \
             JOIN subscriptions s ON s.user_id = u.id AND s.plan_id = (j->>'plan')::bigint \
             ORDER BY s.user_id, s.plan_id",
            $lock_chains,
            ") SELECT 'u' AS kind, u.id AS a, NULL::bigint AS b, NULL::bigint AS c, u.login AS s, \
             NULL::text AS t, NULL::text AS v, NULL::text AS w \
             FROM small_json_array($1::json) AS l JOIN users u ON u.login = l #>> '{}' \
             UNION ALL SELECT 'i', r.account_id, NULL, NULL, r.idempotency_key, r.operation, \
             r.fingerprint, r.response_body FROM small_json_array($2::json) AS j \
             JOIN idempotency_records r ON r.account_id = (j->>0)::bigint AND r.idempotency_key = j->>1 \
             UNION ALL SELECT 'b', account_id, plan_id, remaining, NULL, NULL, NULL, NULL FROM bal \
             UNION ALL SELECT 'e', e.account_id, e.id, NULL, e.event_types, NULL, NULL, NULL \
             FROM small_json_array($4::json) AS j JOIN webhook_endpoints e \
             ON e.account_id = (j #>> '{}')::bigint AND e.status = 'enabled' \
             UNION ALL SELECT 't', a.account_id, a.plan_id, a.low_balance_threshold, NULL, NULL, NULL, NULL \
             FROM small_json_array($3::json) AS j JOIN balance_alerts a \
             ON a.account_id = (j->>0)::bigint AND a.plan_id = (j->>1)::bigint \
             UNION ALL SELECT 's', user_id, plan_id, until_utc, NULL, NULL, NULL, NULL FROM chain"
        )
    };
}

/// Reads, in one statement, everything the group's decisions need: the logins' user ids, the
/// keys' stored outcomes, the balances, the accounts' enabled endpoints and low-balance
/// thresholds. Under [`Lock::ForUpdate`] on PostgreSQL it follows the statement that took the
/// keys' advisory locks, so its snapshot sees every outcome committed under them.
pub(super) async fn read_group(
    store: &Store,
    conn: &mut AnyConnection,
    batch: &[Pending],
    lock: Lock,
) -> Result<GroupRead> {
    let logins: BTreeSet<&str> = batch.iter().map(|p| p.request.login.as_str()).collect();
    let keys: Vec<(i64, &str)> = batch
        .iter()
        .map(|p| (p.account.account_id, p.request.idempotency_key.as_str()))
        .collect();
    let rows: BTreeSet<(i64, i64)> = batch
        .iter()
        .map(|p| (p.account.account_id, p.plan.id.get()))
        .collect();
    let accounts: BTreeSet<i64> = batch.iter().map(|p| p.account.account_id).collect();
    let chains: BTreeSet<ChainKey<'_>> = batch
        .iter()
        .map(|p| ChainKey {
            login: p.request.login.as_str(),
            plan: p.plan.id.get(),
        })
        .collect();
    let sql = match (store.backend(), lock) {
        (Backend::Sqlite, _) => {
            "SELECT 'u' AS kind, id AS a, NULL AS b, NULL AS c, login AS s, NULL AS t, NULL AS v, \
             NULL AS w FROM users WHERE login IN (SELECT value FROM json_each($1)) \
             UNION ALL SELECT 'i', r.account_id, NULL, NULL, r.idempotency_key, r.operation, \
             r.fingerprint, r.response_body FROM json_each($2) AS j \
             JOIN idempotency_records r ON r.account_id = json_extract(j.value, '$[0]') \
             AND r.idempotency_key = json_extract(j.value, '$[1]') \
             UNION ALL SELECT 'b', b.account_id, b.plan_id, b.remaining, NULL, NULL, NULL, NULL \
             FROM json_each($3) AS j JOIN balances b ON b.account_id = json_extract(j.value, '$[0]') \
             AND b.plan_id = json_extract(j.value, '$[1]') \
             UNION ALL SELECT 'e', account_id, id, NULL, event_types, NULL, NULL, NULL FROM webhook_endpoints \
             WHERE account_id IN (SELECT value FROM json_each($4)) AND status = 'enabled' \
             UNION ALL SELECT 't', a.account_id, a.plan_id, a.low_balance_threshold, NULL, NULL, NULL, NULL \
             FROM json_each($3) AS j JOIN balance_alerts a ON a.account_id = json_extract(j.value, '$[0]') \
             AND a.plan_id = json_extract(j.value, '$[1]') \
             UNION ALL SELECT 's', s.user_id, s.plan_id, s.until_utc, NULL, NULL, NULL, NULL \
             FROM json_each($5) AS j JOIN users u ON u.login = json_extract(j.value, '$.login') \
             JOIN subscriptions s ON s.user_id = u.id AND s.plan_id = json_extract(j.value, '$.plan')"
        }
        (Backend::Postgres, Lock::None) => postgres_group_read!("", ""),
        // Balances first, then chains: the order every license write locks them in.
        (Backend::Postgres, Lock::ForUpdate) => {
            postgres_group_read!(" FOR UPDATE OF b", " FOR UPDATE OF s")
        }
    };
    type Row = (
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let found: Vec<Row> = sqlx::query_as(sql)
        .bind(json_param(&logins)?)
        .bind(json_param(&keys)?)
        .bind(json_param(&rows)?)
        .bind(json_param(&accounts)?)
        .bind(json_param(&chains)?)
        .fetch_all(&mut *conn)
        .await?;
    let missing = || Error::Internal("a group read row is incomplete".to_owned());
    let mut read = GroupRead::default();
    for (kind, a, b, c, s, t, v, w) in found {
        match kind.as_str() {
            "u" => {
                read.users.insert(s.ok_or_else(missing)?, a);
            }
            "i" => {
                read.outcomes.insert(
                    (a, s.ok_or_else(missing)?),
                    (
                        t.ok_or_else(missing)?,
                        v.ok_or_else(missing)?,
                        w.ok_or_else(missing)?,
                    ),
                );
            }
            "b" => {
                read.balances
                    .insert((a, b.ok_or_else(missing)?), c.ok_or_else(missing)?);
            }
            "e" => read
                .endpoints
                .push((a, b.ok_or_else(missing)?, s.ok_or_else(missing)?)),
            "t" => {
                read.thresholds
                    .insert((a, b.ok_or_else(missing)?), c.ok_or_else(missing)?);
            }
            "s" => {
                read.heads.insert((a, b.ok_or_else(missing)?), c);
            }
            _ => return Err(Error::Internal("a group read row of no kind".to_owned())),
        }
    }
    Ok(read)
}

/// The group's writes on PostgreSQL, one statement of data-modifying CTEs: balances updated
/// only where they still hold what was read ($1), ledger entries ($2), licenses ($3),
/// idempotency records ($4), events and their outbox messages ($5), all at $6; it fails whole
/// unless it wrote $7 balances, $8 entries, $9 licenses, $10 records and $11 messages. First
/// it takes the advisory lock of every key it records ($12; already held under the locked
/// path), so a key another replica is working on stops it. The ledger entries wait for the
/// balance updates (and their row locks), so a balance's entries take ids in the order their
/// writers commit. The chains' rows ($13) are moved only where they still end where they
/// were read to, or inserted only where no row has appeared since; with $14 of them moved or
/// inserted, no other writer has stacked a license on a chain the group decided on.
const POSTGRES_GROUP_WRITE: &str = "WITH held AS (SELECT coalesce(bool_and( \
     pg_try_advisory_xact_lock(hashtextextended(k, 0))), true) AS ok \
     FROM json_array_elements_text($12::json) AS k), \
     upd AS (UPDATE balances AS b SET remaining = (j->>3)::bigint \
     FROM small_json_array($1::json) AS j \
     WHERE b.account_id = (j->>0)::bigint AND b.plan_id = (j->>1)::bigint \
     AND b.remaining = (j->>2)::bigint AND (SELECT ok FROM held) RETURNING 1), \
     chain_upd AS (UPDATE subscriptions AS s SET until_utc = (j->>'after')::bigint \
     FROM small_json_array($13::json) AS j WHERE (j->>'existed')::boolean \
     AND s.user_id = (j->>'user_id')::bigint AND s.plan_id = (j->>'plan_id')::bigint \
     AND s.until_utc IS NOT DISTINCT FROM (j->>'before')::bigint \
     AND (SELECT count(*) FROM upd) = $7 RETURNING 1), \
     chain_ins AS (INSERT INTO subscriptions (user_id, plan_id, until_utc) \
     SELECT (j->>'user_id')::bigint, (j->>'plan_id')::bigint, (j->>'after')::bigint \
     FROM json_array_elements($13::json) AS j WHERE NOT (j->>'existed')::boolean \
     AND (SELECT count(*) FROM upd) = $7 \
     ON CONFLICT (user_id, plan_id) DO NOTHING RETURNING 1), \
     led AS (INSERT INTO ledger_entries \
     (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
     SELECT (j->>0)::bigint, (j->>1)::bigint, 'license', (j->>2)::bigint, (j->>3)::bigint, \
     j->>4, NULL, j->>5, $6 FROM json_array_elements($2::json) WITH ORDINALITY AS t(j, n) \
     WHERE (SELECT count(*) FROM upd) = $7 ORDER BY t.n RETURNING 1), \
     lic AS (INSERT INTO licenses \
     (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
     SELECT j->>'license_id', (j->>'user_id')::bigint, (j->>'plan_id')::bigint, \
     (j->>'account_id')::bigint, 'direct', $6, (j->>'starts_utc')::bigint, \
     (j->>'expires_utc')::bigint FROM json_array_elements($3::json) WITH ORDINALITY AS t(j, n) \
     ORDER BY t.n RETURNING 1), \
     rec AS (INSERT INTO idempotency_records \
     (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
     SELECT (j->>0)::bigint, j->>1, j->>2, j->>3, 200, j->>4, $6 \
     FROM json_array_elements($4::json) WITH ORDINALITY AS t(j, n) ORDER BY t.n RETURNING 1), \
     ev AS (INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
     SELECT j->>0, (j->>1)::bigint, j->>2, j->>3, $6 \
     FROM json_array_elements($5::json) WITH ORDINALITY AS t(j, n) ORDER BY t.n \
     RETURNING id, event_id), \
     msg AS (INSERT INTO webhook_messages \
     (event_row_id, endpoint_row_id, status, attempts, next_attempt_utc) \
     SELECT ev.id, e.endpoint::bigint, 'pending', 0, $6 \
     FROM json_array_elements($5::json) AS j JOIN ev ON ev.event_id = j->>0 \
     CROSS JOIN LATERAL json_array_elements_text(j->4) WITH ORDINALITY AS e(endpoint, n) \
     ORDER BY ev.id, e.n RETURNING 1) \
     SELECT group_rows_written((SELECT count(*) FROM upd) = $7 \
     AND (SELECT count(*) FROM led) = $8 AND (SELECT count(*) FROM lic) = $9 \
     AND (SELECT count(*) FROM rec) = $10 AND (SELECT count(*) FROM msg) = $11 \
     AND (SELECT count(*) FROM chain_upd) + (SELECT count(*) FROM chain_ins) = $14)";

/// The rows a group writes, built once; one statement on PostgreSQL, one per table on SQLite.
pub(super) struct Writes<'a> {
    /// (account, plan, before, after) of every debited balance.
    balances: Vec<(i64, i64, i64, i64)>,
    debits: Vec<GroupDebit<'a>>,
    /// (account, key, operation, fingerprint, response body).
    records: Vec<(i64, &'a str, &'static str, &'a str, String)>,
    /// (account, event, endpoints), in the order the one-request path records them.
    pub(super) events: Vec<(i64, EventData, Vec<i64>)>,
    /// The advisory lock names of the recorded keys.
    lock_names: Vec<String>,
    /// Where each chain the group stacked on ends now.
    chains: Vec<ChainWrite>,
}

/// A chain row the group moves: where it ended when read (`existed` false: no row yet), and
/// where it ends after the group's licenses.
#[derive(Debug, serde::Serialize)]
struct ChainWrite {
    user_id: i64,
    plan_id: i64,
    existed: bool,
    before: Option<i64>,
    after: Option<i64>,
}

impl ChainWrite {
    /// One per (user, plan) the charges stack on, in charge order: the last one's end wins.
    fn for_charges(batch: &[Pending], read: &GroupRead, charges: &[Charge]) -> Vec<Self> {
        let mut chains: Vec<Self> = Vec::new();
        for charge in charges {
            let plan_id = batch[charge.index].plan.id.get();
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

impl<'a> Writes<'a> {
    pub(super) fn new(
        batch: &[Pending],
        read: &GroupRead,
        remaining: &HashMap<(i64, i64), i64>,
        charges: &'a [Charge],
        keyed: &[GroupKeyedRequest<'a>],
    ) -> Result<Self> {
        let mut balances: Vec<(i64, i64, i64, i64)> = remaining
            .iter()
            .filter_map(|(&(account_id, plan_id), &after)| {
                let before = read.balances.get(&(account_id, plan_id)).copied()?;
                (after != before).then_some((account_id, plan_id, before, after))
            })
            .collect();
        balances.sort_unstable();
        let debits = charges
            .iter()
            .map(|c| GroupDebit {
                account_id: batch[c.index].account.account_id,
                plan_id: batch[c.index].plan.id.get(),
                units: 1,
                balance_after: c.license.remaining_balance,
                actor: &c.actor,
                reference: &c.license.license_id,
            })
            .collect();
        let records = charges
            .iter()
            .map(|c| idempotency::record_row(&keyed[c.index], &c.license))
            .collect::<Result<Vec<_>>>()?;
        let lock_names = idempotency::lock_names(charges.iter().map(|c| &keyed[c.index]));
        let subscribers = Subscribers::from_rows(
            charges.iter().map(|c| batch[c.index].account.account_id),
            read.endpoints.iter().cloned(),
        );
        let mut events = Vec::new();
        for charge in charges {
            let pending = &batch[charge.index];
            let account_id = pending.account.account_id;
            let Some(subscribers) = subscribers.get(&account_id) else {
                continue;
            };
            let license = &charge.license;
            // `Subscribers::after_debit`, then the license's own event.
            if subscribers.wants("balance.low") {
                let threshold = read
                    .thresholds
                    .get(&(account_id, pending.plan.id.get()))
                    .copied()
                    .unwrap_or(0);
                if events::crosses_low_balance(threshold, 1, license.remaining_balance) {
                    let data = EventData::BalanceLow {
                        product_slug: license.plan_slug.clone(),
                        remaining_balance: license.remaining_balance,
                        threshold,
                    };
                    let endpoints = subscribers.endpoints_for(&data);
                    events.push((account_id, data, endpoints));
                }
            }
            let data = EventData::LicenseIssued {
                license_id: license.license_id.clone(),
                product_slug: license.plan_slug.clone(),
                login: license.login.clone(),
                remaining_balance: license.remaining_balance,
            };
            let endpoints = subscribers.endpoints_for(&data);
            events.push((account_id, data, endpoints));
        }
        events.retain(|(_, _, endpoints)| !endpoints.is_empty());
        Ok(Self {
            balances,
            debits,
            records,
            events,
            lock_names,
            chains: ChainWrite::for_charges(batch, read, charges),
        })
    }

    /// SQLite: a statement per table (its statements cost no network round trip).
    pub(super) async fn run_sqlite(
        &self,
        store: &Store,
        tx: &mut Tx,
        batch: &[Pending],
        charges: &[Charge],
        now: i64,
    ) -> Result<()> {
        quota::debit_many(tx, &self.balances, &self.debits, EntryKind::License, now).await?;
        insert_licenses(tx, batch, charges, now).await?;
        // Under SQLite's one write lock nothing moved since the read.
        sqlx::query(
            "INSERT INTO subscriptions (user_id, plan_id, until_utc) \
             SELECT json_extract(value, '$.user_id'), json_extract(value, '$.plan_id'), \
             json_extract(value, '$.after') FROM json_each($1) WHERE true \
             ON CONFLICT (user_id, plan_id) DO UPDATE SET until_utc = excluded.until_utc",
        )
        .bind(json_param(&self.chains)?)
        .execute(&mut **tx)
        .await?;
        events::insert_events(store, tx, &self.events).await?;
        idempotency::record_many(tx, &self.records, now).await
    }

    /// PostgreSQL: every write in one statement of data-modifying CTEs, one round trip. The
    /// outbox messages reference the events inserted beside them by event id. The statement
    /// checks its own work: unless every balance still held what was read and every row went
    /// in, it fails whole (`group_rows_written`, migration 0009) and this answers
    /// [`Written::Conflict`]; so it may run outside a transaction, committing on its own.
    pub(super) async fn run_postgres(
        &self,
        conn: &mut AnyConnection,
        batch: &[Pending],
        charges: &[Charge],
        now: i64,
    ) -> Result<Written> {
        let entries: Vec<_> = self.debits.iter().map(GroupDebit::ledger_row).collect();
        let events = self
            .events
            .iter()
            .map(|(account_id, data, endpoints)| {
                let (event_id, account_id, event_type, body) =
                    events::event_row(*account_id, data, now)?;
                Ok((event_id, account_id, event_type, body, endpoints))
            })
            .collect::<Result<Vec<_>>>()?;
        let messages: usize = self.events.iter().map(|(_, _, e)| e.len()).sum();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        // `execute`, not `fetch_one`: it returns once the statement has ended (outside a
        // transaction: committed), not as soon as its row arrives.
        let written = sqlx::query(POSTGRES_GROUP_WRITE)
            .bind(json_param(&self.balances)?)
            .bind(json_param(&entries)?)
            .bind(json_param(&license_rows(batch, charges))?)
            .bind(json_param(&self.records)?)
            .bind(json_param(&events)?)
            .bind(now)
            .bind(count(self.balances.len()))
            .bind(count(self.debits.len()))
            .bind(count(charges.len()))
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

/// Every charged license, in one statement (SQLite's group).
async fn insert_licenses(
    tx: &mut Tx,
    batch: &[Pending],
    charges: &[Charge],
    now: i64,
) -> Result<()> {
    let rows = license_rows(batch, charges);
    let sql = "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
             SELECT json_extract(value, '$.license_id'), json_extract(value, '$.user_id'), \
             json_extract(value, '$.plan_id'), json_extract(value, '$.account_id'), 'direct', $2, \
             json_extract(value, '$.starts_utc'), json_extract(value, '$.expires_utc') \
             FROM json_each($1) ORDER BY key";
    sqlx::query(sql)
        .bind(json_param(&rows)?)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// One license row the group inserts, by name.
#[derive(serde::Serialize)]
struct LicenseRow<'a> {
    license_id: &'a str,
    user_id: i64,
    plan_id: i64,
    account_id: i64,
    starts_utc: i64,
    expires_utc: Option<i64>,
}

/// The licenses' rows, in charge order.
fn license_rows<'a>(batch: &[Pending], charges: &'a [Charge]) -> Vec<LicenseRow<'a>> {
    charges
        .iter()
        .map(|c| {
            let pending = &batch[c.index];
            LicenseRow {
                license_id: c.license.license_id.as_str(),
                user_id: c.user_id,
                plan_id: pending.plan.id.get(),
                account_id: pending.account.account_id,
                starts_utc: c.license.starts_utc,
                expires_utc: c.license.expires_utc,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
