//! API keys: create (at most five active), list, revoke, roll with a grace period, and verify
//! credentials.
//!
//! A key is active while its stored status is `active` and its `expires_utc` (set by a roll) is
//! null or still ahead; from `expires_utc` on it is expired: refused like a revoked key, listed
//! `expired`, and no longer counted toward the five. Expiry is read from the database on every
//! request, so it acts on every replica at the same second.

use subtle::ConstantTimeEq;

use crate::accounts::account_id_of;
use crate::audit::{Action, Entry, Origin};
use crate::db::dialect::{self, PerBackend};
use crate::db::{Backend, Tx};
use crate::domain::{ApiKeyId, ClientId, InvalidField, Secret, SecretKind, parse_key_name};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::wire::{ApiKeyInfo, ApiKeyList, Balance, Balances, CreatedApiKey};

/// SQL condition (on table alias `k`) for a key that authenticates at `$now`: the bind named
/// in the caller. Kept in one place so listing, counting and authentication agree.
const ACTIVE_AT: &str = "k.status = 'active' AND (k.expires_utc IS NULL OR k.expires_utc > $1)";

/// The longest grace period a roll may give the old key: seven days.
pub const MAX_ROLL_GRACE_SECONDS: i64 = crate::limits::ROLL_GRACE_MAX_SECONDS;

/// The grace period of a roll that names none: one day.
pub const DEFAULT_ROLL_GRACE_SECONDS: i64 = crate::limits::ROLL_GRACE_DEFAULT_SECONDS;

/// At most this many keys may be active under one client id.
pub const MAX_ACTIVE_KEYS: i64 = crate::limits::MAX_ACTIVE_API_KEYS as i64;

/// `lastUsedUtc` is written at most this often per key.
pub const LAST_USED_GRANULARITY_SECONDS: i64 = 60;

/// Creates a key; its secret is in the result and nowhere else. The cap is checked and the key
/// inserted in one write transaction that holds the account's lock, so concurrent creations
/// cannot pass five.
pub async fn create_api_key(
    store: &Store,
    account_id: i64,
    name: Option<&str>,
    origin: &Origin,
) -> Result<CreatedApiKey> {
    let name = parse_key_name(name)?;
    let now = store.now_utc();
    let mut tx = store.begin_write().await?;
    let client_id = lock_account(store, &mut tx, account_id).await?;
    let created = insert_key(store, &mut tx, account_id, client_id, name, now).await?;
    let written = Entry::new(Action::ApiKeyCreated, Some(account_id))
        .id("apiKeyId", created.api_key_id.clone())
        .text("name", created.name.as_deref())
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(client_id = %created.client_id, api_key_id = %created.api_key_id, "API key created");
    Ok(created)
}

/// `expiresInSeconds` of a roll: 0 to [`MAX_ROLL_GRACE_SECONDS`], [`DEFAULT_ROLL_GRACE_SECONDS`]
/// when left out.
pub fn parse_roll_grace(value: Option<i64>) -> std::result::Result<i64, InvalidField> {
    match value {
        None => Ok(DEFAULT_ROLL_GRACE_SECONDS),
        Some(seconds) if (0..=MAX_ROLL_GRACE_SECONDS).contains(&seconds) => Ok(seconds),
        Some(_) => Err(InvalidField::new(
            "expiresInSeconds",
            "must be a whole number of seconds from 0 to 604800 (7 days)",
        )),
    }
}

/// Rolls an active key of this account: creates a new key with the same name (its secret is in
/// the result and nowhere else) and lets the old key work for `expires_in_seconds` more (see
/// [`parse_roll_grace`]). Rolling a key that is already in its grace period never lengthens it.
/// An unknown key, another account's, a revoked or an expired one is
/// [`Error::ApiKeyNotFound`]; with five active keys and a grace period it is
/// [`Error::ApiKeyLimitReached`] (rolled now, the old key stops counting first). Either
/// way nothing changes: the check, the new key and the old key's expiry are one transaction
/// under the account's lock.
pub async fn roll_api_key(
    store: &Store,
    account_id: i64,
    api_key_id: &str,
    expires_in_seconds: Option<i64>,
    origin: &Origin,
) -> Result<CreatedApiKey> {
    let grace = parse_roll_grace(expires_in_seconds)?;
    let api_key_id = parse_api_key_id(api_key_id)?;
    let now = store.now_utc();
    let mut tx = store.begin_write().await?;
    let client_id = lock_account(store, &mut tx, account_id).await?;
    let old: RolledKeyRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT k.id, k.name, k.expires_utc FROM api_keys k \
         WHERE {ACTIVE_AT} AND k.api_key_id = $2 AND k.account_id = $3"
    )))
    .bind(now)
    .bind(api_key_id.as_str())
    .bind(account_id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(Error::ApiKeyNotFound)?;
    let expires_utc = old.expires_utc.map_or(now + grace, |t| t.min(now + grace));
    // The old key's end first: rolled "now", it no longer counts toward the five active keys,
    // so an account at the limit can still replace a key.
    sqlx::query("UPDATE api_keys SET expires_utc = $1 WHERE id = $2")
        .bind(expires_utc)
        .bind(old.id)
        .execute(&mut *tx)
        .await?;
    let created = insert_key(store, &mut tx, account_id, client_id, old.name, now).await?;
    let written = Entry::new(Action::ApiKeyRolled, Some(account_id))
        .id("apiKeyId", api_key_id.as_str())
        .id("newApiKeyId", created.api_key_id.clone())
        .text("name", created.name.as_deref())
        .value("expiresUtc", expires_utc)
        .write(store, &mut tx, origin)
        .await?;
    tx.commit().await?;
    written.committed(store);
    tracing::info!(
        client_id = %created.client_id,
        api_key_id = %api_key_id,
        new_api_key_id = %created.api_key_id,
        expires_utc,
        "API key rolled"
    );
    Ok(created)
}

