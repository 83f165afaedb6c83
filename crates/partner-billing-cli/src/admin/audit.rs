//! `partner-billing admin audit …`: the consistency check (the exit status tells the result)
//! and the audit trail: who changed what, newest first.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use partner_billing::domain::ClientId;
use partner_billing::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use partner_billing::store::Store;
use partner_billing::{audit_log, quota};
use serde_json::json;

use crate::args;
use crate::output::{Output, opt, table, utc};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Checks that every balance equals the sum of its ledger (exit 1 if not).
    Verify,
    /// The audit trail, newest first: who changed what, from where (a page at a time; where
    /// the next page starts is said on stderr, or as `nextCursor` with `--json`).
    Log {
        /// Only this account's entries (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: Option<ClientId>,
        /// Only entries at or after this time (Unix seconds).
        #[arg(long, value_name = "UNIX")]
        since: Option<i64>,
        /// At most this many entries (1-500).
        #[arg(
            long,
            value_name = "N",
            default_value_t = PAGE_LIMIT_DEFAULT,
            value_parser = args::in_range(1, PAGE_LIMIT_MAX)
        )]
        limit: i64,
        /// Continue after the last entry of an earlier page (its `nextCursor`).
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
    },
}

pub async fn run(store: &Store, cmd: AuditCommand, out: Output) -> Result<ExitCode> {
    match cmd {
        AuditCommand::Verify => verify(store, out).await,
        AuditCommand::Log {
            client_id,
            since,
            limit,
            cursor,
        } => {
            let page = audit_log::operator_log(
                store,
                client_id.as_ref(),
                since,
                Some(limit),
                cursor.as_deref(),
            )
            .await?;
            out.emit(
                &json!({ "entries": page.entries, "nextCursor": page.next_cursor }),
                || {
                    let rows: Vec<Vec<String>> = page
                        .entries
                        .iter()
                        .map(|e| {
                            vec![
                                utc(e.created_utc),
                                e.action.clone(),
                                e.actor.clone(),
                                opt(e.client_id.as_deref()),
                                opt(e.source_address.as_deref()),
                                opt(e.request_id.as_deref()),
                                serde_json::to_string(&e.ids).unwrap_or_default(),
                                e.details.to_string(),
                            ]
                        })
                        .collect();
                    table(
                        &[
                            "TIME",
                            "ACTION",
                            "ACTOR",
                            "CLIENT_ID",
                            "SOURCE",
                            "REQUEST_ID",
                            "IDS",
                            "DETAILS",
                        ],
                        &rows,
                    )
                },
            )?;
            out.more(page.next_cursor.as_deref());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn verify(store: &Store, out: Output) -> Result<ExitCode> {
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
