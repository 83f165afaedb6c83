//! Promo-code redemption (docs/design.md): a registered login trades a code for a license.
//!
//! The code is normalised and looked up by its HMAC; unknown and malformed codes take the same
//! path to the same answer. The per-code limit is a conditional `UPDATE … WHERE redemptions <
//! limit` inside the write transaction, so it holds under any concurrency, on every replica.
//! Redemption charges no quota: the code was paid for when its batch was generated.

pub mod attempts;

use std::fmt;

use crate::db::{Tx, is_unique_violation};
use crate::domain::{IdempotencyKey, LicenseId, Login, PlanId, UserId};
use crate::error::{Error, Result};
use crate::idempotency::{self, Fingerprint, Keyed, KeyedRequest, KeyedWrite, Outcome, Scope};
use crate::operators::OperatorIdentity;
use crate::plans::find_user;
use crate::promo::normalize_code;
use crate::store::Store;
use crate::subscriptions;
use crate::throttle;
use crate::wire::{RedeemPromoCodeRequest, RedeemedLicense};

/// A parsed redemption request. The code is kept as typed; it is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct RedeemPromoCode {
    code: String,
    pub login: Login,
    pub idempotency_key: IdempotencyKey,
}

impl RedeemPromoCode {
    /// A request for `login` with the code as typed. Whether the code is well-formed is not
    /// checked here: a malformed code is answered exactly like an unknown one.
    pub fn new(code: &str, login: Login, idempotency_key: IdempotencyKey) -> Self {
        Self {
            code: code.to_owned(),
            login,
            idempotency_key,
        }
    }

    /// The text whose HMAC is looked up: the normalised code, or the input as typed when it
    /// cannot be a code (then it matches nothing, since every stored code is normalised).
    fn lookup_text(&self) -> String {
        normalize_code(&self.code).unwrap_or_else(|| self.code.clone())
    }
}

impl TryFrom<&RedeemPromoCodeRequest> for RedeemPromoCode {
    type Error = Error;

    fn try_from(request: &RedeemPromoCodeRequest) -> Result<Self> {
        Ok(Self::new(
            &request.code,
            Login::parse("login", &request.login)?,
            IdempotencyKey::parse("idempotencyKey", &request.idempotency_key)?,
        ))
    }
}

impl fmt::Debug for RedeemPromoCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedeemPromoCode")
            .field("code", &"[redacted]")
            .field("login", &self.login)
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}

/// Whether an error is a failed guess, counted against the login's attempts.
fn is_failed_guess(err: &Error) -> bool {
    matches!(
        err,
        Error::CodeNotFound
            | Error::CodeExpired
            | Error::CodeVoided
            | Error::CodeExhausted
            | Error::AlreadyRedeemed
    )
}

/// Redeems a code for a registered login and grants the license (source `promo`, linked to
/// the batch and the reseller that bought it), charging nothing.
///
/// Answers, besides the license: [`Error::UnknownLogin`], [`Error::TooManyAttempts`] (checked
/// before the code), [`Error::CodeNotFound`] (unknown or malformed), [`Error::CodeExpired`],
/// [`Error::AlreadyRedeemed`], [`Error::CodeExhausted`], [`Error::CodeVoided`] (its reseller
/// withdrew the code or its batch; counted as a failed attempt, like an expired code). The same idempotency key with the same
/// request replays the license; with another request it is [`Error::IdempotencyKeyReused`].
pub async fn redeem_promo_code(
    store: &Store,
    operator: &OperatorIdentity,
    request: RedeemPromoCode,
) -> Result<Outcome<RedeemedLicense>> {
    // The key first: a retry of a redemption that happened is answered from its record (and a
    // key reused for another request is refused) before the login is looked up and before any
    // attempt limit is consulted (docs/security.md): it guesses nothing.
    let owner = operator.idempotency_scope();
    if idempotency::has_outcome(store, Scope::Operator(&owner), &request.idempotency_key).await? {
        return redeem_reserved(store, operator, &request, None).await;
    }
    let user_id = {
        let mut conn = store.pool().acquire().await?;
        find_user(&mut conn, &request.login).await?
    };
    let attempt = attempts::reserve(store, user_id).await?;
    // Failed guesses are bounded per operator token too, so spreading them over many logins
    // does not multiply the limit.
    let operator_attempt =
        match throttle::count(store, throttle::FAILED_REDEMPTIONS_PER_OPERATOR, &owner).await {
            Ok(counted) => counted,
            Err(err) => {
                attempt.release(store).await;
                return Err(match err {
                    Error::RateLimited {
                        retry_after_seconds,
                    } => Error::TooManyAttempts {
                        retry_after_seconds,
                    },
                    other => other,
                });
            }
        };
    let result = redeem_reserved(store, operator, &request, Some(user_id)).await;
    match &result {
        Err(err) if is_failed_guess(err) => {
            tracing::info!(operator = %operator.name, outcome = %err, "promo redemption refused");
        }
        _ => {
            attempt.release(store).await;
            if let Err(err) = operator_attempt.take_back(store).await {
                tracing::warn!(error = %err, "a redemption attempt could not be released");
            }
        }
    }
    result
}

