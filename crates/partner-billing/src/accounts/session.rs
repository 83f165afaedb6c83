//! Panel sessions: signing in with the account's password (throttled), the bearer token's
//! check on every request, signing out, the password change and the purge of ended sessions.

use std::net::IpAddr;

use super::password::{hash_password, verify_password};
use crate::audit::{Action, Actor, Entry, Origin};
use crate::domain::{ClientId, Password, Secret, SecretKind};
use crate::error::{Error, Result};
use crate::limits::{SESSION_IDLE_SECONDS, SESSION_LIFETIME_SECONDS};
use crate::store::Store;
use crate::throttle;
use crate::wire::Session;

/// A session's last use is written at most this often.
const SESSION_TOUCH_GRANULARITY_SECONDS: i64 = 60;

/// Logs in to the panel (the JSON API and the HTML panel both call this). Unknown id, wrong
/// password and suspended account are all [`Error::Unauthorized`], at the same cost.
///
/// Throttled (docs/security.md): failures count per client id and per `source` address; past
/// 10 for the client id or 50 for the address within 15 minutes the answer is
/// [`Error::RateLimited`] without the password being checked. Hashing is bounded
/// ([`Error::Overloaded`] when too many wait).
///
/// A successful sign-in is an entry of the audit trail (`session.created`, with the source
/// address and `request_id`); a failed one is counted by the throttle, not written there.
pub async fn create_session(
    store: &Store,
    client_id: &str,
    password: Password,
    source: Option<IpAddr>,
    request_id: Option<&str>,
) -> Result<Session> {
    // A malformed client id names no account: it is refused as an unknown one is (after the
    // same password hashing), counted against its address only, and never sent to the
    // database (which refuses a NUL byte in text).
    let client_id = ClientId::parse("clientId", client_id).ok();
    let address = source.map(|ip| ip.to_canonical().to_string());
    let mut limits = Vec::new();
    if let Some(client_id) = &client_id {
        limits.push((throttle::SIGN_IN_PER_CLIENT_ID, client_id.as_str()));
    }
    if let Some(address) = &address {
        limits.push((throttle::SIGN_IN_PER_ADDRESS, address.as_str()));
    }
    let attempt = try_sign_in(store, client_id.clone(), password, source, request_id);
    counted(store, &limits, attempt, |result| {
        matches!(result, Err(Error::Unauthorized))
    })
    .await
}

/// Runs `attempt`, a password check, as an attempt counted against each `(limit, subject)`:
/// refused without running past any of them; counted before it runs, so concurrent attempts
/// cannot race past a limit; the count kept when `failed` says it failed, taken back when it
/// succeeded or checked nothing. Sign-in and the password change count this way.
async fn counted<T>(
    store: &Store,
    limits: &[(throttle::Limit, &str)],
    attempt: impl std::future::Future<Output = Result<T>>,
    failed: impl FnOnce(&Result<T>) -> bool,
) -> Result<T> {
    for &(limit, subject) in limits {
        throttle::check(store, limit, subject).await?;
    }
    let mut attempts = Vec::with_capacity(limits.len());
    for &(limit, subject) in limits {
        match throttle::count(store, limit, subject).await {
            Ok(counted) => attempts.push(counted),
            Err(err) => {
                take_back(store, &attempts).await;
                return Err(err);
            }
        }
    }
    let result = attempt.await;
    if !failed(&result) {
        take_back(store, &attempts).await;
    }
    result
}

async fn take_back(store: &Store, attempts: &[throttle::Attempt]) {
    for attempt in attempts {
        if let Err(err) = attempt.take_back(store).await {
            tracing::warn!(error = %err, "could not take back a password attempt");
        }
    }
}

