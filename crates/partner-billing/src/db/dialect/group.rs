//! The statements of a license group transaction (`licenses/group`), on each backend. Every
//! set of rows is one JSON text parameter (sqlx's `Any` driver binds no arrays), an array of
//! objects whose members are named after the columns they fill (the domain's row structs
//! serialise to them), and the read answers one JSON object per row, tagged by `kind`: no
//! column is bound by its position.
//!
//! The parameters of both reads: `$1` the logins (strings), `$2` the keys (`account_id`,
//! `key`), `$3` the balances (`account_id`, `plan_id`), `$4` the accounts (ids), `$5` the
//! chains (`login`, `plan`): where each login's licenses of a plan end (`subscriptions`).

/// How a backend writes a group.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GroupWrite {
    /// One statement of data-modifying CTEs that guards what the decisions assumed and fails
    /// whole otherwise, so it may run outside a transaction (PostgreSQL): [`POSTGRES_WRITE`].
    OneStatement(&'static str),
    /// A statement per table, inside the group's locked transaction (SQLite, whose statements
    /// cost no network round trip): [`PerTable`].
    PerTable(&'static PerTable),
}

/// The statements of a group, as one backend spells them.
#[derive(Debug)]
pub(crate) struct GroupStatements {
    /// The first try without locks, where the backend has one (PostgreSQL).
    pub first_try: Option<FirstTry>,
    /// The read of everything the decisions need, the balance rows locked until the
    /// transaction ends.
    pub read_locked: &'static str,
    pub write: GroupWrite,
}

/// A first try of two statements and no explicit transaction: the read, locking nothing,
/// then the one write statement that guards what the decisions assumed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstTry {
    pub read: &'static str,
    pub write: &'static str,
}

/// SQLite's read; its write lock, taken by `BEGIN IMMEDIATE`, covers every row read.
const SQLITE_READ: &str = "SELECT json_object('kind', 'user', 'id', id, 'login', login) AS item \
     FROM users WHERE login IN (SELECT value FROM json_each($1)) \
     UNION ALL SELECT json_object('kind', 'outcome', 'account_id', r.account_id, \
     'key', r.idempotency_key, 'operation', r.operation, 'fingerprint', r.fingerprint, \
     'response_body', r.response_body) FROM json_each($2) AS j \
     JOIN idempotency_records r ON r.account_id = json_extract(j.value, '$.account_id') \
     AND r.idempotency_key = json_extract(j.value, '$.key') \
     UNION ALL SELECT json_object('kind', 'balance', 'account_id', b.account_id, \
     'plan_id', b.plan_id, 'remaining', b.remaining) FROM json_each($3) AS j \
     JOIN balances b ON b.account_id = json_extract(j.value, '$.account_id') \
     AND b.plan_id = json_extract(j.value, '$.plan_id') \
     UNION ALL SELECT json_object('kind', 'endpoint', 'account_id', account_id, 'id', id, \
     'event_types', event_types) FROM webhook_endpoints \
     WHERE account_id IN (SELECT value FROM json_each($4)) AND status = 'enabled' \
     UNION ALL SELECT json_object('kind', 'threshold', 'account_id', a.account_id, \
     'plan_id', a.plan_id, 'threshold', a.low_balance_threshold) FROM json_each($3) AS j \
     JOIN balance_alerts a ON a.account_id = json_extract(j.value, '$.account_id') \
     AND a.plan_id = json_extract(j.value, '$.plan_id') \
     UNION ALL SELECT json_object('kind', 'chain', 'user_id', s.user_id, 'plan_id', s.plan_id, \
     'until_utc', s.until_utc) FROM json_each($5) AS j \
     JOIN users u ON u.login = json_extract(j.value, '$.login') \
     JOIN subscriptions s ON s.user_id = u.id AND s.plan_id = json_extract(j.value, '$.plan')";

