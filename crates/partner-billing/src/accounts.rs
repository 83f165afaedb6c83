//! Reseller accounts: creation, listing, standing and the operator's password reset; the
//! panel password's hashing is in `accounts/password.rs`, panel sessions in `accounts/session.rs`.

mod password;
mod session;

pub use session::{
    PanelAccount, authenticate_session, change_password, create_session, end_session,
    expect_secret_message, give_back_secret_message, open_for_session, purge_expired_sessions,
    seal_for_session, show_secret_message_once,
};

use serde::Serialize;

use self::password::hash_password;
use crate::audit::{Action, Entry, Origin};
use crate::domain::{ClientId, Password};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::wire::ResellerAccount;

/// An account as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct ResellerSummary {
    pub client_id: String,
    pub name: String,
    pub standing: String,
    pub active_api_keys: i64,
    pub created_utc: i64,
}

/// Good standing or suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Good,
    Suspended,
}

impl Standing {
    fn as_str(self) -> &'static str {
        match self {
            Self::Good => "good",
            Self::Suspended => "suspended",
        }
    }
}

/// Creates a reseller account with its panel password; returns the new client id.
pub async fn create_reseller(
    store: &Store,
    name: &str,
    password: Password,
    origin: &Origin,
) -> Result<ClientId> {
    if name.trim().is_empty() || name.chars().count() > crate::limits::ACCOUNT_NAME_MAX_CHARS {
        return Err(crate::domain::InvalidField::new("name", "must be 1-200 characters").into());
    }
    let password_hash = hash_password(password).await?;
    let client_id = ClientId::generate();
    let mut tx = store.begin_write().await?;
    let account_id: i64 = sqlx::query_scalar(
        "INSERT INTO accounts (client_id, name, password_hash, standing, created_utc) \
         VALUES ($1, $2, $3, 'good', $4) RETURNING id",
    )
    .bind(client_id.as_str())
    .bind(name)
    .bind(password_hash)
    .bind(store.now_utc())
    .fetch_one(&mut *tx)
    .await?;
    let written = Entry::new(Action::AccountCreated, Some(account_id))
        .text("name", Some(name))
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(client_id = %client_id, "reseller account created");
    Ok(client_id)
}

const SUMMARY_SQL: &str = "SELECT a.client_id, a.name, a.standing, a.created_utc, \
     (SELECT COUNT(*) FROM api_keys k WHERE k.account_id = a.id AND k.status = 'active' \
         AND (k.expires_utc IS NULL OR k.expires_utc > $1)) AS active_api_keys \
     FROM accounts a";

pub async fn list_resellers(store: &Store) -> Result<Vec<ResellerSummary>> {
    let sql = sqlx::AssertSqlSafe(format!("{SUMMARY_SQL} ORDER BY a.created_utc, a.id"));
    Ok(sqlx::query_as(sql)
        .bind(store.now_utc())
        .fetch_all(store.pool())
        .await?)
}

pub async fn show_reseller(store: &Store, client_id: &ClientId) -> Result<ResellerSummary> {
    let sql = sqlx::AssertSqlSafe(format!("{SUMMARY_SQL} WHERE a.client_id = $2"));
    sqlx::query_as(sql)
        .bind(store.now_utc())
        .bind(client_id.as_str())
        .fetch_optional(store.pool())
        .await?
        .ok_or(Error::NotFound("reseller"))
}

/// Suspends or reinstates an account; acts on the very next request, on every replica.
pub async fn set_standing(
    store: &Store,
    client_id: &ClientId,
    standing: Standing,
    origin: &Origin,
) -> Result<()> {
    let mut tx = store.begin_write().await?;
    #[derive(sqlx::FromRow)]
    struct Current {
        id: i64,
        standing: String,
    }
    let Current {
        id: account_id,
        standing: before,
    } = sqlx::query_as("SELECT id, standing FROM accounts WHERE client_id = $1")
        .bind(client_id.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound("reseller"))?;
    sqlx::query("UPDATE accounts SET standing = $1 WHERE id = $2")
        .bind(standing.as_str())
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    // Only a change of standing is an event and an entry of the trail.
    let mut written = None;
    if before != standing.as_str() {
        let (data, action) = match standing {
            Standing::Suspended => (
                crate::events::EventData::AccountSuspended {
                    client_id: client_id.to_string(),
                },
                Action::AccountSuspended,
            ),
            Standing::Good => (
                crate::events::EventData::AccountReinstated {
                    client_id: client_id.to_string(),
                },
                Action::AccountReinstated,
            ),
        };
        crate::events::record(store, &mut tx, account_id, data).await?;
        written = Some(
            Entry::new(action, Some(account_id))
                .write(store, &mut tx, origin)
                .await?,
        );
    }
    tx.commit().await?;
    if let Some(written) = written {
        written.committed(store);
    }
    tracing::info!(client_id = %client_id, standing = standing.as_str(), "account standing changed");
    Ok(())
}

/// Replaces the panel password and ends every panel session of the account.
pub async fn set_password(
    store: &Store,
    client_id: &ClientId,
    password: Password,
    origin: &Origin,
) -> Result<()> {
    let password_hash = hash_password(password).await?;
    let mut tx = store.begin_write().await?;
    let account_id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
        .bind(client_id.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound("reseller"))?;
    sqlx::query("UPDATE accounts SET password_hash = $1 WHERE id = $2")
        .bind(password_hash)
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM panel_sessions WHERE account_id = $1")
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    let written = Entry::new(Action::AccountPasswordSet, Some(account_id))
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    Ok(())
}

/// The row id of the account `client_id` names; [`Error::NotFound`] when none does.
pub(crate) async fn account_id_of(store: &Store, client_id: &ClientId) -> Result<i64> {
    sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
        .bind(client_id.as_str())
        .fetch_optional(store.pool())
        .await?
        .ok_or(Error::NotFound("reseller"))
}

/// `GET /v1/billing/resellers/me`.
pub async fn account_profile(store: &Store, account_id: i64) -> Result<ResellerAccount> {
    Ok(
        sqlx::query_as("SELECT client_id, name, standing FROM accounts WHERE id = $1")
            .bind(account_id)
            .fetch_one(store.pool())
            .await?,
    )
}
