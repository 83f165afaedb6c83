//! Voiding promo codes (docs/design.md, "Reading back and voiding"): a reseller withdraws a
//! whole batch, or listed codes, of its own; the operator withdraws any batch, with a reason.
//! A voided code redeems as `Promo.CodeVoided`; licenses already redeemed from it stay; no unit
//! is returned. Voiding again changes nothing.
//!
//! Neither write takes an idempotency key: each sets a time once (`voided_utc IS NULL`), so a
//! repeat is already harmless.

use std::collections::{BTreeSet, HashSet};

use crate::audit::{Action, Entry, Origin, parse_reason};
use crate::db::{dialect, json_param};
use crate::domain::{InvalidField, PromoBatchId};
use crate::error::{Error, Result};
use crate::events::{self, EventData};
use crate::limits::{PROMO_CODE_INPUT_MAX_CHARS, VOID_CODES_MAX};
use crate::promo::normalize_code;
use crate::reads;
use crate::store::Store;
use crate::wire::{PromoBatchSummary, VoidPromoCodesResult};

/// What the event of a newly voided batch names.
#[derive(sqlx::FromRow)]
struct VoidedBatch {
    order_public_id: String,
    plan_slug: String,
}

/// Who voids a batch: its reseller (its own batches only) or the operator (any, with a reason
/// for the record: 1-500 characters, no control characters, as for a correction).
#[derive(Debug, Clone, Copy)]
pub enum Voider<'a> {
    Reseller { account_id: i64 },
    Operator { reason: &'a str },
}

/// Voids a batch and answers it as the list shows it. For a reseller, another account's or an
/// unknown batch id is [`Error::PromoBatchNotFound`]; for the operator, an unknown one. A batch
/// voided before is answered unchanged. A void that changes the batch writes its
/// `promo_batch.voided` entry (by `origin`'s actor, with the operator's reason) and event in
/// the same transaction; a repeat writes neither. A malformed id is not found either.
pub async fn void_batch(
    store: &Store,
    voider: Voider<'_>,
    batch_id: &str,
    origin: &Origin,
) -> Result<PromoBatchSummary> {
    let batch_id = reads::parse_batch_id(batch_id)?;
    let (account_id, reason) = match voider {
        Voider::Reseller { account_id } => (account_id, None),
        Voider::Operator { reason } => {
            let reason = parse_reason(reason)?;
            (batch_owner(store, &batch_id).await?, Some(reason))
        }
    };
    let mut tx = store.begin_write().await?;
    let now = store.now_utc();
    let voided: Option<VoidedBatch> = sqlx::query_as(
        "UPDATE promo_batches SET voided_utc = $3 \
         WHERE account_id = $1 AND batch_id = $2 AND voided_utc IS NULL \
         RETURNING order_public_id, (SELECT p.slug FROM plans p WHERE p.id = promo_batches.plan_id) AS plan_slug",
    )
    .bind(account_id)
    .bind(batch_id.to_string())
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?;
    let mut written = None;
    if let Some(voided) = voided {
        let mut entry = Entry::new(Action::PromoBatchVoided, Some(account_id))
            .id("batchId", batch_id.to_string())
            .id("orderPublicId", voided.order_public_id.clone())
            .id("productSlug", voided.plan_slug.clone());
        if let Some(reason) = reason {
            entry = entry.text("reason", Some(reason));
        }
        written = Some(entry.write(store, &mut tx, origin).await?);
        events::record(
            store,
            &mut tx,
            account_id,
            EventData::PromoBatchVoided {
                batch_id: batch_id.to_string(),
                order_public_id: voided.order_public_id,
                product_slug: voided.plan_slug,
                voided_utc: now,
            },
        )
        .await?;
        tracing::info!(account_id, batch_id = %batch_id, "promo batch voided");
    }
    tx.commit().await?;
    if let Some(written) = written {
        written.committed(store);
    }
    reads::promo_batch(store, account_id, &batch_id).await
}

/// The account a batch belongs to; an unknown batch is [`Error::PromoBatchNotFound`].
async fn batch_owner(store: &Store, batch_id: &PromoBatchId) -> Result<i64> {
    sqlx::query_scalar("SELECT account_id FROM promo_batches WHERE batch_id = $1")
        .bind(batch_id.to_string())
        .fetch_optional(store.pool())
        .await?
        .ok_or(Error::PromoBatchNotFound)
}

/// Voids each listed code that belongs to one of the account's batches (1–1000 codes, as
/// typed: case, spaces and hyphens do not matter). Every other code — unknown, malformed, or
/// another account's — is answered in `unknown` as it was sent, so the answer tells nothing
/// about codes that are not the caller's.
pub async fn void_codes(
    store: &Store,
    account_id: i64,
    codes: &[String],
    origin: &Origin,
) -> Result<VoidPromoCodesResult> {
    if codes.is_empty() || codes.len() > VOID_CODES_MAX {
        return Err(InvalidField::new("codes", "must hold 1-1000 codes").into());
    }
    let key = store.master_key()?;
    // Each sent code with its lookup hash; malformed ones have none.
    let hashed: Vec<(&String, Option<String>)> = codes
        .iter()
        .map(|code| {
            let hash = (code.chars().count() <= PROMO_CODE_INPUT_MAX_CHARS)
                .then(|| normalize_code(code))
                .flatten()
                .map(|normalised| key.code_hash(&normalised));
            (code, hash)
        })
        .collect();
    // Sorted and once each: concurrent voids of overlapping codes lock their rows in one order.
    let mut hashes: Vec<&str> = hashed.iter().filter_map(|(_, h)| h.as_deref()).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let set = dialect::json_text_elements(store.backend(), 2);
    let own_codes = format!(
        "c.code_hash IN {set} AND c.batch_row_id IN (SELECT id FROM promo_batches WHERE account_id = $1)"
    );
    let param = json_param(&hashes)?;
    let mut tx = store.begin_write().await?;
    let own: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT c.code_hash FROM promo_codes c WHERE {own_codes}"
    )))
    .bind(account_id)
    .bind(param.as_str())
    .fetch_all(&mut *tx)
    .await?;
    // The batch of each code voided now (one row per code).
    let newly_voided: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "UPDATE promo_codes SET voided_utc = $3 WHERE code_hash IN \
         (SELECT c.code_hash FROM promo_codes c WHERE {own_codes}) AND voided_utc IS NULL \
         RETURNING (SELECT b.batch_id FROM promo_batches b WHERE b.id = promo_codes.batch_row_id)"
    )))
    .bind(account_id)
    .bind(param.as_str())
    .bind(store.now_utc())
    .fetch_all(&mut *tx)
    .await?;
    // The trail counts the codes and names their batches; it never names a code.
    let mut written = None;
    if !newly_voided.is_empty() {
        let batch_ids: BTreeSet<&str> = newly_voided.iter().map(String::as_str).collect();
        written = Some(
            Entry::new(Action::PromoCodesVoided, Some(account_id))
                .value("voided", newly_voided.len())
                .value("batchIds", Vec::from_iter(batch_ids))
                .write(store, &mut tx, origin)
                .await?,
        );
    }
    tx.commit().await?;
    if let Some(written) = written {
        written.committed(store);
    }
    let own: HashSet<String> = own.into_iter().collect();
    let unknown = hashed
        .iter()
        .filter(|(_, hash)| hash.as_ref().is_none_or(|h| !own.contains(h)))
        .map(|(code, _)| (*code).clone())
        .collect();
    Ok(VoidPromoCodesResult {
        voided: own.len() as i64,
        unknown,
    })
}
