//! `partner-billing admin license …`: the operator's side of licenses.

use anyhow::Result;
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::store::Store;
use partner_billing::subscriptions::{self, Revoker};

use super::Coded;
use crate::output::{Output, fields, opt, opt_utc, utc};

#[derive(Debug, Subcommand)]
pub enum LicenseCommand {
    /// Revokes any license: it grants nothing from now on, and the login's later licenses of
    /// the plan move earlier by its unused time. No unit goes back (adjust the quota if due).
    /// Recorded in the audit trail (`license.revoked`) with the reason; again: nothing changes.
    Revoke {
        /// The license to revoke.
        #[arg(long, value_name = "L")]
        license_id: String,
        /// Why, for the audit trail (1-500 characters, no control characters).
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
}

pub async fn run(store: &Store, cmd: LicenseCommand, out: Output) -> Result<()> {
    let LicenseCommand::Revoke { license_id, reason } = cmd;
    let license = subscriptions::revoke_license(
        store,
        Revoker::Operator { reason: &reason },
        &license_id,
        &Origin::cli(),
    )
    .await
    .map_err(|err| Coded::new(err, String::new()))?;
    out.emit(&license, || {
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
    })
}