async fn try_sign_in(
    store: &Store,
    client_id: Option<ClientId>,
    password: Password,
    source: Option<IpAddr>,
    request_id: Option<&str>,
) -> Result<Session> {
    #[derive(sqlx::FromRow)]
    struct Account {
        id: i64,
        password_hash: String,
        standing: String,
    }
    let row: Option<Account> = match &client_id {
        Some(client_id) => {
            sqlx::query_as("SELECT id, password_hash, standing FROM accounts WHERE client_id = $1")
                .bind(client_id.as_str())
                .fetch_optional(store.pool())
                .await?
        }
        None => None,
    };
    let (account_id, stored, good) = match row {
        Some(account) => (
            account.id,
            Some(account.password_hash),
            account.standing == "good",
        ),
        None => (0, None, false),
    };
    if !verify_password(password, stored).await? || !good {
        return Err(Error::Unauthorized);
    }
    let Some(client_id) = client_id else {
        return Err(Error::Unauthorized);
    };
    let token = Secret::generate(SecretKind::PanelSession);
    let now = store.now_utc();
    let expires_utc = now + SESSION_LIFETIME_SECONDS;
    let origin = Origin::http(Actor::Panel(client_id), source, request_id);
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO panel_sessions (token_hash, account_id, created_utc, expires_utc) VALUES ($1, $2, $3, $4)",
    )
    .bind(token.hash())
    .bind(account_id)
    .bind(now)
    .bind(expires_utc)
    .execute(&mut *tx)
    .await?;
    let written = Entry::new(Action::SessionCreated, Some(account_id))
        .value("expiresUtc", expires_utc)
        .write(store, &mut tx, &origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
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
    #[derive(sqlx::FromRow)]
    struct SessionRow {
        account_id: i64,
        client_id: String,
        seen: i64,
    }
    let SessionRow {
        account_id,
        client_id,
        seen,
    } = {
        let query = sqlx::query_as(
            "SELECT a.id AS account_id, a.client_id, \
             COALESCE(s.last_seen_utc, s.created_utc) AS seen \
             FROM panel_sessions s JOIN accounts a ON a.id = s.account_id \
             WHERE s.token_hash = $1 AND s.expires_utc > $2 AND a.standing = 'good' \
             AND COALESCE(s.last_seen_utc, s.created_utc) > $3",
        )
        .bind(token.hash())
        .bind(now)
        .bind(now - SESSION_IDLE_SECONDS);
        let mut reader = store.reader().await?;
        reader.run(|c| query.fetch_optional(c)).await?
    }
    .ok_or(Error::Unauthorized)?;
    if now - seen >= SESSION_TOUCH_GRANULARITY_SECONDS {
        // Written off the request's way while another write holds SQLite's turn.
        store
            .write_one_soon(
                format!("session:{}", token.hash()),
                sqlx::query(
                    "UPDATE panel_sessions SET last_seen_utc = $1 WHERE token_hash = $2 \
                     AND (last_seen_utc IS NULL OR last_seen_utc < $1)",
                )
                .bind(now)
                .bind(token.hash()),
            )
            .await?;
    }
    Ok(PanelAccount {
        account_id,
        client_id: ClientId::parse("clientId", &client_id)?,
    })
}

/// Signs out: the session ends at once. An unknown or ended session is no error.
pub async fn end_session(store: &Store, token: &Secret) -> Result<()> {
    store
        .write_one(
            sqlx::query("DELETE FROM panel_sessions WHERE token_hash = $1").bind(token.hash()),
        )
        .await?;
    Ok(())
}

