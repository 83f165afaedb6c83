//! Reseller accounts: creation, standing, the panel password and panel sessions.

use std::net::IpAddr;
use std::sync::OnceLock;

use std::cell::RefCell;

use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use rand::rngs::OsRng;
use serde::Serialize;
use sqlx::Row;
use subtle::ConstantTimeEq;

use crate::domain::{ClientId, Password, Secret, SecretKind};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::throttle;
use crate::wire::{ResellerAccount, Session};

/// How long a panel session lasts.
pub const SESSION_LIFETIME_SECONDS: i64 = 12 * 60 * 60;

/// A panel session unused for this long has ended (DESIGN §15).
pub const SESSION_IDLE_SECONDS: i64 = 60 * 60;

/// A session's last use is written at most this often.
const SESSION_TOUCH_GRANULARITY_SECONDS: i64 = 60;

/// An account as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

thread_local! {
    /// Argon2's working memory (19 MiB with the defaults), allocated once per hashing thread
    /// and reused: a fresh 19 MiB per run is cached by the allocator in whichever arena served
    /// it, and under concurrent sign-ins that grew the process by hundreds of MiB (measured).
    static ARGON2_MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Runs Argon2 `argon2` on `password` and `salt` into `out`, in this thread's reused memory.
fn argon2_into(
    argon2: &Argon2<'_>,
    params: &Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> bool {
    ARGON2_MEMORY.with(|memory| {
        let mut memory = memory.borrow_mut();
        let blocks = params.block_count();
        if memory.len() < blocks {
            memory.resize(blocks, Block::default());
        }
        argon2
            .hash_password_into_with_memory(password, salt, out, &mut memory[..blocks])
            .is_ok()
    })
}

/// Argon2id with the crate's defaults, off the async executor (bounded: [`throttle::hashing`]).
async fn hash_password(password: Password) -> Result<String> {
    throttle::hashing(move || {
        let failed = || Error::Internal("password hashing failed".to_owned());
        let salt = SaltString::generate(&mut OsRng);
        let params = Params::default();
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
        let mut salt_bytes = [0u8; 64];
        let salt_bytes = salt.decode_b64(&mut salt_bytes).map_err(|_| failed())?;
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        if !argon2_into(
            &argon2,
            &params,
            password.expose().as_bytes(),
            salt_bytes,
            &mut out,
        ) {
            return Err(failed());
        }
        let hash = PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::V0x13.into()),
            params: ParamsString::try_from(&params).map_err(|_| failed())?,
            salt: Some(salt.as_salt()),
            hash: Some(Output::new(&out).map_err(|_| failed())?),
        };
        Ok(hash.to_string())
    })
    .await?
}

/// Whether `password` matches the PHC string `encoded` (any Argon2 variant and parameters).
fn matches(password: &[u8], encoded: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(encoded) else {
        return false;
    };
    let (Ok(params), Ok(algorithm), Some(salt), Some(expected)) = (
        Params::try_from(&parsed),
        Algorithm::try_from(parsed.algorithm),
        parsed.salt,
        parsed.hash,
    ) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from) {
        None => Version::default(),
        Some(Ok(version)) => version,
        Some(Err(_)) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let mut out = vec![0u8; expected.len()];
    argon2_into(&argon2, &params, password, salt, &mut out)
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Verifies off the executor. An unknown account is checked against a fixed dummy hash, so
/// that it costs the same time as a wrong password.
async fn verify_password(password: Password, stored: Option<String>) -> Result<bool> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = match DUMMY.get() {
        Some(dummy) => dummy.clone(),
        None => {
            let hashed =
                hash_password(Password::presented("dummy password for timing".to_owned())).await?;
            DUMMY.get_or_init(|| hashed).clone()
        }
    };
    throttle::hashing(move || {
        let known = stored.is_some();
        let encoded = stored.unwrap_or(dummy);
        matches(password.expose().as_bytes(), &encoded) && known
    })
    .await
}

/// Creates a reseller account with its panel password; returns the new client id.
pub async fn create_reseller(store: &Store, name: &str, password: Password) -> Result<ClientId> {
    if name.trim().is_empty() || name.chars().count() > crate::limits::ACCOUNT_NAME_MAX_CHARS {
        return Err(crate::domain::InvalidField::new("name", "must be 1-200 characters").into());
    }
    let password_hash = hash_password(password).await?;
    let client_id = ClientId::generate();
    sqlx::query(
        "INSERT INTO accounts (client_id, name, password_hash, standing, created_utc) \
         VALUES ($1, $2, $3, 'good', $4)",
    )
    .bind(client_id.as_str())
    .bind(name)
    .bind(password_hash)
    .bind(store.now_utc())
    .execute(store.pool())
    .await?;
    tracing::info!(client_id = %client_id, "reseller account created");
    Ok(client_id)
}

const SUMMARY_SQL: &str = "SELECT a.client_id, a.name, a.standing, a.created_utc, \
     (SELECT COUNT(*) FROM api_keys k WHERE k.account_id = a.id AND k.status = 'active' \
         AND (k.expires_utc IS NULL OR k.expires_utc > $1)) AS active_keys \
     FROM accounts a";

