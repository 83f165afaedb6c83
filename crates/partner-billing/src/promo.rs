//! Promo batches: `count` codes bought up front as one unit of work (SPEC endpoint 2).
//!
//! Codes are drawn from the OS CSPRNG, hashed (HMAC under the master key) and sealed (AEAD)
//! before the transaction; the transaction then debits `count` units and stores the hashes,
//! the ledger entry, the idempotency record and the sealed recovery payload together, or none
//! of them. Plaintext codes exist only in the response and, sealed, for 72 hours.

use std::collections::HashSet;

use rand::RngCore;
use rand::rngs::OsRng;
use sqlx::Row;
use uuid::Uuid;

use crate::crypto::MasterKey;
use crate::domain::{IdempotencyKey, InvalidField, PlanSlug};
use crate::error::{Error, Result};
use crate::events::{EventData, Subscribers};
use crate::idempotency::{self, Begun, Fingerprint, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::plans::find_plan;
use crate::quota::{EntryKind, debit};
use crate::store::{Backend, FaultPoint, Store, Tx};
use crate::wire::{GeneratePromoBatchRequest, PromoBatch, PromoCode};

/// The most codes one request may buy.
pub const MAX_CODES_PER_BATCH: i64 = crate::limits::PROMO_BATCH_MAX_CODES;

/// How long a batch's plaintext codes can be recovered by retrying with the same key.
pub const RECOVERY_WINDOW_SECONDS: i64 = 72 * 60 * 60;

const SECONDS_PER_DAY: i64 = 86_400;

/// Crockford's base32: no I, L, O or U.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Symbols per code: 16 × 5 bits = 80 bits.
const CODE_SYMBOLS: usize = 16;

/// A parsed batch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratePromoBatch {
    pub plan: PlanSlug,
    pub count: i64,
    pub idempotency_key: IdempotencyKey,
}

impl TryFrom<&GeneratePromoBatchRequest> for GeneratePromoBatch {
    type Error = Error;

    fn try_from(request: &GeneratePromoBatchRequest) -> Result<Self> {
        let plan = PlanSlug::parse("planSlug", &request.plan_slug)?;
        if !(1..=MAX_CODES_PER_BATCH).contains(&request.count) {
            return Err(InvalidField::new("count", "must be between 1 and 1000").into());
        }
        let idempotency_key = IdempotencyKey::parse("idempotencyKey", &request.idempotency_key)?;
        Ok(Self {
            plan,
            count: request.count,
            idempotency_key,
        })
    }
}

/// Normalises a code as typed by a person: upper case, hyphens and spaces dropped, `I`/`L` read
/// as `1` and `O` as `0`. `None` when it cannot be a code.
pub fn normalize_code(input: &str) -> Option<String> {
    let mut out = String::with_capacity(CODE_SYMBOLS);
    for c in input.chars() {
        let c = match c.to_ascii_uppercase() {
            '-' | ' ' => continue,
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        };
        if !c.is_ascii() || !CROCKFORD.contains(&(c as u8)) || out.len() == CODE_SYMBOLS {
            return None;
        }
        out.push(c);
    }
    (out.len() == CODE_SYMBOLS).then_some(out)
}

/// `XXXX-XXXX-XXXX-XXXX`.
pub fn display_code(normalised: &str) -> String {
    let mut out = String::with_capacity(CODE_SYMBOLS + 3);
    for (i, c) in normalised.chars().enumerate() {
        if i > 0 && i % 4 == 0 {
            out.push('-');
        }
        out.push(c);
    }
    out
}

/// 80 random bits as 16 Crockford symbols.
fn draw_code() -> Result<String> {
    Ok(draw_codes(1)?.pop().unwrap_or_default())
}

/// `count` codes from one read of the OS CSPRNG (10 bytes = 80 bits each).
fn draw_codes(count: usize) -> Result<Vec<String>> {
    let mut bytes = vec![0u8; 10 * count];
    OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|_| Error::PromoGenerationFailed)?;
    Ok(bytes
        .chunks_exact(10)
        .map(|chunk| {
            let bits = chunk
                .iter()
                .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
            (0..CODE_SYMBOLS)
                .rev()
                .map(|i| CROCKFORD[((bits >> (i * 5)) & 31) as usize] as char)
                .collect()
        })
        .collect())
}

/// Codes drawn, hashed and sealed: everything the transaction stores.
struct DrawnBatch {
    batch_id: String,
    codes: Vec<String>,
    hashes: Vec<String>,
    sealed: String,
}

