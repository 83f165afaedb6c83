//! A database that applied a migration before its comment was reworded still starts: its
//! recorded checksum (the old text's) is replaced by the new one, and only that old checksum.

use super::{Backend, Db, REWORDED_MIGRATIONS};

/// Records, for each reworded migration of `backend`, the checksum `checksum(old)` gives, as a
/// database migrated by the release before the rewording holds.
async fn record(db: &Db, backend: Backend, checksum: impl Fn(&str) -> Vec<u8>) {
    for (_, version, old) in REWORDED_MIGRATIONS.iter().filter(|r| r.0 == backend) {
        sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2")
            .bind(checksum(old))
            .bind(*version)
            .execute(db.pool())
            .await
            .expect("recorded checksum");
    }
}

async fn a_database_migrated_before_the_rewording_starts(url: &str, backend: Backend) {
    let db = Db::connect(url).await.expect("a new database");
    let current: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(db.pool())
            .await
            .expect("checksums");
    record(&db, backend, |old| hex::decode(old).expect("hex")).await;
    db.close().await;

    let db = Db::connect(url)
        .await
        .expect("a database migrated with the old text starts");
    let now: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(db.pool())
            .await
            .expect("checksums");
    assert_eq!(now, current, "the new text's checksums are recorded");

    // Any other checksum is still refused: a migration whose statements changed.
    record(&db, backend, |_| vec![0; 48]).await;
    db.close().await;
    let refused = Db::connect(url).await.expect_err("a changed migration");
    assert!(
        refused.to_string().contains("migration"),
        "refused for its migrations: {refused}"
    );
}

#[test]
fn every_old_checksum_is_a_sha384() {
    for (_, _, old) in REWORDED_MIGRATIONS {
        assert_eq!(hex::decode(old).expect("hex").len(), 48);
    }
}

#[tokio::test]
async fn a_sqlite_database_migrated_before_the_rewording_starts() {
    let dir = partner_billing_testkit::TempDir::new();
    let url = format!("sqlite://{}", dir.path.join("t.db").display());
    a_database_migrated_before_the_rewording_starts(&url, Backend::Sqlite).await;
}

#[tokio::test]
async fn a_postgres_database_migrated_before_the_rewording_starts() {
    let Some(url) = partner_billing_testkit::postgres_url() else {
        return;
    };
    let database = partner_billing_testkit::ScratchDatabase::create(&url).await;
    a_database_migrated_before_the_rewording_starts(&database.url, Backend::Postgres).await;
    database.drop_database().await;
}
