//! The recovery of a batch's codes: sealed (XChaCha20-Poly1305 under the master key, bound to
//! the batch id) in the batch's transaction, opened when the same key is retried within 72
//! hours, purged after. Plaintext codes never reach a table.

use super::code::display_code;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::idempotency::Outcome;
use crate::limits::PROMO_RECOVERY_WINDOW_SECONDS;
use crate::store::Store;
use crate::wire::{PromoBatch, PromoCode};

/// The batch's codes sealed for its recovery payload, hex-encoded.
pub(super) fn seal_codes(key: &MasterKey, batch_id: &str, codes: &[String]) -> Result<String> {
    let plaintext = serde_json::to_vec(codes).map_err(|_| Error::PromoGenerationFailed)?;
    let sealed = key
        .seal(&plaintext, batch_id.as_bytes())
        .map_err(|_| Error::PromoGenerationFailed)?;
    Ok(hex::encode(sealed))
}

/// The codes of a recovery payload sealed by [`seal_codes`].
fn open_codes(key: &MasterKey, batch_id: &str, sealed: &str) -> Result<Vec<String>> {
    let plaintext = hex::decode(sealed)
        .ok()
        .and_then(|bytes| key.open(&bytes, batch_id.as_bytes()).ok())
        .ok_or_else(|| {
            Error::Internal("recovery payload cannot be opened with this master key".to_owned())
        })?;
    serde_json::from_slice(&plaintext)
        .map_err(|e| Error::Internal(format!("recovery payload unreadable: {e}")))
}

/// Rebuilds the original response from the stored outcome and the sealed codes.
pub(super) async fn replay(
    store: &Store,
    key: &MasterKey,
    body: &str,
) -> Result<Outcome<PromoBatch>> {
    let mut batch: PromoBatch = serde_json::from_str(body)
        .map_err(|e| Error::Internal(format!("stored batch unreadable: {e}")))?;
    let expired = || Error::PromoCodesExpired {
        order_public_id: batch.order_public_id.clone(),
        batch_id: batch.batch_id.clone(),
    };
    if store.now_utc() > batch.created_utc + PROMO_RECOVERY_WINDOW_SECONDS {
        // Past the window: make sure the payload is gone even if the purge has not run yet.
        store
            .write_one(
                sqlx::query(
                    "DELETE FROM promo_recovery_payloads WHERE batch_row_id = \
             (SELECT id FROM promo_batches WHERE batch_id = $1)",
                )
                .bind(batch.batch_id.as_str()),
            )
            .await?;
        return Err(expired());
    }
    let sealed: Option<String> = sqlx::query_scalar(
        "SELECT r.sealed_codes FROM promo_recovery_payloads r JOIN promo_batches b ON b.id = r.batch_row_id \
         WHERE b.batch_id = $1",
    )
    .bind(batch.batch_id.as_str())
    .fetch_optional(store.pool())
    .await?;
    let Some(sealed) = sealed else {
        return Err(expired());
    };
    let codes = open_codes(key, &batch.batch_id, &sealed)?;
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
    let result = store
        .write_one(
            sqlx::query("DELETE FROM promo_recovery_payloads WHERE purge_after_utc < $1")
                .bind(store.now_utc()),
        )
        .await?;
    if result.rows_affected() > 0 {
        tracing::info!(
            purged = result.rows_affected(),
            "expired recovery payloads purged"
        );
    }
    Ok(result.rows_affected())
}
