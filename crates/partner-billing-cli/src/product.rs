//! The product side of `partner-billing admin`: operator tokens for the product's backend
//! (`operator-token …`), and the support-staff commands `promo redeem` and `user licenses`,
//! straight on the database through the core library.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use clap::Subcommand;
use partner_billing::crypto::{MasterKey, MasterKeyError, default_master_key_path};
use partner_billing::domain::{IdempotencyKey, Login};
use partner_billing::redemption::{self, RedeemPromoCode};
use partner_billing::store::Store;
use partner_billing::wire::RedeemedLicense;
use partner_billing::{licenses, operators};
use serde::Serialize;
use serde_json::json;

use crate::args;
use crate::output::{Output, fields, opt, opt_utc, table, utc};

const CREATE_HELP: &str = "\
The token (rso_…) is printed this once and stored only as its SHA-256: keep it in the product
backend's secret store. The backend sends it as `Authorization: Bearer rso_…` on
/v1/billing/product/…. Names stay unique, revoked tokens included.";

const REDEEM_HELP: &str = "\
Redeems a promo code on behalf of a registered end user, as the product's backend would (the
code is normalised: case, spaces and hyphens, I/L read as 1, O as 0). Charges no quota: the
reseller paid when it generated the batch. Failed attempts count against the login's limit
(10 a minute), as on the API.

The idempotency key used is printed; running the command again with the same --idempotency-key,
code and login shows the same license and changes nothing. Needs the master key
(--master-key-file); the admin commands never create one.";

#[derive(Debug, Subcommand)]
pub enum OperatorTokenCommand {
    /// Creates an operator token for the product's backend; it is printed this once.
    #[command(after_help = CREATE_HELP)]
    Create {
        /// A unique name (1-64 characters), e.g. product-backend.
        #[arg(long, value_name = "N")]
        name: String,
    },
    /// Lists the operator tokens, revoked ones included (never the tokens themselves).
    List,
    /// Revokes an operator token, from its next request on.
    Revoke {
        /// The token's name.
        #[arg(long, value_name = "N")]
        name: String,
    },
}

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
}

/// Loads the master key: the named file, else `partner-billing.key` beside the SQLite database
/// (else in the working directory). Never creates one: a missing file is an error.
pub fn load_master_key(named: Option<&Path>, database_url: &str) -> Result<MasterKey> {
    let path: PathBuf =
        named.map_or_else(|| default_master_key_path(database_url), Path::to_path_buf);
    MasterKey::load_or_create(&path, false).map_err(|err| match err {
        MasterKeyError::Missing { .. } => anyhow!(
            "{err} (the admin commands never create a master key: pass --master-key-file or set \
             PARTNER_BILLING_MASTER_KEY_FILE to the server's key)"
        ),
        other => other.into(),
    })
}

pub async fn operator_token(store: &Store, cmd: OperatorTokenCommand, out: Output) -> Result<()> {
    match cmd {
        OperatorTokenCommand::Create { name } => {
            let created = match operators::create_operator_token(store, &name).await {
                Ok(created) => created,
                Err(partner_billing::Error::AlreadyExists(_)) => {
                    return Err(anyhow!(
                        "an operator token named {name:?} exists already (names stay unique, \
                         revoked tokens included): choose another name"
                    ));
                }
                Err(err) => return Err(err.into()),
            };
            eprintln!(
                "warning: the token is shown this once and cannot be recovered; store it now, in \
                 the product backend's secrets only"
            );
            out.emit(
                &json!({
                    "name": created.name,
                    "token": created.token.expose(),
                    "createdUtc": created.created_utc,
                }),
                || {
                    fields(&[
                        ("name", created.name.clone()),
                        ("token", created.token.expose().to_owned()),
                        ("created", utc(created.created_utc)),
                    ])
                },
            )
        }
        OperatorTokenCommand::List => {
            let tokens = operators::list_operator_tokens(store).await?;
            out.emit(&json!({ "operatorTokens": tokens }), || {
                let rows: Vec<Vec<String>> = tokens
                    .iter()
                    .map(|t| {
                        vec![
                            t.name.clone(),
                            t.status.clone(),
                            utc(t.created_utc),
                            opt_utc(t.last_used_utc),
                            opt_utc(t.revoked_utc),
                        ]
                    })
                    .collect();
                table(
                    &["NAME", "STATUS", "CREATED", "LAST_USED", "REVOKED"],
                    &rows,
                )
            })
        }
        OperatorTokenCommand::Revoke { name } => {
            operators::revoke_operator_token(store, &name)
                .await
                .map_err(|err| match err {
                    partner_billing::Error::NotFound(_) => {
                        anyhow!("no operator token named {name:?}")
                    }
                    other => other.into(),
                })?;
            out.emit(&json!({ "name": name, "revoked": true }), || {
                format!("revoked operator token {name}; it is refused from its next request on")
            })
        }
    }
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

pub async fn promo(store: &Store, cmd: PromoCommand, out: Output) -> Result<()> {
    let PromoCommand::Redeem {
        code,
        login,
        idempotency_key,
    } = cmd;
    let key = idempotency_key.unwrap_or_else(IdempotencyKey::generate);
    let request = RedeemPromoCode::new(&code, login, key.clone());
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

pub async fn user_licenses(store: &Store, login: &Login, out: Output) -> Result<()> {
    let list = licenses::user_licenses(store, login)
        .await
        .map_err(|err| Coded::new(err, String::new()))?;
    out.emit(&list, || {
        let rows: Vec<Vec<String>> = list
            .licenses
            .iter()
            .map(|l| {
                vec![
                    l.license_id.clone(),
                    l.plan_slug.clone(),
                    l.source.clone(),
                    opt(l.client_id.as_deref()),
                    opt(l.batch_id.as_deref()),
                    utc(l.created_utc),
                    opt_utc(l.expires_utc),
                ]
            })
            .collect();
        table(
            &[
                "LICENSE_ID",
                "PLAN",
                "SOURCE",
                "RESELLER",
                "BATCH_ID",
                "CREATED",
                "EXPIRES",
            ],
            &rows,
        )
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

/// A library error shown with its API code first (`Promo.CodeNotFound: promo code not found`),
/// keeping the error as its source so the exit status can tell a validation failure.
#[derive(Debug)]
struct Coded {
    err: partner_billing::Error,
    note: String,
}

impl Coded {
    fn new(err: partner_billing::Error, note: String) -> Self {
        Self { err, note }
    }
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.err.code() {
            Some(code) => write!(f, "{}: {}{}", code.as_str(), self.err, self.note),
            None => write!(f, "{}{}", self.err, self.note),
        }
    }
}

impl std::error::Error for Coded {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}
