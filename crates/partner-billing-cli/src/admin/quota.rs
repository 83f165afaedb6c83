//! `partner-billing admin quota …`: crediting prepaid quota and reading its ledger.

use anyhow::Result;
use clap::Subcommand;
use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::quota;
use partner_billing::store::Store;
use serde_json::json;

use crate::args;
use crate::output::{Output, opt, table, utc};

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
        #[arg(long, value_name = "U")]
        units: i64,
        /// Why, for the ledger.
        #[arg(long, value_name = "TEXT")]
        reason: String,
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
        } => {
            let balance = quota::credit(store, &client_id, &plan, units, &reason).await?;
            out.emit(&balance, || {
                format!(
                    "credited {units} of {} to {client_id}; remaining balance {}",
                    balance.product_slug, balance.remaining_balance
                )
            })
        }
        QuotaCommand::Ledger { client_id, plan } => {
            let entries = quota::ledger(store, &client_id, plan.as_ref()).await?;
            out.emit(
                &json!({ "clientId": client_id.as_str(), "entries": entries }),
                || {
                    let rows: Vec<Vec<String>> = entries
                        .iter()
                        .map(|e| {
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
                        })
                        .collect();
                    table(
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
                        &rows,
                    )
                },
            )
        }
    }
}
