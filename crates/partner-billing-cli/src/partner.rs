//! Reseller commands with an API key: `balance` and `license issue`, through the SDK
//! (`promo generate` lives in `promo.rs`).

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use partner_billing::domain::{ClientId, IdempotencyKey, Login, PlanSlug};
use partner_billing::wire::{License, LicenseRecord};
use partner_billing_client::{Credentials, PartnerClient};
use serde::Serialize;

use crate::args::{self, Remote, usage};
use crate::output::{Output, fields, opt, opt_utc, table, utc};

/// The API key's client id; the secret comes from `PARTNER_BILLING_SECRET` only.
#[derive(Debug, Args)]
pub struct ClientIdOpt {
    /// The account's client id (rsc_…).
    #[arg(long, env = "PARTNER_BILLING_CLIENT_ID", value_name = "C", value_parser = args::client_id)]
    pub client_id: Option<ClientId>,
}

#[derive(Debug, Args)]
pub struct BalanceArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct LicenseArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: LicenseCommand,
}

#[derive(Debug, Subcommand)]
pub enum LicenseCommand {
    /// Grants one subscription to a registered login; costs one unit of the plan.
    Issue {
        /// The plan's slug (a product from `balance`).
        #[arg(long, value_name = "P", value_parser = args::plan_slug)]
        plan: PlanSlug,
        /// The registered end user who receives the subscription.
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
        /// Reuse the key a failed run printed to retry it safely; generated when absent.
        #[arg(long, value_name = "K", value_parser = args::idempotency_key)]
        idempotency_key: Option<IdempotencyKey>,
        #[command(flatten)]
        auth: ClientIdOpt,
    },
    /// Lists the account's licenses, newest first, one page at a time.
    List(crate::reads::LicenseListArgs),
    /// Shows one of the account's licenses.
    Show(crate::reads::LicenseShowArgs),
    /// Revokes one of the account's licenses (issued by it or redeemed from its codes); the
    /// login's later licenses of the plan move earlier by the unused time. No unit comes back.
    Revoke {
        /// The license to revoke.
        #[arg(long, value_name = "L")]
        license_id: String,
        #[command(flatten)]
        auth: ClientIdOpt,
    },
}

/// The API key: the client id from `--client-id` / `PARTNER_BILLING_CLIENT_ID`, the secret
/// from `PARTNER_BILLING_SECRET` alone.
pub(crate) fn client(base_url: &str, auth: ClientIdOpt) -> Result<PartnerClient> {
    let client_id = auth
        .client_id
        .ok_or_else(|| usage("no client id: set PARTNER_BILLING_CLIENT_ID or pass --client-id"))?;
    let secret = std::env::var("PARTNER_BILLING_SECRET")
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| usage("no API secret: set PARTNER_BILLING_SECRET"))?;
    Ok(PartnerClient::new(
        base_url,
        Credentials::new(client_id.as_str(), secret),
    )?)
}