/// The reseller's own password change, from a signed-in session: the current password must
/// match; the new one must be 12-128 characters. Every other session of the account ends; the
/// one that made the change stays.
///
/// A wrong current password is a failed sign-in of the account: counted under the same limit
/// per client id, and past it `Err(RateLimited)` without checking the password. Otherwise a
/// session (a stolen one, say) could guess the password it would need to take the account
/// over faster than the sign-in form allows.
pub async fn change_password(
    store: &Store,
    account_id: i64,
    current_session: &Secret,
    current_password: Password,
    new_password: &str,
    origin: &Origin,
) -> Result<()> {
    #[derive(sqlx::FromRow)]
    struct Account {
        client_id: String,
        password_hash: String,
    }
    let new_password = Password::parse("newPassword", new_password)?;
    let account: Option<Account> =
        sqlx::query_as("SELECT client_id, password_hash FROM accounts WHERE id = $1")
            .bind(account_id)
            .fetch_optional(store.pool())
            .await?;
    let (client_id, stored) = account.map(|a| (a.client_id, a.password_hash)).unzip();
    let limits: Vec<_> = client_id
        .iter()
        .map(|id| (throttle::SIGN_IN_PER_CLIENT_ID, id.as_str()))
        .collect();
    let verified = counted(
        store,
        &limits,
        verify_password(current_password, stored),
        |result| matches!(result, Ok(false)),
    )
    .await?;
    if !verified {
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
    let written = Entry::new(Action::AccountPasswordChanged, Some(account_id))
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(account_id, "panel password changed; other sessions ended");
    Ok(())
}

/// Deletes panel sessions past their 12 h lifetime or their 1 h idle limit.
pub async fn purge_expired_sessions(store: &Store) -> Result<u64> {
    let now = store.now_utc();
    let result = store
        .write_one(
            sqlx::query(
                "DELETE FROM panel_sessions WHERE expires_utc <= $1 \
         OR COALESCE(last_seen_utc, created_utc) <= $2",
            )
            .bind(now)
            .bind(now - SESSION_IDLE_SECONDS),
        )
        .await?;
    Ok(result.rows_affected())
}

/// Records `nonce` as the message with a secret that the session `token` still has to show (a
/// newer one replaces it): [`show_secret_message_once`] then lets it through once. The panel
/// seals the secret into a cookie; this makes the cookie good for one showing, not for every
/// copy sent within its minute.
pub async fn expect_secret_message(store: &Store, token: &Secret, nonce: &str) -> Result<()> {
    store
        .write_one(
            sqlx::query(
                "UPDATE panel_sessions SET secret_message_nonce = $1 WHERE token_hash = $2",
            )
            .bind(nonce)
            .bind(token.hash()),
        )
        .await?;
    Ok(())
}

/// Whether the message with a secret that the session `token` still has to show is `nonce`:
/// `true` for the first caller only, which then shows it; it is no longer waiting afterwards.
pub async fn show_secret_message_once(store: &Store, token: &Secret, nonce: &str) -> Result<bool> {
    let result = store
        .write_one(
            sqlx::query(
                "UPDATE panel_sessions SET secret_message_nonce = NULL \
                 WHERE token_hash = $1 AND secret_message_nonce = $2",
            )
            .bind(token.hash())
            .bind(nonce),
        )
        .await?;
    Ok(result.rows_affected() == 1)
}

/// Gives back the nonce [`show_secret_message_once`] claimed, when the page that was to show
/// the secret failed: it waits for the reload, unless a newer secret replaced it meanwhile.
pub async fn give_back_secret_message(store: &Store, token: &Secret, nonce: &str) -> Result<()> {
    store
        .write_one(
            sqlx::query(
                "UPDATE panel_sessions SET secret_message_nonce = $1 \
                 WHERE token_hash = $2 AND secret_message_nonce IS NULL",
            )
            .bind(nonce)
            .bind(token.hash()),
        )
        .await?;
    Ok(())
}

/// What [`seal_for_session`] binds a sealed message to: the purpose and the session (by its
/// token's hash).
fn session_context(token: &Secret) -> Vec<u8> {
    format!("panel-flash|{}", token.hash()).into_bytes()
}

/// `message` sealed for the browser of the session `token` (XChaCha20-Poly1305 under the
/// master key, bound to that session), as base64url: the panel hands a new secret to the page
/// after its form this way, in a cookie that only that session's next request can open.
pub fn seal_for_session(store: &Store, token: &Secret, message: &[u8]) -> Result<String> {
    use base64::Engine;
    let sealed = store
        .master_key()?
        .seal(message, &session_context(token))
        .map_err(|_| Error::Internal("sealing a panel message failed".to_owned()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed))
}

/// The message [`seal_for_session`] sealed for the session `token`; `None` for anything else
/// (another session's, altered, not base64url).
pub fn open_for_session(store: &Store, token: &Secret, sealed: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sealed.as_bytes())
        .ok()?;
    store
        .master_key()
        .ok()?
        .open(&bytes, &session_context(token))
        .ok()
}
