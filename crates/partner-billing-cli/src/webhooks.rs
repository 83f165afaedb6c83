//! `partner-billing webhooks …` and `partner-billing alerts …`: webhook endpoints and
//! low-balance alerts through a reseller panel session (the one `keys login` saved, or
//! `PARTNER_BILLING_SESSION_TOKEN`).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use partner_billing::wire::{WebhookDeliveryList, WebhookEndpointList};
use serde_json::json;

use crate::keys::{panel, session_error};
use crate::output::{Output, fields, opt, opt_utc, table, utc};
use crate::session::{PanelRemote, SessionFile};

#[derive(Debug, Args)]
pub struct WebhooksArgs {
    #[command(flatten)]
    pub panel: PanelRemote,

    #[command(subcommand)]
    command: WebhooksCommand,
}

#[derive(Debug, Subcommand)]
enum WebhooksCommand {
    /// Registers an endpoint; its signing secret is printed this once.
    Add {
        /// Where to POST events: https:// on a public address.
        #[arg(long, value_name = "URL")]
        url: String,
        /// An event type to send (repeat, or separate with commas), e.g. license.issued.
        #[arg(
            long = "event",
            value_name = "TYPE",
            value_delimiter = ',',
            required = true
        )]
        events: Vec<String>,
        /// A label for the endpoint.
        #[arg(long, value_name = "TEXT")]
        description: Option<String>,
    },
    /// Lists the account's endpoints (never their secrets).
    List,
    /// Deletes an endpoint: nothing more is sent to it.
    Remove {
        /// The endpoint (rwe_…).
        #[arg(long, value_name = "ID")]
        id: String,
    },
    /// Sends a webhook.test event to an endpoint.
    Test {
        /// The endpoint (rwe_…).
        #[arg(long, value_name = "ID")]
        id: String,
    },
    /// The last 100 delivery attempts to an endpoint, newest first.
    Deliveries {
        /// The endpoint (rwe_…).
        #[arg(long, value_name = "ID")]
        id: String,
    },
}

pub async fn run(base_url: &str, args: WebhooksArgs, out: Output) -> Result<ExitCode> {
    let file = SessionFile::resolve(args.panel.session_file)?;
    let panel = panel(base_url, &file)?;
    match args.command {
        WebhooksCommand::Add {
            url,
            events,
            description,
        } => {
            let events: Vec<&str> = events.iter().map(String::as_str).collect();
            let endpoint = panel
                .create_webhook_endpoint(&url, &events, description.as_deref())
                .await
                .map_err(session_error)?;
            eprintln!(
                "warning: the signing secret is shown this once and cannot be recovered; store it now"
            );
            out.emit(&endpoint, || {
                fields(&[
                    ("webhookEndpointId", endpoint.webhook_endpoint_id.clone()),
                    ("url", endpoint.url.clone()),
                    ("eventTypes", endpoint.event_types.join(",")),
                    ("secret", endpoint.secret.clone()),
                    ("created", utc(endpoint.created_utc)),
                ])
            })?;
        }
        WebhooksCommand::List => {
            let list = panel
                .list_webhook_endpoints()
                .await
                .map_err(session_error)?;
            out.emit(&list, || endpoint_table(&list))?;
        }
        WebhooksCommand::Remove { id } => {
            panel
                .delete_webhook_endpoint(&id)
                .await
                .map_err(session_error)?;
            out.emit(&json!({ "webhookEndpointId": id, "deleted": true }), || {
                format!("deleted webhook endpoint {id}")
            })?;
        }
        WebhooksCommand::Test { id } => {
            panel
                .test_webhook_endpoint(&id)
                .await
                .map_err(session_error)?;
            out.emit(&json!({ "webhookEndpointId": id, "queued": true }), || {
                format!("queued a webhook.test event for {id}")
            })?;
        }
        WebhooksCommand::Deliveries { id } => {
            let list = panel.webhook_deliveries(&id).await.map_err(session_error)?;
            out.emit(&list, || delivery_table(&list))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AlertsArgs {
    #[command(flatten)]
    pub panel: PanelRemote,

    #[command(subcommand)]
    command: AlertsCommand,
}

#[derive(Debug, Subcommand)]
enum AlertsCommand {
    /// Sends a balance.low event when a charge takes the plan's balance below N (0: off).
    Set {
        /// The plan (product slug).
        #[arg(long, value_name = "S")]
        plan: String,
        /// The threshold; 0 turns the alert off.
        #[arg(
            long,
            value_name = "N",
            value_parser = crate::args::in_range(0, partner_billing::limits::LOW_BALANCE_THRESHOLD_MAX)
        )]
        below: i64,
    },
}

pub async fn run_alerts(base_url: &str, args: AlertsArgs, out: Output) -> Result<ExitCode> {
    let file = SessionFile::resolve(args.panel.session_file)?;
    let panel = panel(base_url, &file)?;
    match args.command {
        AlertsCommand::Set { plan, below } => {
            let alert = panel
                .set_low_balance_alert(&plan, below)
                .await
                .map_err(session_error)?;
            out.emit(&alert, || {
                if alert.low_balance_threshold == 0 {
                    format!("low-balance alert for {} off", alert.product_slug)
                } else {
                    format!(
                        "low-balance alert for {} below {}",
                        alert.product_slug, alert.low_balance_threshold
                    )
                }
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn endpoint_table(list: &WebhookEndpointList) -> String {
    let rows: Vec<Vec<String>> = list
        .webhook_endpoints
        .iter()
        .map(|e| {
            vec![
                e.webhook_endpoint_id.clone(),
                e.status.clone(),
                e.event_types.join(","),
                utc(e.created_utc),
                e.url.clone(),
                opt(e.description.as_deref()),
            ]
        })
        .collect();
    table(
        &[
            "WEBHOOK_ENDPOINT_ID",
            "STATUS",
            "EVENTS",
            "CREATED",
            "URL",
            "DESCRIPTION",
        ],
        &rows,
    )
}

fn delivery_table(list: &WebhookDeliveryList) -> String {
    let rows: Vec<Vec<String>> = list
        .deliveries
        .iter()
        .map(|d| {
            vec![
                utc(d.attempted_utc),
                d.event_id.clone(),
                d.event_type.clone(),
                d.attempt.to_string(),
                d.status_code
                    .map_or_else(|| "-".to_owned(), |s| s.to_string()),
                opt(d.error.as_deref()),
                opt_utc(d.next_attempt_utc),
            ]
        })
        .collect();
    table(
        &[
            "ATTEMPTED",
            "EVENT_ID",
            "TYPE",
            "ATTEMPT",
            "STATUS",
            "ERROR",
            "NEXT_ATTEMPT",
        ],
        &rows,
    )
}
