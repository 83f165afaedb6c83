//! The raw baseline: per request, the SQL statements the library runs for that HTTP request, in
//! the same order, one transaction per request, through a pool configured exactly as the
//! server's (`Store::connect`: same size, same SQLite pragmas, `BEGIN IMMEDIATE` writes), with
//! no HTTP, no routing, no JSON request parsing and no logging. Each statement is copied from
//! the library; the comment above it names where. Keep them in step when the library's SQL
//! changes.
//!
//! Not copied: the server's set-oriented group commit of concurrent license requests
//! (licenses/group.rs: the requests queued in a commit lane share one transaction of a constant
//! number of statements, whatever their count). The baseline is the plain
//! one-transaction-per-request path of licenses.rs, the raw SQL of one request's transaction, so
//! a ratio above 1 is that optimisation at work (`--server-env PARTNER_BILLING_GROUP_COMMIT=false`
//! measures the server without it).
//!
//! The promo baseline is what the issue's target compares with: the insert of a batch's 1000
//! code rows alone, with the library's statement (promo.rs `insert_code_hashes`), 1000 random
//! 64-hex-digit hashes (as HMAC output is) into the real `promo_codes` table under a batch the
//! HTTP run made, in one write transaction.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngCore;
use sqlx::Row;

use partner_billing::domain::{Secret, sha256_hex};
use partner_billing::keys::LAST_USED_GRANULARITY_SECONDS;
use partner_billing::store::{Backend, Store};
use partner_billing::utc::SECONDS_PER_DAY;
use partner_billing::wire::{Balance, Balances, License};

use crate::Scenario;
use crate::seed::{Account, PLAN, Seeded};

/// Codes per promo batch.
const BATCH: usize = 1000;

#[derive(Clone)]
pub struct RawTarget {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    accounts: Arc<Vec<Account>>,
    logins: Arc<Vec<String>>,
    run_tag: String,
    /// A batch row the promo baseline's code rows reference (`promo_codes.batch_row_id`).
    batch_row_id: Option<i64>,
}

/// What the key lookup yields.
struct Authenticated {
    account_id: i64,
    api_key_id: String,
}

type Outcome = Result<Option<Duration>, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl RawTarget {
    /// `batch_row_id`: an existing `promo_batches` row, for the promo baseline.
    pub fn new(store: Store, seeded: &Seeded, batch_row_id: Option<i64>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                accounts: Arc::clone(&seeded.accounts),
                logins: Arc::clone(&seeded.logins),
                run_tag: uuid::Uuid::new_v4().simple().to_string()[..10].to_owned(),
                batch_row_id,
            }),
        }
    }

    pub async fn request(&self, scenario: Scenario, worker: usize, seq: u64) -> Outcome {
        let inner = &*self.inner;
        let account = &inner.accounts[scenario.account(worker, inner.accounts.len())];
        match scenario {
            Scenario::Balances => {
                // The server reads the key and the balances in one statement on a connection
                // kept out of the pool, one statement for the key reads that arrive together
                // (keys.rs `read_key`, db/shared_reads.rs); the baseline keeps the two
                // statements of a read that authenticates first, each through the pool (which
                // pings a connection given back), so a ratio above 1 is that join and that
                // sharing at work. The pgbench comparison of docs/bench/balances.sh is the
                // outside figure.
                let auth = inner.authenticate(account).await?;
                inner.balances(auth.account_id).await?;
                Ok(None)
            }
            Scenario::LicenseSpread | Scenario::LicenseHot => {
                let auth = inner.authenticate(account).await?;
                let key = format!("lb-{}-{}-{worker}-{seq}", inner.run_tag, scenario.name());
                let login = &inner.logins[rand::random::<usize>() % inner.logins.len()];
                inner.issue_license(&auth, &key, login).await?;
                Ok(None)
            }
            Scenario::Promo => {
                let batch_row_id = inner.batch_row_id.ok_or("no promo batch to reference")?;
                inner.insert_codes(batch_row_id).await.map(Some)
            }
        }
    }
}