/// What a redemption needs to know about a code, read inside its transaction.
#[derive(sqlx::FromRow)]
struct CodeRow {
    redemptions_per_code: i64,
    codes_expire_utc: i64,
    account_id: i64,
    client_id: String,
    batch_id: String,
    plan_id: PlanId,
    plan_slug: String,
    duration_days: Option<i64>,
    /// When the batch or the code was voided by its reseller; `None` while neither is.
    voided_utc: Option<i64>,
}

async fn find_code(tx: &mut Tx, code_hash: &str) -> Result<CodeRow> {
    sqlx::query_as(
        "SELECT b.redemptions_per_code, b.codes_expire_utc, b.account_id, b.batch_id, \
         a.client_id, p.id AS plan_id, p.slug AS plan_slug, p.duration_days, \
         COALESCE(b.voided_utc, c.voided_utc) AS voided_utc \
         FROM promo_codes c JOIN promo_batches b ON b.id = c.batch_row_id \
         JOIN accounts a ON a.id = b.account_id JOIN plans p ON p.id = b.plan_id \
         WHERE c.code_hash = $1",
    )
    .bind(code_hash)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(Error::CodeNotFound)
}

/// The redemption proper, once the attempt is counted.
async fn redeem_reserved(
    store: &Store,
    operator: &OperatorIdentity,
    request: &RedeemPromoCode,
    user_id: Option<UserId>,
) -> Result<Outcome<RedeemedLicense>> {
    let code_hash = store.master_key()?.code_hash(&request.lookup_text());
    // The fingerprint holds the code's HMAC, never the code.
    let fingerprint = Fingerprint::new(
        "promo_redemption",
        &[code_hash.as_str(), request.login.as_str()],
    );
    let owner = operator.idempotency_scope();
    let scope = Scope::Operator(&owner);
    let keyed = KeyedRequest {
        scope,
        key: &request.idempotency_key,
        fingerprint: &fingerprint,
    };
    let claim = match idempotency::claim(store, keyed, "promo_redemption").await? {
        Keyed::Fresh(claim) => claim,
        Keyed::Replay(body) => return idempotency::replayed(&body),
    };
    let mut write = match idempotency::start(store, &claim, keyed).await? {
        Keyed::Replay(body) => return idempotency::replayed(&body),
        Keyed::Fresh(write) => write,
    };
    let granted = async {
        // Looked up here, after the key, when the key had a record before the attempt count.
        let user_id = match user_id {
            Some(user_id) => user_id,
            None => find_user(write.tx(), &request.login).await?,
        };
        grant_license(store, &mut write, operator, request, user_id, &code_hash).await
    }
    .await;
    let license = write.commit(granted).await?;
    tracing::info!(
        operator = %operator.name,
        license_id = %license.license_id,
        batch_id = %license.batch_id,
        client_id = %license.client_id,
        plan = %license.plan_slug,
        "promo code redeemed"
    );
    Ok(Outcome {
        value: license,
        replayed: false,
    })
}