/// Takes the account's write lock and returns its client id.
async fn lock_account(store: &Store, tx: &mut Tx, account_id: i64) -> Result<String> {
    dialect::lock_account(store.backend(), tx, account_id).await
}

/// Inserts a new key unless the account already has five active ones at `now`. The caller
/// holds the account's lock, so concurrent creations cannot pass five.
async fn insert_key(
    store: &Store,
    tx: &mut Tx,
    account_id: i64,
    client_id: String,
    name: Option<String>,
    now: i64,
) -> Result<CreatedApiKey> {
    let active: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM api_keys k WHERE {ACTIVE_AT} AND k.account_id = $2"
    )))
    .bind(now)
    .bind(account_id)
    .fetch_one(&mut **tx)
    .await?;
    if active >= MAX_ACTIVE_KEYS {
        return Err(Error::ApiKeyLimitReached);
    }
    let secret = Secret::generate(SecretKind::ApiKey);
    let api_key_id = ApiKeyId::generate();
    sqlx::query(
        "INSERT INTO api_keys (api_key_id, account_id, name, secret_hash, status, created_utc) \
         VALUES ($1, $2, $3, $4, 'active', $5)",
    )
    .bind(api_key_id.as_str())
    .bind(account_id)
    .bind(name.as_deref())
    .bind(secret.hash())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    crate::events::record(
        store,
        tx,
        account_id,
        crate::events::EventData::ApiKeyCreated {
            api_key_id: api_key_id.to_string(),
            name: name.clone(),
        },
    )
    .await?;
    Ok(CreatedApiKey {
        api_key_id: api_key_id.to_string(),
        client_id,
        secret: secret.expose().to_owned(),
        name,
        created_utc: now,
    })
}

/// Every key of the account, oldest first.
pub async fn list_api_keys(store: &Store, account_id: i64) -> Result<ApiKeyList> {
    let mut api_keys: Vec<ApiKeyInfo> = sqlx::query_as(
        "SELECT api_key_id, name, status, created_utc, last_used_utc, revoked_utc, expires_utc \
         FROM api_keys WHERE account_id = $1 ORDER BY created_utc, id",
    )
    .bind(account_id)
    .fetch_all(store.pool())
    .await?;
    // Expiry is not a stored status: an active key past its expiry is shown `expired`.
    let now = store.now_utc();
    for key in &mut api_keys {
        if key.status == "active" && key.expires_utc.is_some_and(|t| t <= now) {
            key.status = "expired".to_owned();
        }
    }
    Ok(ApiKeyList { api_keys })
}

/// The key an `apiKeyId` names; any other text, malformed or not, names none: it is answered
/// [`Error::ApiKeyNotFound`] like an unknown id, and never sent to the database.
fn parse_api_key_id(api_key_id: &str) -> Result<ApiKeyId> {
    ApiKeyId::parse("apiKeyId", api_key_id).map_err(|_| Error::ApiKeyNotFound)
}

