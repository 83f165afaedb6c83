//! `partner-billing account …`: the reseller account through its panel session (the one
//! `keys login` stored, or `PARTNER_BILLING_SESSION_TOKEN`).

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use partner_billing_client::Error as ApiError;
use serde_json::json;

use crate::args::usage;
use crate::input::read_stdin_password;
use crate::keys::{panel, session_error};
use crate::output::Output;
use crate::session::{PanelRemote, SessionFile};

#[derive(Debug, Args)]
pub struct AccountArgs {
    #[command(flatten)]
    pub panel: PanelRemote,

    #[command(subcommand)]
    command: AccountCommand,
}

#[derive(Debug, Subcommand)]
enum AccountCommand {
    /// Changes the panel password; every other session of the account ends.
    Password {
        /// Read the current and the new password from stdin, one per line (required: a
        /// password is never a flag).
        #[arg(long)]
        stdin: bool,
    },
}

pub async fn run(base_url: &str, args: AccountArgs, out: Output) -> Result<ExitCode> {
    let file = SessionFile::resolve(args.panel.session_file)?;
    match args.command {
        AccountCommand::Password { stdin } => {
            if !stdin {
                return Err(usage(
                    "pass --stdin and pipe two lines: the current password, then the new one",
                ));
            }
            let two_lines =
                "pipe two lines into the command: the current password, then the new one";
            let current = read_stdin_password(&format!("no password on stdin: {two_lines}"))?;
            let new = read_stdin_password(&format!(
                "no new password on stdin (the second line): {two_lines}"
            ))?;
            if !(12..=128).contains(&new.chars().count()) {
                return Err(usage("the new password must be 12-128 characters"));
            }
            panel(base_url, &file)?
                .change_password(&current, &new)
                .await
                .map_err(|err| match err {
                    ApiError::ValidationFailed { ref problem }
                        if problem.field.as_deref() == Some("currentPassword") =>
                    {
                        anyhow!("the current password is incorrect")
                    }
                    other => session_error(other),
                })?;
            out.emit(&json!({ "passwordChanged": true }), || {
                "password changed; every other session of the account has ended".to_owned()
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