/// Checks the code and grants its license inside the redemption's keyed write.
async fn grant_license(
    store: &Store,
    write: &mut KeyedWrite<'_>,
    operator: &OperatorIdentity,
    request: &RedeemPromoCode,
    user_id: UserId,
    code_hash: &str,
) -> Result<RedeemedLicense> {
    let now = write.now_utc();
    let tx = write.tx();
    let code = find_code(tx, code_hash).await?;
    if code.voided_utc.is_some() {
        return Err(Error::CodeVoided);
    }
    if now > code.codes_expire_utc {
        return Err(Error::CodeExpired);
    }
    let redeemed_before: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM promo_redemptions WHERE code_hash = $1 AND user_id = $2",
    )
    .bind(code_hash)
    .bind(user_id)
    .fetch_one(&mut **tx)
    .await?;
    if redeemed_before > 0 {
        return Err(Error::AlreadyRedeemed);
    }
    // The per-code limit: PostgreSQL re-checks the condition on the locked row, SQLite runs one
    // writer at a time, so concurrent redemptions can never pass it.
    let counted = sqlx::query(
        "UPDATE promo_codes SET redemptions = redemptions + 1 \
         WHERE code_hash = $1 AND redemptions < $2",
    )
    .bind(code_hash)
    .bind(code.redemptions_per_code)
    .execute(&mut **tx)
    .await?;
    if counted.rows_affected() == 0 {
        return Err(Error::CodeExhausted);
    }
    let license_id = LicenseId::generate().to_string();
    // A perpetual plan the login holds already: refused, and the rollback gives the code its
    // redemption back. Else the license starts where the login's latest one of the plan ends.
    let head = subscriptions::lock_head(tx, user_id.get(), code.plan_id.get(), now).await?;
    let period = subscriptions::next_period(head, code.duration_days, now)?;
    sqlx::query(
        "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, batch_id, created_utc, starts_utc, expires_utc) \
         VALUES ($1, $2, $3, $4, 'promo', $5, $6, $7, $8)",
    )
    .bind(license_id.as_str())
    .bind(user_id)
    .bind(code.plan_id)
    .bind(code.account_id)
    .bind(code.batch_id.as_str())
    .bind(now)
    .bind(period.starts_utc)
    .bind(period.expires_utc)
    .execute(&mut **tx)
    .await?;
    subscriptions::extend_head(tx, user_id.get(), code.plan_id.get(), &period).await?;
    sqlx::query(
        "INSERT INTO promo_redemptions (code_hash, user_id, license_id, actor, created_utc) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(code_hash)
    .bind(user_id)
    .bind(license_id.as_str())
    .bind(operator.actor())
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(|e| {
        // The same login redeeming the same code concurrently under another key.
        if is_unique_violation(&e) {
            Error::AlreadyRedeemed
        } else {
            e.into()
        }
    })?;
    crate::events::record(
        store,
        tx,
        code.account_id,
        crate::events::EventData::PromoCodeRedeemed {
            batch_id: code.batch_id.clone(),
            product_slug: code.plan_slug.clone(),
            login: request.login.to_string(),
            license_id: license_id.clone(),
        },
    )
    .await?;
    Ok(RedeemedLicense {
        license_id,
        plan_slug: code.plan_slug,
        login: request.login.to_string(),
        source: "promo".to_owned(),
        client_id: code.client_id,
        batch_id: code.batch_id,
        created_utc: now,
        starts_utc: period.starts_utc,
        expires_utc: period.expires_utc,
        revoked_utc: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(code: &str) -> RedeemPromoCode {
        RedeemPromoCode::new(
            code,
            Login::parse("login", "alice").unwrap(),
            IdempotencyKey::parse("key", "redeem-key-1").unwrap(),
        )
    }

    #[test]
    fn lookup_text_is_normalised_or_left_as_typed() {
        assert_eq!(
            request("abcd efgh-jkmn-pqrs").lookup_text(),
            "ABCDEFGHJKMNPQRS"
        );
        assert_eq!(request("not a code").lookup_text(), "not a code");
        // Malformed input can never equal a normalised code, so it matches no stored hash.
        assert!(normalize_code(&request("not a code").lookup_text()).is_none());
    }

    #[test]
    fn debug_never_shows_the_code() {
        let shown = format!("{:?}", request("CANARY-CODE"));
        assert!(!shown.contains("CANARY"), "{shown}");
    }

    #[test]
    fn only_code_failures_count_as_guesses() {
        assert!(is_failed_guess(&Error::CodeNotFound));
        assert!(is_failed_guess(&Error::AlreadyRedeemed));
        assert!(!is_failed_guess(&Error::RequestInProgress));
        assert!(!is_failed_guess(&Error::TooManyAttempts {
            retry_after_seconds: 1
        }));
    }
}