/// Revokes a key of this account; revoking a revoked key again succeeds. A key of another
/// account is [`Error::ApiKeyNotFound`], exactly like an unknown one.
pub async fn revoke_api_key(
    store: &Store,
    account_id: i64,
    api_key_id: &str,
    origin: &Origin,
) -> Result<()> {
    let api_key_id = parse_api_key_id(api_key_id)?;
    let now = store.now_utc();
    let mut tx = store.begin_write().await?;
    #[derive(sqlx::FromRow)]
    struct KeyRow {
        status: String,
        name: Option<String>,
    }
    let key: Option<KeyRow> = sqlx::query_as(
        "SELECT status, name FROM api_keys WHERE api_key_id = $1 AND account_id = $2",
    )
    .bind(api_key_id.as_str())
    .bind(account_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(KeyRow { status, name }) = key else {
        return Err(Error::ApiKeyNotFound);
    };
    // Only the move from active to revoked is an event; revoking again changes nothing.
    let revoked = sqlx::query(
        "UPDATE api_keys SET status = 'revoked', revoked_utc = $1 \
         WHERE api_key_id = $2 AND account_id = $3 AND status <> 'revoked'",
    )
    .bind(now)
    .bind(api_key_id.as_str())
    .bind(account_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let mut written = None;
    if revoked > 0 && status != "revoked" {
        written = Some(
            Entry::new(Action::ApiKeyRevoked, Some(account_id))
                .id("apiKeyId", api_key_id.as_str())
                .text("name", name.as_deref())
                .write(store, &mut tx, origin)
                .await?,
        );
        crate::events::record(
            store,
            &mut tx,
            account_id,
            crate::events::EventData::ApiKeyRevoked {
                api_key_id: api_key_id.to_string(),
                name,
            },
        )
        .await?;
    }
    tx.commit().await?;
    if let Some(written) = written {
        written.committed(store);
    }
    tracing::info!(api_key_id = %api_key_id, "API key revoked");
    Ok(())
}

/// An account authenticated by an API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerAccount {
    pub account_id: i64,
    pub client_id: ClientId,
    pub api_key_id: ApiKeyId,
}

/// Verifies a client id and secret against the database, on every request: revocation and
/// suspension act on the very next one. One indexed lookup by the secret's hash, whatever is
/// wrong, so every rejection costs about the same.
pub async fn authenticate_api_key(
    store: &Store,
    client_id: &str,
    secret: &Secret,
) -> Result<PartnerAccount> {
    let rows = read_key(store, secret).await?;
    accept_key(store, rows.first().map(|row| &row.key), client_id).await
}

/// Verifies an API key and reads its account's balances: the same read as
/// [`authenticate_api_key`]'s, whose rows carry the balances.
pub async fn balances_with_api_key(
    store: &Store,
    client_id: &str,
    secret: &Secret,
) -> Result<(PartnerAccount, Balances)> {
    let rows = read_key(store, secret).await?;
    let account = accept_key(store, rows.first().map(|row| &row.key), client_id).await?;
    let balances = rows
        .into_iter()
        .filter_map(|row| {
            Some(Balance {
                product_slug: row.product_slug?,
                remaining_balance: row.remaining_balance?,
            })
        })
        .collect();
    Ok((account, Balances { balances }))
}

/// The active key whose secret hashes as `secret`'s, of an account in good standing, with its
/// account's balances: one row per balance, sorted by slug (a key of an account with no
/// balance: one row with null balance columns); none for any other secret. Read in one
/// statement with the other key checks waiting at the same time (`Db::shared_read`).
async fn read_key(store: &Store, secret: &Secret) -> Result<Vec<KeyWithBalanceRow>> {
    let rows = store
        .db()
        .shared_read(
            KEYS_BY_SECRETS.get(store.backend()),
            secret.hash(),
            store.now_utc(),
        )
        .await?;
    Ok(rows
        .iter()
        .map(sqlx::FromRow::from_row)
        .collect::<sqlx::Result<_>>()?)
}

/// [`read_key`]'s statement for several secrets: their hashes in `$2` (a JSON array), the time
/// in `$1`; each row names its hash by its 1-based position in `request`.
static KEYS_BY_SECRETS: PerBackend = PerBackend::new(keys_by_secrets_sql);

fn keys_by_secrets_sql(backend: Backend) -> String {
    format!(
        "SELECT q.n AS request, k.id AS key_row, k.api_key_id, k.account_id, k.last_used_utc, \
         a.client_id, p.slug AS product_slug, b.remaining AS remaining_balance \
         FROM {secrets} q {key} \
         JOIN accounts a ON a.id = k.account_id \
         LEFT JOIN balances b ON b.account_id = k.account_id \
         LEFT JOIN plans p ON p.id = b.plan_id \
         WHERE k.status = 'active' AND (k.expires_utc IS NULL OR k.expires_utc > $1) \
         AND a.standing = 'good' ORDER BY q.n, p.slug",
        secrets = dialect::numbered_json_texts(backend, 2),
        key = dialect::join_unique(backend, "api_keys", "k", "secret_hash", "q.value"),
    )
}

/// The rest of a key check once its row is read (or not found): the client id must be the
/// key's own, compared in constant time; the key's use is recorded.
async fn accept_key(
    store: &Store,
    row: Option<&AuthenticatedKeyRow>,
    client_id: &str,
) -> Result<PartnerAccount> {
    let Some(row) = row else {
        return Err(Error::Unauthorized);
    };
    if !bool::from(row.client_id.as_bytes().ct_eq(client_id.as_bytes())) {
        return Err(Error::Unauthorized);
    }
    record_use(
        store,
        UsedCredential::ApiKey,
        row.key_row,
        row.last_used_utc,
    )
    .await?;
    Ok(PartnerAccount {
        account_id: row.account_id,
        client_id: ClientId::parse("clientId", &row.client_id)?,
        api_key_id: ApiKeyId::parse("apiKeyId", &row.api_key_id)?,
    })
}

/// The key being rolled.
#[derive(sqlx::FromRow)]
struct RolledKeyRow {
    id: i64,
    name: Option<String>,
    expires_utc: Option<i64>,
}

/// An active key found by its secret's hash, with its account.
#[derive(sqlx::FromRow)]
struct AuthenticatedKeyRow {
    key_row: i64,
    api_key_id: String,
    account_id: i64,
    last_used_utc: Option<i64>,
    client_id: String,
}

/// An active key with one of its account's balances (null columns when it has none).
#[derive(sqlx::FromRow)]
struct KeyWithBalanceRow {
    #[sqlx(flatten)]
    key: AuthenticatedKeyRow,
    product_slug: Option<String>,
    remaining_balance: Option<i64>,
}

/// A credential whose last use is recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UsedCredential {
    ApiKey,
    OperatorToken,
}

