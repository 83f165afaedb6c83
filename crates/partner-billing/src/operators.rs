//! Operator tokens (`rso_…`): the bearer credential of the product's own backend on the
//! product API. Created by the operator, shown once, stored only as SHA-256, and checked against
//! the database on every request, so a revocation acts on the next one.

use serde::Serialize;

use crate::audit::{Action, Entry, Origin};
use crate::db::dialect::{self, PerBackend};
use crate::db::{Backend, is_unique_violation};
use crate::domain::{InvalidField, Secret, SecretKind};
use crate::error::{Error, Result};
use crate::keys;
use crate::store::Store;

/// `lastUsedUtc` is written at most this often per token, as for API keys.
pub use crate::keys::LAST_USED_GRANULARITY_SECONDS;

/// A token just created. The plaintext is here and nowhere else; [`Secret`] keeps it out of
/// `Debug` output.
#[derive(Debug, Clone)]
pub struct CreatedOperatorToken {
    pub name: String,
    pub token: Secret,
    pub created_utc: i64,
}

/// A token as the operator lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct OperatorTokenInfo {
    pub name: String,
    /// `active` or `revoked`.
    pub status: String,
    pub created_utc: i64,
    /// To the minute; `None` if never used.
    pub last_used_utc: Option<i64>,
    pub revoked_utc: Option<i64>,
}

/// Who calls the product API: an operator token, or the operator's own console (the admin
/// CLI, which works on the database directly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorIdentity {
    /// The token's row id; `None` for the console.
    token_id: Option<i64>,
    /// The token's name (`console` for the console).
    pub name: String,
}

impl OperatorIdentity {
    /// The operator's console: support staff redeeming on a user's behalf.
    pub fn console() -> Self {
        Self {
            token_id: None,
            name: "console".to_owned(),
        }
    }

    /// Whose idempotency keys these are: each token has its own, the console has one set.
    pub(crate) fn idempotency_scope(&self) -> String {
        match self.token_id {
            Some(id) => format!("token:{id}"),
            None => "console".to_owned(),
        }
    }

    /// Who did it, for the records a write leaves behind.
    pub(crate) fn actor(&self) -> String {
        match self.token_id {
            Some(_) => format!("operator_token:{}", self.name),
            None => "operator".to_owned(),
        }
    }
}

/// A token name: 1–64 characters, no control characters.
fn parse_token_name(name: &str) -> Result<String, InvalidField> {
    let chars = name.chars().count();
    if (1..=64).contains(&chars) && !name.chars().any(char::is_control) && !name.trim().is_empty() {
        Ok(name.to_owned())
    } else {
        Err(InvalidField::new(
            "name",
            "must be 1-64 characters without control characters",
        ))
    }
}

/// Creates a token with a unique name; its plaintext is in the result and nowhere else.
/// A name in use (revoked tokens included) is [`Error::AlreadyExists`].
pub async fn create_operator_token(
    store: &Store,
    name: &str,
    origin: &Origin,
) -> Result<CreatedOperatorToken> {
    let name = parse_token_name(name)?;
    let token = Secret::generate(SecretKind::OperatorToken);
    let now = store.now_utc();
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO operator_tokens (name, token_hash, status, created_utc) \
         VALUES ($1, $2, 'active', $3)",
    )
    .bind(name.as_str())
    .bind(token.hash())
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            Error::AlreadyExists("operator token")
        } else {
            e.into()
        }
    })?;
    let written = Entry::new(Action::OperatorTokenCreated, None)
        .id("operatorTokenName", name.as_str())
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(name = %name, "operator token created");
    Ok(CreatedOperatorToken {
        name,
        token,
        created_utc: now,
    })
}

/// Every token, oldest first, revoked ones included.
pub async fn list_operator_tokens(store: &Store) -> Result<Vec<OperatorTokenInfo>> {
    Ok(sqlx::query_as(
        "SELECT name, status, created_utc, last_used_utc, revoked_utc \
         FROM operator_tokens ORDER BY created_utc, id",
    )
    .fetch_all(store.pool())
    .await?)
}

