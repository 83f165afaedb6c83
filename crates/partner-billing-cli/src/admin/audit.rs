//! `partner-billing admin audit …`: consistency checks; the exit status tells the result.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use partner_billing::quota;
use partner_billing::store::Store;
use serde_json::json;

use crate::output::{Output, table};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Checks that every balance equals the sum of its ledger (exit 1 if not).
    Verify,
}

pub async fn run(store: &Store, cmd: AuditCommand, out: Output) -> Result<ExitCode> {
    let AuditCommand::Verify = cmd;
    let report = quota::audit_verify(store).await?;
    let ok = report.discrepancies.is_empty();
    out.emit(
        &json!({
            "ok": ok,
            "balancesChecked": report.balances_checked,
            "discrepancies": report.discrepancies,
        }),
        || {
            let mut text = format!(
                "{} balance(s) checked, {} discrepancy(ies)",
                report.balances_checked,
                report.discrepancies.len()
            );
            if !ok {
                let rows: Vec<Vec<String>> = report
                    .discrepancies
                    .iter()
                    .map(|d| {
                        vec![
                            d.client_id.clone(),
                            d.product_slug.clone(),
                            d.balance.to_string(),
                            d.ledger_sum.to_string(),
                        ]
                    })
                    .collect();
                text.push('\n');
                text.push_str(&table(
                    &["CLIENT_ID", "PLAN", "BALANCE", "LEDGER_SUM"],
                    &rows,
                ));
            }
            text
        },
    )?;
    if ok {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: {} balance(s) differ from their ledger",
            report.discrepancies.len()
        );
        Ok(ExitCode::FAILURE)
    }
}