impl DrawnBatch {
    fn draw(store: &Store, key: &MasterKey, batch_id: String, count: usize) -> Result<Self> {
        if store.fault(FaultPoint::DrawCodes) {
            return Err(Error::PromoGenerationFailed);
        }
        let mut codes = draw_codes(count)?;
        if store.fault(FaultPoint::Panic) {
            panic!("fault injection: panicking over code {}", codes[0]);
        }
        // A repeat inside one batch (about 2^-61 for 1000 codes) is redrawn.
        let mut seen = HashSet::with_capacity(count);
        for code in &mut codes {
            while !seen.insert(code.clone()) {
                *code = draw_code()?;
            }
        }
        let hashes = codes.iter().map(|c| key.code_hash(c)).collect();
        let mut drawn = Self {
            batch_id,
            codes,
            hashes,
            sealed: String::new(),
        };
        drawn.seal(store, key)?;
        Ok(drawn)
    }

    fn seal(&mut self, store: &Store, key: &MasterKey) -> Result<()> {
        if store.fault(FaultPoint::SealPayload) {
            return Err(Error::PromoGenerationFailed);
        }
        let plaintext =
            serde_json::to_vec(&self.codes).map_err(|_| Error::PromoGenerationFailed)?;
        let sealed = key
            .seal(&plaintext, self.batch_id.as_bytes())
            .map_err(|_| Error::PromoGenerationFailed)?;
        self.sealed = hex::encode(sealed);
        Ok(())
    }

    /// Replaces the codes at `indexes` with fresh ones (after a hash collision) and reseals.
    fn redraw(&mut self, store: &Store, key: &MasterKey, indexes: &[usize]) -> Result<()> {
        for &i in indexes {
            let code = draw_code()?;
            self.hashes[i] = key.code_hash(&code);
            self.codes[i] = code;
        }
        self.seal(store, key)
    }
}

/// Generates a batch, charging `count` units; a retry with the same key returns the original
/// codes for 72 hours, then [`Error::PromoCodesExpired`].
pub async fn generate_promo_batch(
    store: &Store,
    account: &PartnerAccount,
    request: GeneratePromoBatch,
) -> Result<Outcome<PromoBatch>> {
    let key = store.master_key()?;
    let count = request.count.to_string();
    let fingerprint = Fingerprint::new("promo_batch", &[request.plan.as_str(), &count]);
    let scope = Scope::Account(account.account_id);
    let claim = idempotency::claim(store, scope, &request.idempotency_key)?;
    let _permit = store.promo_permit(account.account_id).await?;
    // A retry is answered from its record without drawing, hashing and sealing 1000 codes.
    if idempotency::has_outcome(store, scope, &request.idempotency_key).await? {
        match idempotency::begin(store, &claim, scope, &request.idempotency_key, &fingerprint)
            .await?
        {
            Begun::Replay(body) => return replay(store, key, &body).await,
            Begun::Fresh(tx) => {
                let _ = tx.rollback().await;
            }
        }
    }
    let batch_id = Uuid::new_v4().to_string();
    let size = usize::try_from(request.count).map_err(|_| Error::PromoGenerationFailed)?;
    let mut drawn = DrawnBatch::draw(store, key, batch_id, size)?;

    let begun =
        idempotency::begin(store, &claim, scope, &request.idempotency_key, &fingerprint).await?;
    let mut tx = match begun {
        Begun::Replay(body) => return replay(store, key, &body).await,
        Begun::Fresh(tx) => tx,
    };
    let result = store_batch(
        store,
        key,
        &mut tx,
        account,
        &request,
        scope,
        &fingerprint,
        &mut drawn,
    )
    .await;
    let mut batch = idempotency::settle(tx, result).await?;
    tracing::info!(
        client_id = %account.client_id,
        batch_id = %batch.batch_id,
        order_public_id = %batch.order_public_id,
        plan = %request.plan,
        count = request.count,
        "promo batch generated"
    );
    batch.codes = drawn
        .codes
        .iter()
        .map(|c| PromoCode {
            code: display_code(c),
        })
        .collect();
    Ok(Outcome {
        value: batch,
        replayed: false,
    })
}

