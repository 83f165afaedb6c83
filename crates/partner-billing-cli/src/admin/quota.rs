//! `partner-billing admin quota …`: crediting and adjusting prepaid quota (idempotent with a
//! `--reference`), and reading its ledger.

use std::io::BufWriter;

use anyhow::Result;
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::limits::CREDIT_MAX_UNITS;
use partner_billing::quota::{self, Corrected, Correction};
use partner_billing::store::Store;
use serde_json::json;

use crate::args;
use crate::output::{Output, opt, utc};

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Credits units of a plan to an account.
    Credit {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// The plan's slug.
        #[arg(long, value_name = "S", value_parser = args::plan_slug)]
        plan: PlanSlug,
        /// How many units to add (1-1000000000).
        #[arg(
            long,
            value_name = "U",
            allow_negative_numbers = true,
            value_parser = args::in_range(1, CREDIT_MAX_UNITS)
        )]
        units: i64,
        /// Why, for the ledger and the audit trail (1-500 characters, no control characters).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Makes the credit idempotent: the same credit again changes nothing ("replayed");
        /// the reference on a different credit is refused.
        #[arg(long, value_name = "REF")]
        reference: Option<String>,
    },
    /// Corrects a balance by N units, N negative or positive; never below zero.
    Adjust {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// The plan's slug.
        #[arg(long, value_name = "S", value_parser = args::plan_slug)]
        plan: PlanSlug,
        /// Units to add, or with a minus sign to take away (`--units -3`).
        #[arg(
            long,
            value_name = "N",
            allow_negative_numbers = true,
            value_parser = args::adjustment_units
        )]
        units: i64,
        /// Why, for the ledger and the audit trail (1-500 characters, no control characters).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Makes the adjustment idempotent, as for a credit.
        #[arg(long, value_name = "REF")]
        reference: Option<String>,
    },
    /// Shows an account's ledger, oldest first.
    Ledger {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// Only this plan's entries.
        #[arg(long, value_name = "S", value_parser = args::plan_slug)]
        plan: Option<PlanSlug>,
    },
}

pub async fn run(store: &Store, cmd: QuotaCommand, out: Output) -> Result<()> {
    match cmd {
        QuotaCommand::Credit {
            client_id,
            plan,
            units,
            reason,
            reference,
        } => {
            let correction = Correction {
                client_id: &client_id,
                plan: &plan,
                units,
                reason: &reason,
                reference: reference.as_deref(),
            };
            let done = quota::credit(store, &correction, &Origin::cli()).await?;
            emit_correction(out, "credited", &correction, &done)
        }
        QuotaCommand::Adjust {
            client_id,
            plan,
            units,
            reason,
            reference,
        } => {
            let correction = Correction {
                client_id: &client_id,
                plan: &plan,
                units,
                reason: &reason,
                reference: reference.as_deref(),
            };
            let done = quota::adjust(store, &correction, &Origin::cli()).await?;
            emit_correction(out, "adjusted by", &correction, &done)
        }
        QuotaCommand::Ledger { client_id, plan } => {
            let entries = quota::ledger(store, &client_id, plan.as_ref()).await?;
            out.emit_stream(
                &mut BufWriter::new(std::io::stdout()),
                json!({ "clientId": client_id.as_str() }),
                "entries",
                &[
                    "TIME",
                    "PLAN",
                    "KIND",
                    "DELTA",
                    "BALANCE",
                    "ACTOR",
                    "REFERENCE",
                    "REASON",
                ],
                entries,
                |e| {
                    vec![
                        utc(e.created_utc),
                        e.product_slug.clone(),
                        e.kind.clone(),
                        format!("{:+}", e.delta),
                        e.balance_after.to_string(),
                        e.actor.clone(),
                        opt(e.reference.as_deref()),
                        opt(e.reason.as_deref()),
                    ]
                },
            )
            .await
        }
    }
}

/// `{"productSlug","remainingBalance"}` (and `"replayed"` when the command named a reference),
/// or a line saying what happened.
fn emit_correction(
    out: Output,
    verb: &str,
    correction: &Correction<'_>,
    done: &Corrected,
) -> Result<()> {
    let mut shown = json!({
        "productSlug": done.product_slug,
        "remainingBalance": done.remaining_balance,
    });
    if correction.reference.is_some() {
        shown["replayed"] = done.replayed.into();
    }
    out.emit(&shown, || {
        let replayed = if done.replayed {
            " (replayed: this reference was applied before; nothing changed)"
        } else {
            ""
        };
        format!(
            "{verb} {} of {} for {}; remaining balance {}{replayed}",
            correction.units, done.product_slug, correction.client_id, done.remaining_balance
        )
    })
}