/// Revokes a token by name; it is refused from the next request on. Revoking it again
/// succeeds; an unknown name is [`Error::NotFound`].
pub async fn revoke_operator_token(store: &Store, name: &str, origin: &Origin) -> Result<()> {
    let mut tx = store.begin_write().await?;
    let status: String = sqlx::query_scalar("SELECT status FROM operator_tokens WHERE name = $1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound("operator token"))?;
    if status == "revoked" {
        return Ok(());
    }
    sqlx::query(
        "UPDATE operator_tokens SET status = 'revoked', revoked_utc = COALESCE(revoked_utc, $1) \
         WHERE name = $2",
    )
    .bind(store.now_utc())
    .bind(name)
    .execute(&mut *tx)
    .await?;
    let written = Entry::new(Action::OperatorTokenRevoked, None)
        .id("operatorTokenName", name)
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(name = %name, "operator token revoked");
    Ok(())
}

/// Verifies a bearer token against the database, on every request. Anything but an active
/// operator token (an API key secret, a panel session token, a revoked or unknown token) is
/// [`Error::Unauthorized`]. Read in one statement with the other token checks waiting at the
/// same time (`Db::shared_read`), as API keys are.
pub async fn authenticate_operator(store: &Store, token: &Secret) -> Result<OperatorIdentity> {
    if !token.has_shape(SecretKind::OperatorToken) {
        return Err(Error::Unauthorized);
    }
    #[derive(sqlx::FromRow)]
    struct TokenRow {
        id: i64,
        name: String,
        last_used_utc: Option<i64>,
    }
    let rows = store
        .db()
        .shared_read(
            TOKENS_BY_HASHES.get(store.backend()),
            token.hash(),
            store.now_utc(),
        )
        .await?;
    let TokenRow {
        id: token_id,
        name,
        last_used_utc,
    } = rows
        .first()
        .map(sqlx::FromRow::from_row)
        .transpose()?
        .ok_or(Error::Unauthorized)?;
    keys::record_use(
        store,
        keys::UsedCredential::OperatorToken,
        token_id,
        last_used_utc,
    )
    .await?;
    Ok(OperatorIdentity {
        token_id: Some(token_id),
        name,
    })
}

/// [`authenticate_operator`]'s statement for several tokens: their hashes in `$2` (a JSON
/// array); each row names its hash by its 1-based position in `request`. Tokens do not expire,
/// so the time in `$1` is not read.
static TOKENS_BY_HASHES: PerBackend = PerBackend::new(tokens_by_hashes_sql);

fn tokens_by_hashes_sql(backend: Backend) -> String {
    format!(
        "SELECT q.n AS request, t.id, t.name, t.last_used_utc FROM {hashes} q {token} \
         WHERE t.status = 'active' ORDER BY q.n",
        hashes = dialect::numbered_json_texts(backend, 2),
        token = dialect::join_unique(backend, "operator_tokens", "t", "token_hash", "q.value"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_names_are_checked() {
        assert!(parse_token_name("product-backend").is_ok());
        assert!(parse_token_name(&"n".repeat(64)).is_ok());
        assert!(parse_token_name(&"n".repeat(65)).is_err());
        assert!(parse_token_name("").is_err());
        assert!(parse_token_name("   ").is_err());
        assert!(parse_token_name("a\nb").is_err());
    }

    #[test]
    fn scopes_and_actors_tell_callers_apart() {
        let token = OperatorIdentity {
            token_id: Some(7),
            name: "backend".to_owned(),
        };
        assert_eq!(token.idempotency_scope(), "token:7");
        assert_eq!(token.actor(), "operator_token:backend");
        let console = OperatorIdentity::console();
        assert_eq!(console.idempotency_scope(), "console");
        assert_ne!(console.actor(), token.actor());
    }
}