/// The transaction of a fresh batch: debit, batch row, code hashes, sealed payload and
/// idempotency record. Any error leaves the caller to roll it all back.
#[allow(clippy::too_many_arguments)]
async fn store_batch(
    store: &Store,
    key: &MasterKey,
    tx: &mut Tx,
    account: &PartnerAccount,
    request: &GeneratePromoBatch,
    scope: Scope<'_>,
    fingerprint: &Fingerprint,
    drawn: &mut DrawnBatch,
) -> Result<PromoBatch> {
    let plan = find_plan(tx, &request.plan).await?;
    let now = store.now_utc();
    let order_public_id = Uuid::new_v4().to_string();
    let actor = format!("api_key:{}", account.api_key_id);
    let remaining = debit(
        tx,
        account.account_id,
        plan.id,
        request.count,
        EntryKind::PromoBatch,
        &actor,
        &order_public_id,
        now,
    )
    .await?;
    let subscribers = Subscribers::load(tx, account.account_id).await?;
    subscribers
        .after_debit(
            store,
            tx,
            plan.id,
            request.plan.as_str(),
            request.count,
            remaining,
        )
        .await?;
    if store.fault(FaultPoint::AfterDebit) {
        return Err(Error::PromoGenerationFailed);
    }
    let batch_row_id: i64 = sqlx::query_scalar(
        "INSERT INTO promo_batches (batch_id, order_public_id, account_id, plan_id, code_count, \
         redemptions_per_code, codes_expire_utc, created_utc) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
    )
    .bind(drawn.batch_id.as_str())
    .bind(order_public_id.as_str())
    .bind(account.account_id)
    .bind(plan.id)
    .bind(request.count)
    .bind(plan.redemptions_per_code)
    .bind(now + plan.code_validity_days * SECONDS_PER_DAY)
    .bind(now)
    .fetch_one(&mut **tx)
    .await?;
    insert_code_hashes(store, key, tx, batch_row_id, drawn).await?;
    if store.fault(FaultPoint::AfterCodes) {
        return Err(Error::PromoGenerationFailed);
    }
    sqlx::query(
        "INSERT INTO promo_recovery_payloads (batch_row_id, sealed_codes, purge_after_utc) VALUES ($1, $2, $3)",
    )
    .bind(batch_row_id)
    .bind(drawn.sealed.as_str())
    .bind(now + RECOVERY_WINDOW_SECONDS)
    .execute(&mut **tx)
    .await?;
    let batch = PromoBatch {
        order_public_id,
        batch_id: drawn.batch_id.clone(),
        plan_slug: request.plan.to_string(),
        codes: Vec::new(),
        remaining_balance: remaining,
        created_utc: now,
    };
    // Never a code in the event: the batch is named by its ids.
    subscribers
        .record(
            store,
            tx,
            EventData::PromoBatchGenerated {
                order_public_id: batch.order_public_id.clone(),
                batch_id: batch.batch_id.clone(),
                product_slug: batch.plan_slug.clone(),
                count: request.count,
                remaining_balance: remaining,
            },
        )
        .await?;
    // The stored outcome holds everything but the codes, which live only in the sealed payload.
    idempotency::record(
        tx,
        scope,
        &request.idempotency_key,
        fingerprint,
        &batch,
        now,
    )
    .await?;
    if store.fault(FaultPoint::BeforeCommit) {
        return Err(Error::PromoGenerationFailed);
    }
    Ok(batch)
}

