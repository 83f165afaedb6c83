//! Migrations whose first comment was reworded after databases had applied them: a database
//! that applied the old text still starts.

use sqlx::AnyPool;

use super::Backend;
use crate::error::Result;

/// Migrations whose comments were reworded after databases had applied them: the backend, the
/// version and the SHA-384 sqlx recorded for the old text. sqlx refuses to start on a database
/// whose recorded checksum differs from the file's, so [`accept`] records
/// the new text's checksum in place of exactly these old ones. Only a comment may change this
/// way; a change to what a migration does needs a new migration.
const REWORDED_MIGRATIONS: [(Backend, i64, &str); 6] = [
    (
        Backend::Sqlite,
        4,
        "2d087fbd8ca8d996213dd5f673d0a34efb4bc0e47e4893be3c98b1504c61b084160ffe6bb1b835bd737b8214b836f1be",
    ),
    (
        Backend::Sqlite,
        5,
        "35738f6c5d1c04123126239389a920c76bbcf5a7f65ff0573f6d554b865a69bab45b1d09b709390aac4a7bdf5d4abb7e",
    ),
    (
        Backend::Sqlite,
        7,
        "c85227b75d7612f84cf06c7936c8971c2919f54ba1e1b42edad2169be61bc2fe37f99181908cd9d357175c0118e3544f",
    ),
    (
        Backend::Postgres,
        4,
        "6ab7803d797efe409eb95e8e3a8a638fa7da955f8f791624eeb93bf7096cf7300ad8bba37b6352c8bd720eed994e9926",
    ),
    (
        Backend::Postgres,
        5,
        "2a2dceceaa51330eb228428c9bc9246d7be567e25ee32969408a0ea7ad182ff7c994a067f9311c632b18bbd547293225",
    ),
    (
        Backend::Postgres,
        7,
        "2959f12505b37b16da7fb4c6d5616c0fd89509f8df3a3757622933d1744926d9e1b619ec6b43ce70447037ffb13f3b24",
    ),
];

/// Records the current checksum of each of [`REWORDED_MIGRATIONS`] that a database applied
/// with its old text, so that the migrator accepts it. Each update names the old checksum, so
/// replicas starting together may both run it; no lock is taken, so none can outlive its
/// process behind a transaction pooler.
pub(super) async fn accept(
    pool: &AnyPool,
    backend: Backend,
    migrator: &sqlx::migrate::Migrator,
) -> Result<()> {
    let migrations_table_exists = match backend {
        Backend::Sqlite => {
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
        }
        Backend::Postgres => {
            "SELECT count(*) FROM pg_catalog.pg_tables \
             WHERE tablename = '_sqlx_migrations' AND schemaname = ANY (current_schemas(false))"
        }
    };
    let tables: i64 = sqlx::query_scalar(migrations_table_exists)
        .fetch_one(pool)
        .await?;
    if tables == 0 {
        return Ok(());
    }
    for (_, version, old) in REWORDED_MIGRATIONS.iter().filter(|r| r.0 == backend) {
        let Some(migration) = migrator.iter().find(|m| m.version == *version) else {
            continue;
        };
        let old = hex::decode(old).expect("a reworded migration's old checksum is hex");
        sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2 AND checksum = $3",
        )
        .bind(migration.checksum.to_vec())
        .bind(*version)
        .bind(old)
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// A database that applied a migration before its comment was reworded still starts: its
/// recorded checksum (the old text's) is replaced by the new one, and only that old checksum.
#[cfg(test)]
mod tests {
    use super::REWORDED_MIGRATIONS;
    use crate::db::{Backend, Db};

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
}
