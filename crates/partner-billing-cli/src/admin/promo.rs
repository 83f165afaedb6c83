//! `partner-billing admin promo …`: support staff redeem a promo code on an end user's behalf,
//! as the product's backend would (needs the master key); the operator voids a batch.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::crypto::{MasterKey, MasterKeyError, default_master_key_path};
use partner_billing::db;
use partner_billing::domain::{IdempotencyKey, Login};
use partner_billing::operators;
use partner_billing::redemption::{self, RedeemPromoCode};
use partner_billing::store::Store;
use partner_billing::voids::{self, Voider};
use partner_billing::wire::RedeemedLicense;
use serde::Serialize;

use super::Coded;
use crate::args;
use crate::output::{Output, fields, opt_utc, utc};

const REDEEM_HELP: &str = "\
Redeems a promo code on behalf of a registered end user, as the product's backend would (the
code is normalised: case, spaces and hyphens, I/L read as 1, O as 0). Charges no quota: the
reseller paid when it generated the batch. Failed attempts count against the login's limit
(10 a minute), as on the API.

The idempotency key used is printed; running the command again with the same --idempotency-key,
code and login shows the same license and changes nothing. Needs the master key
(--master-key-file); the admin commands never create one.";

#[derive(Debug, Subcommand)]
pub enum PromoCommand {
    /// Redeems a promo code for a registered login and prints the license granted.
    #[command(after_help = REDEEM_HELP)]
    Redeem {
        /// The code as the user typed it (XXXX-XXXX-XXXX-XXXX).
        #[arg(long, value_name = "C")]
        code: String,
        /// The registered end user who receives the license.
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
        /// Reuse the key a failed run printed to retry it safely; generated when absent.
        #[arg(long, value_name = "K", value_parser = args::idempotency_key)]
        idempotency_key: Option<IdempotencyKey>,
    },
    /// Voids any reseller's batch, as its reseller can: none of its codes redeems any more;
    /// licenses already redeemed stay; nothing is refunded. Recorded in the audit trail
    /// (`promo_batch.voided`) with the reason; again: nothing changes. Prints the batch as the
    /// read API shows it.
    Void {
        /// The batch to void.
        #[arg(long, value_name = "B")]
        batch_id: String,
        /// Why, for the audit trail (1-500 characters, no control characters).
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
}

impl PromoCommand {
    /// Whether the command reads codes, and so needs the master key.
    pub fn needs_master_key(&self) -> bool {
        matches!(self, Self::Redeem { .. })
    }
}

/// Loads the master key: the named file, else `partner-billing.key` beside the SQLite database
/// (else in the working directory). Never creates one: a missing file is an error.
pub fn load_master_key(named: Option<&Path>, database_url: &str) -> Result<MasterKey> {
    let path: PathBuf = named.map_or_else(
        || default_master_key_path(db::sqlite_file_path(database_url)),
        Path::to_path_buf,
    );
    MasterKey::load_or_create(&path, false).map_err(|err| match err {
        MasterKeyError::Missing { .. } => anyhow!(
            "{err} (the admin commands never create a master key: pass --master-key-file or set \
             PARTNER_BILLING_MASTER_KEY_FILE to the server's key)"
        ),
        other => other.into(),
    })
}

/// A redeemed license with the idempotency key it was redeemed under.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Redeemed<'a> {
    #[serde(flatten)]
    license: &'a RedeemedLicense,
    idempotency_key: &'a str,
    replayed: bool,
}

pub async fn run(store: &Store, cmd: PromoCommand, out: Output) -> Result<()> {
    match cmd {
        PromoCommand::Redeem {
            code,
            login,
            idempotency_key,
        } => redeem(store, &code, login, idempotency_key, out).await,
        PromoCommand::Void { batch_id, reason } => void(store, &batch_id, &reason, out).await,
    }
}

async fn void(store: &Store, batch_id: &str, reason: &str, out: Output) -> Result<()> {
    let batch = voids::void_batch(store, Voider::Operator { reason }, batch_id, &Origin::cli())
        .await
        .map_err(|err| Coded::new(err, String::new()))?;
    out.emit(&batch, || {
        fields(&[
            ("batchId", batch.batch_id.clone()),
            ("orderPublicId", batch.order_public_id.clone()),
            ("plan", batch.plan_slug.clone()),
            ("codes", batch.count.to_string()),
            ("redeemed", batch.redeemed.to_string()),
            ("created", utc(batch.created_utc)),
            ("voided", opt_utc(batch.voided_utc)),
        ])
    })
}

async fn redeem(
    store: &Store,
    code: &str,
    login: Login,
    idempotency_key: Option<IdempotencyKey>,
    out: Output,
) -> Result<()> {
    let key = idempotency_key.unwrap_or_else(IdempotencyKey::generate);
    let request = RedeemPromoCode::new(code, login, key.clone());
    let outcome =
        redemption::redeem_promo_code(store, &operators::OperatorIdentity::console(), request)
            .await
            .map_err(|err| redeem_failure(err, &key))?;
    let license = &outcome.value;
    let shown = Redeemed {
        license,
        idempotency_key: key.as_str(),
        replayed: outcome.replayed,
    };
    out.emit(&shown, || {
        let mut pairs = vec![
            ("licenseId", license.license_id.clone()),
            ("plan", license.plan_slug.clone()),
            ("login", license.login.clone()),
            ("source", license.source.clone()),
            ("reseller", license.client_id.clone()),
            ("batchId", license.batch_id.clone()),
            ("created", utc(license.created_utc)),
            ("starts", utc(license.starts_utc)),
            ("expires", opt_utc(license.expires_utc)),
            ("idempotencyKey", key.to_string()),
        ];
        if outcome.replayed {
            pairs.push((
                "replayed",
                "yes: redeemed before under this key; nothing changed".to_owned(),
            ));
        }
        fields(&pairs)
    })
}

/// A failed redemption as one line: its API code, and the idempotency key for a retry.
fn redeem_failure(err: partner_billing::Error, key: &IdempotencyKey) -> anyhow::Error {
    use partner_billing::Error as E;
    let note = match &err {
        E::TooManyAttempts {
            retry_after_seconds,
        } => format!(
            " (too many failed attempts for this login: try again in {retry_after_seconds} s; \
             nothing was redeemed)"
        ),
        E::Unavailable(_) | E::Internal(_) => {
            format!("; the outcome is unknown: retry with --idempotency-key {key}")
        }
        E::RequestInProgress => {
            format!(" (the same key is still running: retry with --idempotency-key {key})")
        }
        _ => format!(" (nothing was redeemed; idempotency key {key})"),
    };
    Coded::new(err, note).into()
}
