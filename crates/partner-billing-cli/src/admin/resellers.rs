//! `partner-billing admin reseller …`: reseller accounts, their standing and panel password.

use anyhow::{Context, Result};
use clap::Subcommand;
use partner_billing::accounts::{self, Standing};
use partner_billing::audit::Origin;
use partner_billing::domain::{ClientId, Password};
use partner_billing::store::Store;
use serde_json::json;

use super::ClientIdArg;
use crate::args;
use crate::output::{Output, fields, table, utc};

#[derive(Debug, Subcommand)]
pub enum ResellerCommand {
    /// Creates an account; its panel password is read from stdin.
    Create {
        /// The account's name.
        #[arg(long, value_name = "N")]
        name: String,
        /// Read the panel password from stdin (one line). Required.
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// Lists the accounts.
    List,
    /// Shows one account.
    Show(ClientIdArg),
    /// Suspends an account: every request of it is refused from the next one on.
    Suspend(ClientIdArg),
    /// Puts a suspended account back in good standing.
    Reinstate(ClientIdArg),
    /// Replaces the panel password (read from stdin) and ends the account's panel sessions.
    SetPassword {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// Read the panel password from stdin (one line). Required.
        #[arg(long, required = true)]
        password_stdin: bool,
    },
}

impl ResellerCommand {
    /// Whether the command takes a panel password on stdin (read before the database opens).
    pub fn reads_password(&self) -> bool {
        matches!(self, Self::Create { .. } | Self::SetPassword { .. })
    }
}

pub async fn run(
    store: &Store,
    cmd: ResellerCommand,
    password: Option<Password>,
    out: Output,
) -> Result<()> {
    let password = || password.context("internal: password not read");
    match cmd {
        ResellerCommand::Create { name, .. } => {
            let client_id =
                accounts::create_reseller(store, &name, password()?, &Origin::cli()).await?;
            out.emit(&json!({ "clientId": client_id.as_str() }), || {
                format!("created reseller {client_id} ({name})")
            })
        }
        ResellerCommand::List => {
            let resellers = accounts::list_resellers(store).await?;
            out.emit(&json!({ "resellers": resellers }), || {
                let rows: Vec<Vec<String>> = resellers
                    .iter()
                    .map(|r| {
                        vec![
                            r.client_id.clone(),
                            r.standing.clone(),
                            r.active_api_keys.to_string(),
                            utc(r.created_utc),
                            r.name.clone(),
                        ]
                    })
                    .collect();
                table(
                    &["CLIENT_ID", "STANDING", "ACTIVE_KEYS", "CREATED", "NAME"],
                    &rows,
                )
            })
        }
        ResellerCommand::Show(ClientIdArg { client_id }) => {
            let r = accounts::show_reseller(store, &client_id).await?;
            out.emit(&r, || {
                fields(&[
                    ("clientId", r.client_id.clone()),
                    ("name", r.name.clone()),
                    ("standing", r.standing.clone()),
                    ("activeApiKeys", r.active_api_keys.to_string()),
                    ("created", utc(r.created_utc)),
                ])
            })
        }
        ResellerCommand::Suspend(ClientIdArg { client_id }) => {
            standing(store, &client_id, Standing::Suspended, out).await
        }
        ResellerCommand::Reinstate(ClientIdArg { client_id }) => {
            standing(store, &client_id, Standing::Good, out).await
        }
        ResellerCommand::SetPassword { client_id, .. } => {
            accounts::set_password(store, &client_id, password()?, &Origin::cli()).await?;
            out.emit(
                &json!({ "clientId": client_id.as_str(), "passwordChanged": true }),
                || format!("password of {client_id} changed; its panel sessions were ended"),
            )
        }
    }
}

async fn standing(
    store: &Store,
    client_id: &ClientId,
    standing: Standing,
    out: Output,
) -> Result<()> {
    accounts::set_standing(store, client_id, standing, &Origin::cli()).await?;
    let word = match standing {
        Standing::Good => "good",
        Standing::Suspended => "suspended",
    };
    out.emit(
        &json!({ "clientId": client_id.as_str(), "standing": word }),
        || match standing {
            Standing::Good => format!("reseller {client_id} reinstated (standing: good)"),
            Standing::Suspended => format!("reseller {client_id} suspended"),
        },
    )
}
