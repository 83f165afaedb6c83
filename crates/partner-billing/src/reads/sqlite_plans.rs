//! The SQLite plans of the account's lists: every page is one seek on the index that serves its
//! order (the account's, or the filter's: (account, user, id), (account, plan, id)) with the
//! cursor's bound in the seek, and no sort. SQLite plans by rules, so its `EXPLAIN QUERY PLAN`
//! is what every database of that schema does, whatever its size. A bound the seek does not
//! take (SQLite takes only the first column of a row value: `(user_id, id) < (?, ?)` seeks to
//! the user and then steps over all their licenses down to the cursor) makes a deep page cost
//! what the pages before it did together. The operator's ledger export, read in chunks, the
//! promo batches, the audit trail's pages (the reseller's and the operator's) and an endpoint's
//! deliveries too.
//! PostgreSQL, whose plans turn on statistics, is checked from outside by the e2e
//! `hot_path_plans`.

use crate::activity;
use crate::db::Backend;
use crate::db::Db;
use crate::db::dialect::PerBackend;

/// The plan of `sql`, one line per step, bound with as many zeros as it has parameters.
async fn plan(db: &Db, sql: &str) -> String {
    let parameters = (1..=9)
        .take_while(|n| sql.contains(&format!("${n}")))
        .count();
    let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {sql}"
    )));
    for _ in 0..parameters {
        query = query.bind(0_i64);
    }
    let steps = query.fetch_all(db.pool()).await.expect("query plan");
    steps
        .into_iter()
        .map(|(_, _, _, detail)| detail)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sql` reads `table` (its alias) by the index `seek` (the index's name and the terms it
/// seeks by, as the plan shows them), with no sort.
async fn assert_seeks(db: &Db, name: &str, sql: &str, table: &str, seek: &str) {
    let plan = plan(db, sql).await;
    let step = plan
        .lines()
        .find(|line| line.starts_with(&format!("SEARCH {table} ")))
        .unwrap_or_else(|| panic!("{name}: no search of {table}:\n{plan}"));
    assert!(
        step.ends_with(&format!("INDEX {seek}")),
        "{name}: not a seek on {seek}:\n{plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "{name}: sorted:\n{plan}");
}

fn sqlite(sql: &'static PerBackend) -> &'static str {
    sql.get(Backend::Sqlite)
}

#[tokio::test]
async fn every_list_page_is_one_seek_to_its_cursor() {
    let dir = partner_billing_testkit::TempDir::new();
    let url = format!("sqlite://{}?mode=rwc", dir.path.join("t.db").display());
    let db = Db::connect(&url).await.expect("database");
    let lists = [
        (
            "every license",
            sqlite(&super::LICENSES_SQL),
            "l",
            "licenses_account_id (account_id=? AND id<?)",
        ),
        (
            "one login's licenses",
            sqlite(&super::LICENSES_OF_LOGIN_SQL),
            "l",
            "licenses_account_user_id (account_id=? AND user_id=? AND id<?)",
        ),
        (
            "one plan's licenses",
            sqlite(&super::LICENSES_OF_PLAN_SQL),
            "l",
            "licenses_account_plan_id (account_id=? AND plan_id=? AND id<?)",
        ),
        (
            // A login has a few licenses, a plan may have millions.
            "one login's licenses of one plan",
            sqlite(&super::LICENSES_OF_LOGIN_AND_PLAN_SQL),
            "l",
            "licenses_account_user_id (account_id=? AND user_id=? AND id<?)",
        ),
        (
            "the ledger feed",
            sqlite(&super::LEDGER_SQL),
            "l",
            "ledger_entries_account_id (account_id=? AND id>?)",
        ),
        (
            "one product's ledger feed",
            sqlite(&super::LEDGER_OF_PRODUCT_SQL),
            "l",
            "ledger_entries_account_plan (account_id=? AND plan_id=? AND rowid>?)",
        ),
        (
            "the operator's ledger export",
            sqlite(&crate::quota::LEDGER_CHUNK_SQL),
            "l",
            "ledger_entries_account_id (account_id=? AND id>?)",
        ),
        (
            "the operator's ledger export of one product",
            sqlite(&crate::quota::LEDGER_OF_PLAN_CHUNK_SQL),
            "l",
            "ledger_entries_account_plan (account_id=? AND plan_id=? AND rowid>?)",
        ),
        (
            "the promo batches",
            sqlite(&super::PROMO_BATCHES_SQL),
            "b",
            "promo_batches_account (account_id=? AND rowid<?)",
        ),
        (
            "an account's audit trail",
            sqlite(&crate::audit_log::ACCOUNT_PAGE),
            "e",
            "audit_entries_account_time (account_id=? AND created_utc<?)",
        ),
        (
            "the operator's log of one account",
            sqlite(&crate::audit_log::OPERATOR_ACCOUNT_PAGE),
            "e",
            "audit_entries_account_time (account_id=? AND created_utc>? AND created_utc<?)",
        ),
        (
            "the operator's log",
            sqlite(&crate::audit_log::OPERATOR_PAGE),
            "e",
            "audit_entries_time (created_utc>? AND created_utc<?)",
        ),
        (
            "an endpoint's deliveries",
            sqlite(&crate::webhooks::DELIVERIES_SQL),
            "a",
            "webhook_attempts_endpoint_time (endpoint_row_id=?)",
        ),
    ];
    for (name, sql, table, seek) in lists {
        assert_seeks(&db, name, sql, table, seek).await;
    }
    for (name, sql, table, seek) in activity::panel_lists(Backend::Sqlite) {
        assert_seeks(&db, &name, &sql, table, &seek).await;
    }
    db.close().await;
}