/// Inserts every hash in one statement; a hash already taken (a collision with another batch,
/// astronomically rare at 80 bits) is redrawn rather than failing the batch.
async fn insert_code_hashes(
    store: &Store,
    key: &MasterKey,
    tx: &mut Tx,
    batch_row_id: i64,
    drawn: &mut DrawnBatch,
) -> Result<()> {
    let mut pending: Vec<usize> = (0..drawn.hashes.len()).collect();
    if store.fault(FaultPoint::CodeCollision) {
        let taken: Option<String> = sqlx::query_scalar("SELECT code_hash FROM promo_codes LIMIT 1")
            .fetch_optional(&mut **tx)
            .await?;
        if let Some(taken) = taken {
            drawn.hashes[0] = taken;
        }
    }
    for _ in 0..5 {
        // One statement with the hashes as one JSON array: the same short SQL for any count,
        // two parameters instead of two thousand.
        let hashes: Vec<&str> = pending.iter().map(|&i| drawn.hashes[i].as_str()).collect();
        let hashes = serde_json::to_string(&hashes)
            .map_err(|e| Error::Internal(format!("code hashes not serialisable: {e}")))?;
        let sql = match store.backend() {
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
        let query = sqlx::query(sql).bind(batch_row_id).bind(hashes);
        let inserted = query.execute(&mut **tx).await?.rows_affected();
        if usize::try_from(inserted).ok() == Some(pending.len()) {
            return Ok(());
        }
        // Some hash was taken by another batch: keep what is ours, redraw the rest.
        let ours: HashSet<String> =
            sqlx::query_scalar("SELECT code_hash FROM promo_codes WHERE batch_row_id = $1")
                .bind(batch_row_id)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .collect();
        pending.retain(|&i| !ours.contains(&drawn.hashes[i]));
        tracing::warn!(
            collisions = pending.len(),
            "promo code hash collision; redrawing"
        );
        drawn.redraw(store, key, &pending)?;
    }
    Err(Error::PromoGenerationFailed)
}

/// Rebuilds the original response from the stored outcome and the sealed codes.
async fn replay(store: &Store, key: &MasterKey, body: &str) -> Result<Outcome<PromoBatch>> {
    let mut batch: PromoBatch = serde_json::from_str(body)
        .map_err(|e| Error::Internal(format!("stored batch unreadable: {e}")))?;
    let expired = || Error::PromoCodesExpired {
        order_public_id: batch.order_public_id.clone(),
        batch_id: batch.batch_id.clone(),
    };
    if store.now_utc() > batch.created_utc + RECOVERY_WINDOW_SECONDS {
        // Past the window: make sure the payload is gone even if the purge has not run yet.
        sqlx::query(
            "DELETE FROM promo_recovery_payloads WHERE batch_row_id = \
             (SELECT id FROM promo_batches WHERE batch_id = $1)",
        )
        .bind(batch.batch_id.as_str())
        .execute(store.pool())
        .await?;
        return Err(expired());
    }
    let row = sqlx::query(
        "SELECT r.sealed_codes FROM promo_recovery_payloads r JOIN promo_batches b ON b.id = r.batch_row_id \
         WHERE b.batch_id = $1",
    )
    .bind(batch.batch_id.as_str())
    .fetch_optional(store.pool())
    .await?;
    let Some(row) = row else {
        return Err(expired());
    };
    let sealed: String = row.try_get("sealed_codes")?;
    let plaintext = hex::decode(sealed)
        .ok()
        .and_then(|bytes| key.open(&bytes, batch.batch_id.as_bytes()).ok())
        .ok_or_else(|| {
            Error::Internal("recovery payload cannot be opened with this master key".to_owned())
        })?;
    let codes: Vec<String> = serde_json::from_slice(&plaintext)
        .map_err(|e| Error::Internal(format!("recovery payload unreadable: {e}")))?;
    batch.codes = codes
        .iter()
        .map(|c| PromoCode {
            code: display_code(c),
        })
        .collect();
    Ok(Outcome {
        value: batch,
        replayed: true,
    })
}

/// Deletes the recovery payloads past their window; returns how many.
pub async fn purge_expired(store: &Store) -> Result<u64> {
    let result = sqlx::query("DELETE FROM promo_recovery_payloads WHERE purge_after_utc < $1")
        .bind(store.now_utc())
        .execute(store.pool())
        .await?;
    if result.rows_affected() > 0 {
        tracing::info!(
            purged = result.rows_affected(),
            "expired recovery payloads purged"
        );
    }
    Ok(result.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_codes_have_the_documented_shape() {
        let code = draw_code().unwrap();
        assert_eq!(code.len(), 16);
        assert!(code.bytes().all(|b| CROCKFORD.contains(&b)));
        let shown = display_code(&code);
        assert_eq!(shown.len(), 19);
        assert_eq!(shown.matches('-').count(), 3);
        assert_eq!(normalize_code(&shown), Some(code));
    }

    #[test]
    fn normalisation_reads_what_people_type() {
        assert_eq!(
            normalize_code("abcd-efgh-jkmn-pqrs").as_deref(),
            Some("ABCDEFGHJKMNPQRS")
        );
        assert_eq!(
            normalize_code(" ABCD EFGH JKMN PQRS ").as_deref(),
            Some("ABCDEFGHJKMNPQRS")
        );
        assert_eq!(
            normalize_code("IiLl-OoO0-1234-5678").as_deref(),
            Some("1111000012345678")
        );
        assert_eq!(
            normalize_code("ABCD-EFGH-JKMN-PQRU"),
            None,
            "U is not Crockford"
        );
        assert_eq!(normalize_code("ABCD-EFGH-JKMN-PQR"), None);
        assert_eq!(normalize_code("ABCD-EFGH-JKMN-PQRST"), None);
        assert_eq!(normalize_code("ÄBCD-EFGH-JKMN-PQRS"), None);
        assert_eq!(normalize_code(""), None);
    }

    #[test]
    fn count_bounds() {
        let request = |count| GeneratePromoBatchRequest {
            plan_slug: "pro".into(),
            count,
            idempotency_key: "batch-key-1".into(),
        };
        for bad in [0, -1, 1001, i64::MAX, i64::MIN] {
            assert!(
                GeneratePromoBatch::try_from(&request(bad)).is_err(),
                "{bad}"
            );
        }
        for good in [1, 10, 1000] {
            assert!(
                GeneratePromoBatch::try_from(&request(good)).is_ok(),
                "{good}"
            );
        }
    }
}