impl Inner {
    /// keys.rs `authenticate_api_key`: the SHA-256 of the secret, one indexed lookup, the
    /// client id compared, and `last_used_utc` written when older than a minute (one request's
    /// lookup; the server's is shared by the requests that arrive together).
    async fn authenticate(&self, account: &Account) -> Result<Authenticated, String> {
        let secret = Secret::from_presented(account.secret.as_str());
        let row = sqlx::query(
            "SELECT k.id AS key_row, k.api_key_id, k.account_id, k.last_used_utc, a.client_id \
             FROM api_keys k JOIN accounts a ON a.id = k.account_id \
             WHERE k.secret_hash = $1 AND k.status = 'active' AND a.standing = 'good'",
        )
        .bind(secret.hash())
        .fetch_optional(self.store.pool())
        .await
        .map_err(err)?
        .ok_or("unknown key")?;
        let owner: String = row.try_get("client_id").map_err(err)?;
        if owner != account.client_id {
            return Err("client id mismatch".to_owned());
        }
        let key_row: i64 = row.try_get("key_row").map_err(err)?;
        let last_used: Option<i64> = row.try_get("last_used_utc").map_err(err)?;
        let now = self.store.now_utc();
        if last_used.is_none_or(|t| now - t >= LAST_USED_GRANULARITY_SECONDS) {
            sqlx::query(
                "UPDATE api_keys SET last_used_utc = $1 WHERE id = $2 \
                 AND (last_used_utc IS NULL OR last_used_utc <= $3)",
            )
            .bind(now)
            .bind(key_row)
            .bind(now - LAST_USED_GRANULARITY_SECONDS)
            .execute(self.store.pool())
            .await
            .map_err(err)?;
        }
        Ok(Authenticated {
            account_id: row.try_get("account_id").map_err(err)?,
            api_key_id: row.try_get("api_key_id").map_err(err)?,
        })
    }