/// Records a credential's use in `last_used_utc`, at most once per
/// [`LAST_USED_GRANULARITY_SECONDS`]: most requests write nothing, and the conditional UPDATE
/// keeps concurrent requests from writing twice.
pub(crate) async fn record_use(
    store: &Store,
    credential: UsedCredential,
    row_id: i64,
    last_used_utc: Option<i64>,
) -> Result<()> {
    let now = store.now_utc();
    if last_used_utc.is_some_and(|t| now - t < LAST_USED_GRANULARITY_SECONDS) {
        return Ok(());
    }
    let sql = match credential {
        UsedCredential::ApiKey => {
            "UPDATE api_keys SET last_used_utc = $1 WHERE id = $2 \
             AND (last_used_utc IS NULL OR last_used_utc <= $3)"
        }
        UsedCredential::OperatorToken => {
            "UPDATE operator_tokens SET last_used_utc = $1 WHERE id = $2 \
             AND (last_used_utc IS NULL OR last_used_utc <= $3)"
        }
    };
    let statement = sqlx::query(sql)
        .bind(now)
        .bind(row_id)
        .bind(now - LAST_USED_GRANULARITY_SECONDS);
    // Bookkeeping, not worth a wait: written off the request's way while another write holds
    // SQLite's turn.
    store
        .write_one_soon(format!("{credential:?}:{row_id}"), statement)
        .await
}

/// The operator's view: every key of an account, by client id.
pub async fn list_api_keys_for(store: &Store, client_id: &ClientId) -> Result<ApiKeyList> {
    let account_id = account_id_of(store, client_id).await?;
    list_api_keys(store, account_id).await
}

/// The operator's revoke, by client id.
pub async fn revoke_api_key_for(
    store: &Store,
    client_id: &ClientId,
    api_key_id: &str,
    origin: &Origin,
) -> Result<()> {
    let account_id = account_id_of(store, client_id).await?;
    revoke_api_key(store, account_id, api_key_id, origin).await
}

/// Records the `api_key.expired` event of every rolled key whose grace period has ended and
/// whose expiry has not been recorded yet; returns how many. The marker and the events commit
/// together, and the conditional UPDATE lets only one replica claim each key.
pub async fn record_expirations(store: &Store) -> Result<u64> {
    let now = store.now_utc();
    // A cheap read first: most sweeps find nothing and need no write transaction.
    let due: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM api_keys WHERE status = 'active' AND expires_utc <= $1 \
         AND expiry_event_utc IS NULL LIMIT 1",
    )
    .bind(now)
    .fetch_optional(store.pool())
    .await?;
    if due.is_none() {
        return Ok(0);
    }
    let mut tx = store.begin_write().await?;
    #[derive(sqlx::FromRow)]
    struct ExpiredKey {
        account_id: i64,
        api_key_id: String,
        name: Option<String>,
    }
    let rows: Vec<ExpiredKey> = sqlx::query_as(
        "UPDATE api_keys SET expiry_event_utc = $1 WHERE status = 'active' \
         AND expires_utc <= $1 AND expiry_event_utc IS NULL \
         RETURNING account_id, api_key_id, name",
    )
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    let expired = rows.len() as u64;
    for ExpiredKey {
        account_id,
        api_key_id,
        name,
    } in rows
    {
        crate::events::record(
            store,
            &mut tx,
            account_id,
            crate::events::EventData::ApiKeyExpired { api_key_id, name },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(expired)
}