pub async fn balance(base_url: &str, args: BalanceArgs, out: Output) -> Result<ExitCode> {
    let balances = client(base_url, args.auth)?.balances().await?;
    out.emit(&balances, || {
        let rows: Vec<Vec<String>> = balances
            .balances
            .iter()
            .map(|b| vec![b.product_slug.clone(), b.remaining_balance.to_string()])
            .collect();
        table(&["PRODUCT", "REMAINING"], &rows)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A license with the idempotency key it was issued under.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IssuedLicense<'a> {
    #[serde(flatten)]
    license: &'a License,
    idempotency_key: &'a str,
    replayed: bool,
}

/// A failed write as one line that carries the idempotency key: for an unknown outcome, how to
/// retry it without a second charge.
pub(crate) fn write_failure(
    err: &partner_billing_client::Error,
    key: &IdempotencyKey,
) -> anyhow::Error {
    let text = err.to_string();
    let text = text.trim_end_matches('.');
    if err.is_definite() && says_nothing_was_charged(text) {
        anyhow!("{text} (idempotency key {key})")
    } else if err.is_definite() {
        anyhow!("{text} (nothing was charged; idempotency key {key})")
    } else {
        anyhow!("{text}; the outcome is unknown: retry with --idempotency-key {key}")
    }
}

/// Whether the service's own message already says that nothing was charged (as a refused
/// perpetual license's and a failed generation's do), so the line does not say it twice.
pub(crate) fn says_nothing_was_charged(text: &str) -> bool {
    text.to_ascii_lowercase().contains("nothing was charged")
}

/// A license as the reseller sees it, one `name: value` line per member.
pub(crate) fn license_fields(license: &LicenseRecord) -> String {
    fields(&[
        ("licenseId", license.license_id.clone()),
        ("plan", license.plan_slug.clone()),
        ("login", license.login.clone()),
        ("source", license.source.clone()),
        ("batchId", opt(license.batch_id.as_deref())),
        ("created", utc(license.created_utc)),
        ("starts", utc(license.starts_utc)),
        ("expires", opt_utc(license.expires_utc)),
        ("revoked", opt_utc(license.revoked_utc)),
    ])
}

pub async fn license(base_url: &str, cmd: LicenseCommand, out: Output) -> Result<ExitCode> {
    let (plan, login, idempotency_key, auth) = match cmd {
        LicenseCommand::Issue {
            plan,
            login,
            idempotency_key,
            auth,
        } => (plan, login, idempotency_key, auth),
        LicenseCommand::List(args) => return crate::reads::license_list(base_url, args, out).await,
        LicenseCommand::Show(args) => return crate::reads::license_show(base_url, args, out).await,
        LicenseCommand::Revoke { license_id, auth } => {
            let license = client(base_url, auth)?.revoke_license(&license_id).await?;
            out.emit(&license, || license_fields(&license))?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    let client = client(base_url, auth)?;
    // Chosen here, not in the SDK, so that a failed run can print it for the retry.
    let key = idempotency_key.unwrap_or_else(IdempotencyKey::generate);
    let issued = match client
        .issue_license(plan.as_str(), login.as_str(), Some(key.as_str()))
        .await
    {
        Ok(issued) => issued,
        Err(err) => return Err(write_failure(&err, &key)),
    };
    let license = &issued.value;
    let shown = IssuedLicense {
        license,
        idempotency_key: &issued.idempotency_key,
        replayed: issued.replayed,
    };
    out.emit(&shown, || {
        let mut pairs = vec![
            ("licenseId", license.license_id.clone()),
            ("plan", license.plan_slug.clone()),
            ("login", license.login.clone()),
            ("remainingBalance", license.remaining_balance.to_string()),
            ("created", utc(license.created_utc)),
            ("starts", utc(license.starts_utc)),
            ("expires", opt_utc(license.expires_utc)),
            ("idempotencyKey", issued.idempotency_key.clone()),
        ];
        if issued.replayed {
            pairs.push((
                "replayed",
                "yes: issued before under this key; nothing charged again".to_owned(),
            ));
        }
        fields(&pairs)
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use partner_billing::wire::Problem;
    use partner_billing_client::Error;

    use super::*;

    fn problem(code: &str, detail: &str) -> Box<Problem> {
        let json = serde_json::json!({
            "type": "about:blank", "title": code, "status": 409, "detail": detail, "code": code,
        });
        Box::new(serde_json::from_value(json).unwrap())
    }

    #[test]
    fn a_refusal_says_once_that_nothing_was_charged() {
        let key = IdempotencyKey::parse("idempotencyKey", "order-0001").unwrap();
        let held = Error::LicenseAlreadyActive {
            problem: problem(
                "License.AlreadyActive",
                "The login already holds an unrevoked license of this perpetual plan; nothing was charged.",
            ),
        };
        let text = write_failure(&held, &key).to_string();
        assert_eq!(text.matches("nothing was charged").count(), 1, "{text}");
        assert!(text.ends_with("(idempotency key order-0001)"), "{text}");
        let empty = Error::InsufficientQuota {
            problem: problem("Reseller.InsufficientQuota", "The balance is 0."),
        };
        let text = write_failure(&empty, &key).to_string();
        assert!(
            text.ends_with("(nothing was charged; idempotency key order-0001)"),
            "{text}"
        );
    }
}