/// PostgreSQL's read, with or without `FOR UPDATE OF b` on the balances. It reads through
/// `small_json_array` (migration 0009) rather than `json_array_elements`: with a small row
/// estimate the planner probes each table's index once per element instead of hashing a scan
/// of the whole table.
macro_rules! postgres_read {
    ($lock:literal, $lock_chains:literal) => {
        concat!(
            "WITH bal AS MATERIALIZED (SELECT b.account_id, b.plan_id, b.remaining \
             FROM small_json_array($3::json) AS j JOIN balances b \
             ON b.account_id = (j->>'account_id')::bigint AND b.plan_id = (j->>'plan_id')::bigint \
             ORDER BY b.account_id, b.plan_id",
            $lock,
            "), chain AS MATERIALIZED (SELECT s.user_id, s.plan_id, s.until_utc \
             FROM small_json_array($5::json) AS j JOIN users u ON u.login = j->>'login' \
             JOIN subscriptions s ON s.user_id = u.id AND s.plan_id = (j->>'plan')::bigint \
             ORDER BY s.user_id, s.plan_id",
            $lock_chains,
            ") SELECT json_build_object('kind', 'user', 'id', u.id, 'login', u.login)::text AS item \
             FROM small_json_array($1::json) AS l JOIN users u ON u.login = l #>> '{}' \
             UNION ALL SELECT json_build_object('kind', 'outcome', 'account_id', r.account_id, \
             'key', r.idempotency_key, 'operation', r.operation, 'fingerprint', r.fingerprint, \
             'response_body', r.response_body)::text FROM small_json_array($2::json) AS j \
             JOIN idempotency_records r ON r.account_id = (j->>'account_id')::bigint \
             AND r.idempotency_key = j->>'key' \
             UNION ALL SELECT json_build_object('kind', 'balance', 'account_id', account_id, \
             'plan_id', plan_id, 'remaining', remaining)::text FROM bal \
             UNION ALL SELECT json_build_object('kind', 'endpoint', 'account_id', e.account_id, \
             'id', e.id, 'event_types', e.event_types)::text \
             FROM small_json_array($4::json) AS j JOIN webhook_endpoints e \
             ON e.account_id = (j #>> '{}')::bigint AND e.status = 'enabled' \
             UNION ALL SELECT json_build_object('kind', 'threshold', 'account_id', a.account_id, \
             'plan_id', a.plan_id, 'threshold', a.low_balance_threshold)::text \
             FROM small_json_array($3::json) AS j JOIN balance_alerts a \
             ON a.account_id = (j->>'account_id')::bigint AND a.plan_id = (j->>'plan_id')::bigint \
             UNION ALL SELECT json_build_object('kind', 'chain', 'user_id', user_id, \
             'plan_id', plan_id, 'until_utc', until_utc)::text FROM chain"
        )
    };
}