fn summary_from_row(row: &sqlx::any::AnyRow) -> Result<ResellerSummary> {
    Ok(ResellerSummary {
        client_id: row.try_get("client_id")?,
        name: row.try_get("name")?,
        standing: row.try_get("standing")?,
        active_api_keys: row.try_get("active_keys")?,
        created_utc: row.try_get("created_utc")?,
    })
}

pub async fn list_resellers(store: &Store) -> Result<Vec<ResellerSummary>> {
    let sql = sqlx::AssertSqlSafe(format!("{SUMMARY_SQL} ORDER BY a.created_utc, a.id"));
    let rows = sqlx::query(sql)
        .bind(store.now_utc())
        .fetch_all(store.pool())
        .await?;
    rows.iter().map(summary_from_row).collect()
}

pub async fn show_reseller(store: &Store, client_id: &ClientId) -> Result<ResellerSummary> {
    let sql = sqlx::AssertSqlSafe(format!("{SUMMARY_SQL} WHERE a.client_id = $2"));
    let row = sqlx::query(sql)
        .bind(store.now_utc())
        .bind(client_id.as_str())
        .fetch_optional(store.pool())
        .await?
        .ok_or(Error::NotFound("reseller"))?;
    summary_from_row(&row)
}

/// Suspends or reinstates an account; acts on the very next request, on every replica.
pub async fn set_standing(store: &Store, client_id: &ClientId, standing: Standing) -> Result<()> {
    let mut tx = store.begin_write().await?;
    let current: (i64, String) =
        sqlx::query_as("SELECT id, standing FROM accounts WHERE client_id = $1")
            .bind(client_id.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(Error::NotFound("reseller"))?;
    let (account_id, before) = current;
    sqlx::query("UPDATE accounts SET standing = $1 WHERE id = $2")
        .bind(standing.as_str())
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    // Only a change of standing is an event.
    if before != standing.as_str() {
        let data = match standing {
            Standing::Suspended => crate::events::EventData::AccountSuspended {
                client_id: client_id.to_string(),
            },
            Standing::Good => crate::events::EventData::AccountReinstated {
                client_id: client_id.to_string(),
            },
        };
        crate::events::record(store, &mut tx, account_id, data).await?;
    }
    tx.commit().await?;
    tracing::info!(client_id = %client_id, standing = standing.as_str(), "account standing changed");
    Ok(())
}

/// Replaces the panel password and ends every panel session of the account.
pub async fn set_password(store: &Store, client_id: &ClientId, password: Password) -> Result<()> {
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
    tx.commit().await?;
    Ok(())
}

/// Logs in to the panel (the JSON API and the HTML panel both call this). Unknown id, wrong
/// password and suspended account are all [`Error::Unauthorized`], at the same cost.
///
/// Throttled (DESIGN.md §19): failures count per client id and per `source` address; past
/// 10 for the client id or 50 for the address within 15 minutes the answer is
/// [`Error::RateLimited`] without the password being checked. Hashing is bounded
/// ([`Error::Overloaded`] when too many wait).
pub async fn create_session(
    store: &Store,
    client_id: &str,
    password: Password,
    source: Option<IpAddr>,
) -> Result<Session> {
    let address = source.map(|ip| ip.to_canonical().to_string());
    throttle::check(store, throttle::SIGN_IN_PER_CLIENT_ID, client_id).await?;
    if let Some(address) = &address {
        throttle::check(store, throttle::SIGN_IN_PER_ADDRESS, address).await?;
    }
    let mut attempts =
        vec![throttle::count(store, throttle::SIGN_IN_PER_CLIENT_ID, client_id).await?];
    if let Some(address) = &address {
        match throttle::count(store, throttle::SIGN_IN_PER_ADDRESS, address).await {
            Ok(attempt) => attempts.push(attempt),
            Err(err) => {
                take_back(store, &attempts).await;
                return Err(err);
            }
        }
    }
    let result = try_sign_in(store, client_id, password).await;
    match &result {
        // A failure stays counted; a success, or an answer that checked nothing, is taken back.
        Err(Error::Unauthorized) => {}
        _ => take_back(store, &attempts).await,
    }
    result
}

async fn take_back(store: &Store, attempts: &[throttle::Attempt]) {
    for attempt in attempts {
        if let Err(err) = attempt.take_back(store).await {
            tracing::warn!(error = %err, "could not take back a sign-in attempt");
        }
    }
}

async fn try_sign_in(store: &Store, client_id: &str, password: Password) -> Result<Session> {
    let row = sqlx::query("SELECT id, password_hash, standing FROM accounts WHERE client_id = $1")
        .bind(client_id)
        .fetch_optional(store.pool())
        .await?;
    let (account_id, stored, good) = match &row {
        Some(row) => (
            row.try_get::<i64, _>("id")?,
            Some(row.try_get::<String, _>("password_hash")?),
            row.try_get::<String, _>("standing")? == "good",
        ),
        None => (0, None, false),
    };
    if !verify_password(password, stored).await? || !good {
        return Err(Error::Unauthorized);
    }
    let token = Secret::generate(SecretKind::PanelSession);
    let now = store.now_utc();
    let expires_utc = now + SESSION_LIFETIME_SECONDS;
    sqlx::query(
        "INSERT INTO panel_sessions (token_hash, account_id, created_utc, expires_utc) VALUES ($1, $2, $3, $4)",
    )
    .bind(token.hash())
    .bind(account_id)
    .bind(now)
    .bind(expires_utc)
    .execute(store.pool())
    .await?;
    Ok(Session {
        session_token: token.expose().to_owned(),
        expires_utc,
    })
}

/// An account authenticated by a panel session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelAccount {
    pub account_id: i64,
    pub client_id: ClientId,
}

