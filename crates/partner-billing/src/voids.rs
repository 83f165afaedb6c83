//! Voiding promo codes (docs/design.md, "Reading back and voiding"): a reseller withdraws a
//! whole batch, or listed codes, of its own. A voided code redeems as `Promo.CodeVoided`;
//! licenses already redeemed from it stay; no unit is returned. Voiding again changes nothing.
//!
//! Neither write takes an idempotency key: each sets a time once (`voided_utc IS NULL`), so a
//! repeat is already harmless.

use std::collections::HashSet;

use crate::audit::{Action, Entry, Origin};
use crate::db::{dialect, json_param};
use crate::domain::InvalidField;
use crate::error::Result;
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

/// Voids one of the account's batches and answers it as the list shows it. Another
/// account's, an unknown or a malformed batch id is
/// [`Error::PromoBatchNotFound`](crate::Error::PromoBatchNotFound); a batch voided before is
/// answered unchanged.
pub async fn void_batch(
    store: &Store,
    account_id: i64,
    batch_id: &str,
    origin: &Origin,
) -> Result<PromoBatchSummary> {
    let batch_id = reads::parse_batch_id(batch_id)?;
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
        written = Some(
            Entry::new(Action::PromoBatchVoided, Some(account_id))
                .id("batchId", batch_id.to_string())
                .id("orderPublicId", voided.order_public_id.clone())
                .id("productSlug", voided.plan_slug.clone())
                .write(store, &mut tx, origin)
                .await?,
        );
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
    let hashes: Vec<&str> = hashed.iter().filter_map(|(_, h)| h.as_deref()).collect();
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
    let newly_voided = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE promo_codes SET voided_utc = $3 WHERE code_hash IN \
         (SELECT c.code_hash FROM promo_codes c WHERE {own_codes}) AND voided_utc IS NULL"
    )))
    .bind(account_id)
    .bind(param.as_str())
    .bind(store.now_utc())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // The trail counts the codes; it never names one.
    let mut written = None;
    if newly_voided > 0 {
        written = Some(
            Entry::new(Action::PromoCodesVoided, Some(account_id))
                .value("voided", newly_voided)
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
