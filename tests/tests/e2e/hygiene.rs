//! After a scenario: balances equal their ledgers, and neither the database nor the debug log
//! holds a secret, token or password in clear.

use partner_billing_client::{Credentials, PanelClient, PartnerClient};
use partner_billing_tests::{Db, TestApp, both_databases, logs};
use sqlx::{AssertSqlSafe, Row};

both_databases!(no_secret_in_database_or_log);

/// Every text value of every table, as one string.
async fn dump(app: &TestApp) -> String {
    let tables = [
        "plans",
        "users",
        "accounts",
        "api_keys",
        "panel_sessions",
        "balances",
        "ledger_entries",
        "licenses",
        "idempotency_records",
    ];
    let mut out = String::new();
    for table in tables {
        let rows = sqlx::query(AssertSqlSafe(format!("SELECT * FROM {table}")))
            .fetch_all(app.store.pool())
            .await
            .unwrap();
        for row in rows {
            for i in 0..row.len() {
                if let Ok(Some(text)) = row.try_get::<Option<String>, _>(i) {
                    out.push_str(&text);
                    out.push('\n');
                }
            }
        }
    }
    out
}

async fn no_secret_in_database_or_log(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan("pro").await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let mut panel = PanelClient::new(&app.base_url).unwrap();
    let session = panel.login(&r.client_id, &r.password).await.unwrap();
    let extra = panel.create_api_key(Some("rotation")).await.unwrap();
    let sdk = PartnerClient::new(&app.base_url, Credentials::from(&extra)).unwrap();
    sdk.issue_license("pro", "alice", Some("hygiene-01"))
        .await
        .unwrap();
    sdk.issue_license("pro", "alice", Some("hygiene-01"))
        .await
        .unwrap();
    // Failures too: a wrong secret and a wrong password must not be logged either.
    let wrong = PartnerClient::new(
        &app.base_url,
        Credentials::new(&r.client_id, format!("{}x", r.secret)),
    )
    .unwrap();
    assert!(wrong.balances().await.is_err());
    let mut bad_panel = PanelClient::new(&app.base_url).unwrap();
    assert!(
        bad_panel
            .login(&r.client_id, &format!("{}-wrong", r.password))
            .await
            .is_err()
    );

    let secrets = [
        r.secret.as_str(),
        extra.secret.as_str(),
        session.session_token.as_str(),
        r.password.as_str(),
    ];
    let dumped = dump(&app).await;
    assert!(dumped.contains(&r.client_id), "the dump reads the tables");
    let log = logs::captured();
    assert!(
        log.contains("license issued"),
        "the log captured the scenario"
    );
    for secret in secrets {
        assert!(!dumped.contains(secret), "a secret is stored in clear");
        assert!(!log.contains(secret), "a secret is in the debug log");
        // Not even a long fragment of it.
        assert!(!log.contains(&secret[..20.min(secret.len())]) || secret.len() < 20);
    }
    app.assert_audit_clean().await;
    app.stop().await;
}