/// Checks a panel session token: unexpired (12 h after sign-in, and used within the last hour),
/// and the account in good standing. Records the use, at most once a minute.
pub async fn authenticate_session(store: &Store, token: &Secret) -> Result<PanelAccount> {
    if !token.has_shape(SecretKind::PanelSession) {
        return Err(Error::Unauthorized);
    }
    let now = store.now_utc();
    let row = sqlx::query(
        "SELECT a.id, a.client_id, COALESCE(s.last_seen_utc, s.created_utc) AS seen \
         FROM panel_sessions s JOIN accounts a ON a.id = s.account_id \
         WHERE s.token_hash = $1 AND s.expires_utc > $2 AND a.standing = 'good' \
         AND COALESCE(s.last_seen_utc, s.created_utc) > $3",
    )
    .bind(token.hash())
    .bind(now)
    .bind(now - SESSION_IDLE_SECONDS)
    .fetch_optional(store.pool())
    .await?
    .ok_or(Error::Unauthorized)?;
    let seen: i64 = row.try_get("seen")?;
    if now - seen >= SESSION_TOUCH_GRANULARITY_SECONDS {
        sqlx::query("UPDATE panel_sessions SET last_seen_utc = $1 WHERE token_hash = $2")
            .bind(now)
            .bind(token.hash())
            .execute(store.pool())
            .await?;
    }
    let client_id: String = row.try_get("client_id")?;
    Ok(PanelAccount {
        account_id: row.try_get("id")?,
        client_id: ClientId::parse("clientId", &client_id)?,
    })
}

/// Signs out: the session ends at once. An unknown or ended session is no error.
pub async fn end_session(store: &Store, token: &Secret) -> Result<()> {
    sqlx::query("DELETE FROM panel_sessions WHERE token_hash = $1")
        .bind(token.hash())
        .execute(store.pool())
        .await?;
    Ok(())
}

/// The reseller's own password change, from a signed-in session: the current password must
/// match; the new one must be 12-128 characters. Every other session of the account ends; the
/// one that made the change stays.
pub async fn change_password(
    store: &Store,
    account_id: i64,
    current_session: &Secret,
    current_password: Password,
    new_password: &str,
) -> Result<()> {
    let new_password = Password::parse("newPassword", new_password)?;
    let stored: Option<String> =
        sqlx::query_scalar("SELECT password_hash FROM accounts WHERE id = $1")
            .bind(account_id)
            .fetch_optional(store.pool())
            .await?;
    if !verify_password(current_password, stored).await? {
        return Err(crate::domain::InvalidField::new("currentPassword", "is incorrect").into());
    }
    let password_hash = hash_password(new_password).await?;
    let mut tx = store.begin_write().await?;
    sqlx::query("UPDATE accounts SET password_hash = $1 WHERE id = $2")
        .bind(password_hash)
        .bind(account_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM panel_sessions WHERE account_id = $1 AND token_hash <> $2")
        .bind(account_id)
        .bind(current_session.hash())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(account_id, "panel password changed; other sessions ended");
    Ok(())
}

/// Deletes panel sessions past their 12 h lifetime or their 1 h idle limit.
pub async fn purge_expired_sessions(store: &Store) -> Result<u64> {
    let now = store.now_utc();
    let result = sqlx::query(
        "DELETE FROM panel_sessions WHERE expires_utc <= $1 \
         OR COALESCE(last_seen_utc, created_utc) <= $2",
    )
    .bind(now)
    .bind(now - SESSION_IDLE_SECONDS)
    .execute(store.pool())
    .await?;
    Ok(result.rows_affected())
}

/// `GET /v1/billing/resellers/me`.
pub async fn account_profile(store: &Store, account_id: i64) -> Result<ResellerAccount> {
    let row = sqlx::query("SELECT client_id, name, standing FROM accounts WHERE id = $1")
        .bind(account_id)
        .fetch_one(store.pool())
        .await?;
    Ok(ResellerAccount {
        client_id: row.try_get("client_id")?,
        name: row.try_get("name")?,
        standing: row.try_get("standing")?,
    })
}
