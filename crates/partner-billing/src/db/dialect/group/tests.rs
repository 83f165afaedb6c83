//! The PostgreSQL plans of the group's statements: each table is reached through its index, one
//! probe per element of the group's arrays, never by a scan of the whole table (whose cost
//! would grow with every license issued). Runs when `PARTNER_BILLING_TEST_POSTGRES_URL` is set,
//! on a scratch database of the shared test kit (`partner-billing-testkit`): a unit test, since
//! the statements are the database layer's own, not public.

use sqlx::{Connection, PgConnection};

use super::{POSTGRES, POSTGRES_WRITE};

/// The tables the group reads or updates by key.
const KEYED_TABLES: [&str; 6] = [
    "balances",
    "users",
    "idempotency_records",
    "balance_alerts",
    "webhook_endpoints",
    "subscriptions",
];

/// A few thousand rows in every keyed table, so that a whole-table scan costs what it would
/// in service, and the planner's statistics say so.
const SEED: &str = "
    INSERT INTO plans (slug, name, duration_days, created_utc) VALUES ('pro', 'Pro', 30, 0);
    INSERT INTO accounts (client_id, name, password_hash, created_utc)
        SELECT 'client-' || g, 'Reseller', 'x', 0 FROM generate_series(1, 3000) g;
    INSERT INTO balances (account_id, plan_id, remaining) SELECT id, 1, 1000 FROM accounts;
    INSERT INTO balance_alerts (account_id, plan_id, low_balance_threshold)
        SELECT id, 1, 10 FROM accounts;
    INSERT INTO users (login, created_utc) SELECT 'user-' || g, 0 FROM generate_series(1, 3000) g;
    INSERT INTO subscriptions (user_id, plan_id, until_utc) SELECT id, 1, 100 FROM users;
    INSERT INTO idempotency_records
        (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc)
        SELECT a.id, 'key-' || g, 'issue_license', 'f', 200, '{}', 0
        FROM accounts a, generate_series(1, 3) g;
    INSERT INTO webhook_endpoints (endpoint_id, account_id, url, event_types, sealed_secret, created_utc)
        SELECT 'endpoint-' || id, id, 'https://example.com/hook', 'license.issued', 'x', 0
        FROM accounts;
    ANALYZE;
";

async fn explain(conn: &mut PgConnection, sql: &str, params: &[&str]) -> String {
    let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")));
    for param in params {
        query = query.bind(*param);
    }
    query.fetch_all(&mut *conn).await.unwrap().join("\n")
}

#[tokio::test]
async fn postgres_group_statements_probe_indexes() {
    let Some(url) = partner_billing_testkit::postgres_url() else {
        return;
    };
    let database = partner_billing_testkit::ScratchDatabase::create(&url).await;
    let db = crate::db::Db::connect(&database.url).await.unwrap();
    db.close().await;
    let mut conn = PgConnection::connect(&database.url).await.unwrap();
    sqlx::raw_sql(SEED).execute(&mut conn).await.unwrap();
    // A group of three requests on three accounts, as `licenses/group` binds it.
    let logins = r#"["user-1","user-2","user-3"]"#;
    let keys = r#"[{"account_id":1,"key":"key-1"},{"account_id":2,"key":"new"},{"account_id":3,"key":"key-3"}]"#;
    let rows = r#"[{"account_id":1,"plan_id":1},{"account_id":2,"plan_id":1},{"account_id":3,"plan_id":1}]"#;
    let accounts = "[1,2,3]";
    let chains = r#"[{"login":"user-1","plan":1},{"login":"user-2","plan":1}]"#;
    let balances = r#"[{"account_id":1,"plan_id":1,"before":1000,"after":999},{"account_id":2,"plan_id":1,"before":1000,"after":999},{"account_id":3,"plan_id":1,"before":1000,"after":999}]"#;
    // Generic plans, as a prepared statement gets after its fifth run.
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .unwrap();
    let plans = [
        (
            "read",
            explain(
                &mut conn,
                POSTGRES.first_try.unwrap().read,
                &[logins, keys, rows, accounts, chains],
            )
            .await,
        ),
        (
            "locked read",
            explain(
                &mut conn,
                POSTGRES.read_locked,
                &[logins, keys, rows, accounts, chains],
            )
            .await,
        ),
        ("write", {
            let plan = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
                "EXPLAIN {POSTGRES_WRITE}"
            )))
            .bind(balances)
            .bind("[]")
            .bind("[]")
            .bind("[]")
            .bind("[]")
            .bind(0_i64)
            .bind(3_i64)
            .bind(0_i64)
            .bind(0_i64)
            .bind(0_i64)
            .bind(0_i64)
            .bind(r#"["account:1:new"]"#)
            .bind(r#"[{"user_id":1,"plan_id":1,"existed":true,"before":null,"after":1}]"#)
            .bind(1_i64)
            .fetch_all(&mut conn)
            .await
            .unwrap();
            plan.join("\n")
        }),
    ];
    conn.close().await.unwrap();
    database.drop_database().await;
    for (statement, plan) in &plans {
        for table in KEYED_TABLES {
            assert!(
                !plan.contains(&format!("Seq Scan on {table}")),
                "the group's {statement} scans all of {table}:\n{plan}"
            );
        }
        assert!(
            plan.contains("Index Scan using"),
            "the group's {statement} uses no index:\n{plan}"
        );
    }
}