/// PostgreSQL's write, one statement of data-modifying CTEs: balances updated only where they
/// still hold what was read ($1: `account_id`, `plan_id`, `before`, `after`), ledger entries
/// ($2: `account_id`, `plan_id`, `delta`, `balance_after`, `actor`, `reference`), licenses ($3:
/// `license_id`, `user_id`, `plan_id`, `account_id`, `expires_utc`), idempotency records ($4:
/// `account_id`, `key`, `operation`, `fingerprint`, `response_body`), events and their outbox
/// messages ($5: `event_id`, `account_id`, `event_type`, `body`, `endpoints`), all at $6; it
/// fails whole unless it wrote $7 balances, $8 entries, $9 licenses, $10 records and $11
/// messages. First it takes the advisory lock of every key it records ($12; already held under
/// the locked way), so a key another replica is working on stops it. The ledger entries wait
/// for the balance updates (and their row locks), so a balance's entries take ids in the order
/// their writers commit. The chains ($13: `user_id`, `plan_id`, `existed`, `before`, `after`)
/// move only where they still end where they were read, or are inserted only where no row has
/// appeared since; unless $14 of them moved, another writer stacked a license on a chain the
/// group decided on, and the statement fails whole.
pub(crate) const POSTGRES_WRITE: &str = "WITH held AS (SELECT coalesce(bool_and( \
     pg_try_advisory_xact_lock(hashtextextended(k, 0))), true) AS ok \
     FROM json_array_elements_text($12::json) AS k), \
     upd AS (UPDATE balances AS b SET remaining = (j->>'after')::bigint \
     FROM small_json_array($1::json) AS j \
     WHERE b.account_id = (j->>'account_id')::bigint AND b.plan_id = (j->>'plan_id')::bigint \
     AND b.remaining = (j->>'before')::bigint AND (SELECT ok FROM held) RETURNING 1), \
     chain_upd AS (UPDATE subscriptions AS s SET until_utc = (j->>'after')::bigint \
     FROM small_json_array($13::json) AS j WHERE (j->>'existed')::boolean \
     AND s.user_id = (j->>'user_id')::bigint AND s.plan_id = (j->>'plan_id')::bigint \
     AND s.until_utc IS NOT DISTINCT FROM (j->>'before')::bigint \
     AND (SELECT count(*) FROM upd) = $7 RETURNING 1), \
     chain_ins AS (INSERT INTO subscriptions (user_id, plan_id, until_utc) \
     SELECT (j->>'user_id')::bigint, (j->>'plan_id')::bigint, (j->>'after')::bigint \
     FROM jsonb_array_elements($13::jsonb) AS j WHERE NOT (j->>'existed')::boolean \
     AND (SELECT count(*) FROM upd) = $7 \
     ON CONFLICT (user_id, plan_id) DO NOTHING RETURNING 1), \
     led AS (INSERT INTO ledger_entries \
     (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
     SELECT (j->>'account_id')::bigint, (j->>'plan_id')::bigint, 'license', (j->>'delta')::bigint, \
     (j->>'balance_after')::bigint, j->>'actor', NULL, j->>'reference', $6 \
     FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS t(j, n) \
     WHERE (SELECT count(*) FROM upd) = $7 ORDER BY t.n RETURNING 1), \
     lic AS (INSERT INTO licenses \
     (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
     SELECT j->>'license_id', (j->>'user_id')::bigint, (j->>'plan_id')::bigint, \
     (j->>'account_id')::bigint, 'direct', $6, (j->>'starts_utc')::bigint, \
     (j->>'expires_utc')::bigint \
     FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY t.n RETURNING 1), \
     rec AS (INSERT INTO idempotency_records \
     (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
     SELECT (j->>'account_id')::bigint, j->>'key', j->>'operation', j->>'fingerprint', 200, \
     j->>'response_body', $6 \
     FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY t.n RETURNING 1), \
     ev AS (INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
     SELECT j->>'event_id', (j->>'account_id')::bigint, j->>'event_type', j->>'body', $6 \
     FROM jsonb_array_elements($5::jsonb) WITH ORDINALITY AS t(j, n) ORDER BY t.n \
     RETURNING id, event_id), \
     msg AS (INSERT INTO webhook_messages \
     (event_row_id, endpoint_row_id, status, attempts, next_attempt_utc) \
     SELECT ev.id, e.endpoint::bigint, 'pending', 0, $6 \
     FROM jsonb_array_elements($5::jsonb) AS j JOIN ev ON ev.event_id = j->>'event_id' \
     CROSS JOIN LATERAL jsonb_array_elements_text(j->'endpoints') WITH ORDINALITY AS e(endpoint, n) \
     ORDER BY ev.id, e.n RETURNING 1) \
     SELECT group_rows_written((SELECT count(*) FROM upd) = $7 \
     AND (SELECT count(*) FROM led) = $8 AND (SELECT count(*) FROM lic) = $9 \
     AND (SELECT count(*) FROM rec) = $10 AND (SELECT count(*) FROM msg) = $11 \
     AND (SELECT count(*) FROM chain_upd) + (SELECT count(*) FROM chain_ins) = $14)";

/// SQLite's group writes, a statement per table, each over a JSON array of named objects in
/// the array's order.
#[derive(Debug)]
pub(crate) struct PerTable {
    /// Every debited balance to its `after`, only where it still holds `before` ($1).
    pub balances: &'static str,
    /// Ledger entries ($1, as PostgreSQL's $2), of kind $2, at $3.
    pub ledger: &'static str,
    /// Direct licenses ($1, as PostgreSQL's $3), at $2.
    pub licenses: &'static str,
    /// Events ($1: `event_id`, `account_id`, `event_type`, `body`) at $2, answering each
    /// row's `id` and `event_id`.
    pub events: &'static str,
    /// Outbox messages ($1: `event_row_id`, `endpoint_row_id`), pending, due at $2.
    pub messages: &'static str,
    /// Idempotency records ($1, as PostgreSQL's $4), status 200, at $2.
    pub records: &'static str,
    /// Where each chain ends now ($1, as PostgreSQL's $13); nothing moved since the read.
    pub chains: &'static str,
}

static SQLITE_PER_TABLE: PerTable = PerTable {
    balances: "UPDATE balances SET remaining = j.after FROM \
         (SELECT json_extract(value, '$.account_id') AS account_id, \
         json_extract(value, '$.plan_id') AS plan_id, json_extract(value, '$.before') AS before, \
         json_extract(value, '$.after') AS after FROM json_each($1)) AS j \
         WHERE balances.account_id = j.account_id AND balances.plan_id = j.plan_id \
         AND balances.remaining = j.before",
    ledger: "INSERT INTO ledger_entries \
         (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
         SELECT json_extract(value, '$.account_id'), json_extract(value, '$.plan_id'), $2, \
         json_extract(value, '$.delta'), json_extract(value, '$.balance_after'), \
         json_extract(value, '$.actor'), NULL, json_extract(value, '$.reference'), $3 \
         FROM json_each($1) ORDER BY key",
    licenses: "INSERT INTO licenses \
         (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
         SELECT json_extract(value, '$.license_id'), json_extract(value, '$.user_id'), \
         json_extract(value, '$.plan_id'), json_extract(value, '$.account_id'), 'direct', $2, \
         json_extract(value, '$.starts_utc'), json_extract(value, '$.expires_utc') \
         FROM json_each($1) ORDER BY key",
    events: "INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
         SELECT json_extract(value, '$.event_id'), json_extract(value, '$.account_id'), \
         json_extract(value, '$.event_type'), json_extract(value, '$.body'), $2 \
         FROM json_each($1) ORDER BY key RETURNING id, event_id",
    messages: "INSERT INTO webhook_messages \
         (event_row_id, endpoint_row_id, status, attempts, next_attempt_utc) \
         SELECT json_extract(value, '$.event_row_id'), json_extract(value, '$.endpoint_row_id'), \
         'pending', 0, $2 FROM json_each($1) ORDER BY key",
    records: "INSERT INTO idempotency_records \
         (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
         SELECT json_extract(value, '$.account_id'), json_extract(value, '$.key'), \
         json_extract(value, '$.operation'), json_extract(value, '$.fingerprint'), 200, \
         json_extract(value, '$.response_body'), $2 FROM json_each($1) ORDER BY key",
    chains: "INSERT INTO subscriptions (user_id, plan_id, until_utc) \
         SELECT json_extract(value, '$.user_id'), json_extract(value, '$.plan_id'), \
         json_extract(value, '$.after') FROM json_each($1) WHERE true \
         ON CONFLICT (user_id, plan_id) DO UPDATE SET until_utc = excluded.until_utc",
};

pub(crate) static SQLITE: GroupStatements = GroupStatements {
    first_try: None,
    read_locked: SQLITE_READ,
    write: GroupWrite::PerTable(&SQLITE_PER_TABLE),
};

pub(crate) static POSTGRES: GroupStatements = GroupStatements {
    first_try: Some(FirstTry {
        read: postgres_read!("", ""),
        write: POSTGRES_WRITE,
    }),
    // Balances first, then chains: the order every license write locks them in.
    read_locked: postgres_read!(" FOR UPDATE OF b", " FOR UPDATE OF s"),
    write: GroupWrite::OneStatement(POSTGRES_WRITE),
};

#[cfg(test)]
mod tests;
