//! Charging a promo batch: `count` codes bought up front as one unit of work.
//!
//! Codes are drawn, hashed and sealed before the transaction (no lock is held for that); the
//! keyed write then debits `count` units and stores the batch, the hashes, the ledger entry,
//! the sealed recovery payload and the idempotency record together, or none of them.

use std::collections::HashSet;

use uuid::Uuid;

use super::code::{display_code, draw_code, draw_codes};
use super::recovery;
use crate::crypto::MasterKey;
use crate::db::{Tx, dialect};
use crate::domain::{IdempotencyKey, InvalidField, PlanSlug, PromoBatchId};
use crate::error::{Error, Result};
use crate::events::{EventData, Subscribers};
use crate::faults::{FaultPoint, HoldPoint};
use crate::idempotency::{self, Fingerprint, Keyed, KeyedRequest, KeyedWrite, Outcome, Scope};
use crate::keys::PartnerAccount;
use crate::limits::PROMO_RECOVERY_WINDOW_SECONDS;
use crate::plans::cached_plan;
use crate::quota::{Charge, EntryKind, debit};
use crate::store::Store;
use crate::utc::SECONDS_PER_DAY;
use crate::wire::{GeneratePromoBatchRequest, PromoBatch, PromoCode};

/// The most codes one request may buy.
pub const MAX_CODES_PER_BATCH: i64 = crate::limits::PROMO_BATCH_MAX_CODES;

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
        self.sealed = recovery::seal_codes(key, &self.batch_id, &self.codes)?;
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
    let keyed = KeyedRequest {
        scope,
        key: &request.idempotency_key,
        fingerprint: &fingerprint,
    };
    let claim = match idempotency::claim(store, keyed, "promo_batch").await? {
        Keyed::Fresh(claim) => claim,
        Keyed::Replay(body) => return recovery::replay(store, key, &body).await,
    };
    let _permit = store.promo_permit(account.account_id).await?;
    store
        .pass(HoldPoint::PromoTurnTaken, account.account_id)
        .await;
    // A retry is answered from its record without drawing, hashing and sealing 1000 codes.
    if idempotency::has_outcome(store, scope, &request.idempotency_key).await? {
        match idempotency::start(store, &claim, keyed).await? {
            Keyed::Replay(body) => return recovery::replay(store, key, &body).await,
            Keyed::Fresh(write) => write.abandon().await,
        }
    }
    let batch_id = PromoBatchId::generate().to_string();
    let size = usize::try_from(request.count).map_err(|_| Error::PromoGenerationFailed)?;
    let mut drawn = DrawnBatch::draw(store, key, batch_id, size)?;

    let mut write = match idempotency::start(store, &claim, keyed).await? {
        Keyed::Replay(body) => return recovery::replay(store, key, &body).await,
        Keyed::Fresh(write) => write,
    };
    let stored = store_batch(store, key, &mut write, account, &request, &mut drawn).await;
    // The stored outcome holds everything but the codes, which live only in the sealed payload.
    let mut batch = write.commit(stored).await?;
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

/// The effects of a fresh batch: debit, batch row, code hashes and sealed payload, written in
/// the batch's keyed write, which commits them with its idempotency record. Any error leaves
/// the caller to roll it all back.
async fn store_batch(
    store: &Store,
    key: &MasterKey,
    write: &mut KeyedWrite<'_>,
    account: &PartnerAccount,
    request: &GeneratePromoBatch,
    drawn: &mut DrawnBatch,
) -> Result<PromoBatch> {
    let now = write.now_utc();
    let tx = write.tx();
    let plan = cached_plan(store, &request.plan).await?;
    let order_public_id = Uuid::new_v4().to_string();
    let actor = format!("api_key:{}", account.api_key_id);
    let remaining = debit(
        tx,
        &Charge {
            account_id: account.account_id,
            plan_id: plan.id,
            units: request.count,
            kind: EntryKind::PromoBatch,
            actor: &actor,
            reference: &order_public_id,
            now_utc: now,
        },
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
    store
        .pass(HoldPoint::PromoWriteOpen, account.account_id)
        .await;
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
    .bind(now + PROMO_RECOVERY_WINDOW_SECONDS)
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
        let sql = dialect::insert_code_hashes(store.backend());
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

#[cfg(test)]
mod tests {
    use super::*;

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