    /// quota.rs `balances`.
    async fn balances(&self, account_id: i64) -> Result<Balances, String> {
        let rows = sqlx::query(
            "SELECT p.slug, b.remaining FROM balances b JOIN plans p ON p.id = b.plan_id \
             WHERE b.account_id = $1 ORDER BY p.slug",
        )
        .bind(account_id)
        .fetch_all(self.store.pool())
        .await
        .map_err(err)?;
        let balances = rows
            .iter()
            .map(|row| {
                Ok(Balance {
                    product_slug: row.try_get("slug").map_err(err)?,
                    remaining_balance: row.try_get("remaining").map_err(err)?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Balances { balances })
    }

    /// licenses.rs `issue_license` with what it calls, statement by statement.
    async fn issue_license(
        &self,
        auth: &Authenticated,
        key: &str,
        login: &str,
    ) -> Result<License, String> {
        // idempotency.rs `Fingerprint::new("license", [plan, login])`.
        let fingerprint =
            sha256_hex(format!("license|{}:{PLAN}|{}:{login}", PLAN.len(), login.len()).as_bytes());
        // idempotency.rs `begin` → store.rs `begin_write`.
        let mut tx = self.store.begin_write().await.map_err(err)?;
        // idempotency.rs `start`: the advisory lock (PostgreSQL), then the record.
        if self.store.backend() == Backend::Postgres {
            let locked: bool =
                sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))")
                    .bind(format!("account:{}:{key}", auth.account_id))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(err)?;
            if !locked {
                return Err("advisory lock held".to_owned());
            }
        }
        let previous = sqlx::query(
            "SELECT operation, fingerprint, response_body FROM idempotency_records \
             WHERE account_id = $1 AND idempotency_key = $2",
        )
        .bind(auth.account_id)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(err)?;
        if previous.is_some() {
            return Err("idempotency key already recorded".to_owned());
        }
        // plans.rs `find_plan`.
        let plan = sqlx::query(
            "SELECT id, duration_days, redemptions_per_code, code_validity_days FROM plans WHERE slug = $1",
        )
        .bind(PLAN)
        .fetch_optional(&mut *tx)
        .await
        .map_err(err)?
        .ok_or("unknown plan")?;
        let plan_id: i64 = plan.try_get("id").map_err(err)?;
        let duration_days: Option<i64> = plan.try_get("duration_days").map_err(err)?;
        let _: i64 = plan.try_get("redemptions_per_code").map_err(err)?;
        let _: i64 = plan.try_get("code_validity_days").map_err(err)?;
        // plans.rs `find_user`.
        let user_id: i64 = sqlx::query_scalar("SELECT id FROM users WHERE login = $1")
            .bind(login)
            .fetch_optional(&mut *tx)
            .await
            .map_err(err)?
            .ok_or("unknown login")?;
        let now = self.store.now_utc();
        let license_id = partner_billing::domain::LicenseId::generate().to_string();
        let actor = format!("api_key:{}", auth.api_key_id);
        // quota.rs `debit`: the conditional UPDATE…
        let remaining: i64 = sqlx::query_scalar(
            "UPDATE balances SET remaining = remaining - $1 \
             WHERE account_id = $2 AND plan_id = $3 AND remaining >= $1 RETURNING remaining",
        )
        .bind(1_i64)
        .bind(auth.account_id)
        .bind(plan_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(err)?
        .ok_or("insufficient quota")?;
        // … and quota.rs `append_entry`.
        sqlx::query(
            "INSERT INTO ledger_entries \
             (account_id, plan_id, kind, delta, balance_after, actor, reason, reference, created_utc) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(auth.account_id)
        .bind(plan_id)
        .bind("license")
        .bind(-1_i64)
        .bind(remaining)
        .bind(actor.as_str())
        .bind(None::<&str>)
        .bind(Some(license_id.as_str()))
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        // licenses.rs `issue_license`.
        let expires_utc = duration_days.map(|days| now + days * SECONDS_PER_DAY);
        sqlx::query(
            "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, created_utc, starts_utc, expires_utc) \
             VALUES ($1, $2, $3, $4, 'direct', $5, $5, $6)",
        )
        .bind(license_id.as_str())
        .bind(user_id)
        .bind(plan_id)
        .bind(auth.account_id)
        .bind(now)
        .bind(expires_utc)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let license = License {
            license_id,
            plan_slug: PLAN.to_owned(),
            login: login.to_owned(),
            remaining_balance: remaining,
            created_utc: now,
            starts_utc: now,
            expires_utc,
            revoked_utc: None,
        };
        // idempotency.rs `record`.
        let response_body = serde_json::to_string(&license).map_err(err)?;
        sqlx::query(
            "INSERT INTO idempotency_records \
             (account_id, idempotency_key, operation, fingerprint, status, response_body, created_utc) \
             VALUES ($1, $2, $3, $4, 200, $5, $6)",
        )
        .bind(auth.account_id)
        .bind(key)
        .bind("license")
        .bind(fingerprint.as_str())
        .bind(response_body.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        // idempotency.rs `settle`.
        tx.commit().await.map_err(err)?;
        Ok(license)
    }

    /// promo.rs `insert_code_hashes` (its first attempt; a collision never happens at 256
    /// random bits): the hashes as one JSON array parameter, in one write transaction. Times
    /// the transaction (with the array's serialisation, which the library does inside it), not
    /// the drawing of the hashes.
    async fn insert_codes(&self, batch_row_id: i64) -> Result<Duration, String> {
        let mut bytes = vec![0u8; 32 * BATCH];
        rand::thread_rng().fill_bytes(&mut bytes);
        let hashes: Vec<String> = bytes
            .chunks_exact(32)
            .map(|chunk| {
                chunk.iter().fold(String::with_capacity(64), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                })
            })
            .collect();
        let started = Instant::now();
        let mut tx = self.store.begin_write().await.map_err(err)?;
        let hashes = serde_json::to_string(&hashes).map_err(err)?;
        let sql = match self.store.backend() {
            Backend::Sqlite => {
                "INSERT INTO promo_codes (code_hash, batch_row_id) \
                 SELECT value, $1 FROM json_each($2) WHERE true ON CONFLICT (code_hash) DO NOTHING"
            }
            Backend::Postgres => {
                "INSERT INTO promo_codes (code_hash, batch_row_id) \
                 SELECT value, $1 FROM json_array_elements_text($2::json) \
                 ON CONFLICT (code_hash) DO NOTHING"
            }
        };
        let inserted = sqlx::query(sql)
            .bind(batch_row_id)
            .bind(hashes)
            .execute(&mut *tx)
            .await
            .map_err(err)?
            .rows_affected();
        tx.commit().await.map_err(err)?;
        let elapsed = started.elapsed();
        if inserted != BATCH as u64 {
            return Err(format!("inserted {inserted} of {BATCH} rows"));
        }
        Ok(elapsed)
    }
}
