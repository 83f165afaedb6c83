//! `partner-billing keys …`: the account's API keys through a reseller panel session.
//!
//! `keys login` asks for the panel password (stdin when piped, else a no-echo prompt) and keeps
//! the session token in a file readable by the user alone; the other commands use
//! `PARTNER_BILLING_SESSION_TOKEN` when set, else that file.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use partner_billing::domain::{ApiKeyId, ClientId};
use partner_billing::limits::ROLL_GRACE_MAX_SECONDS;
use partner_billing::wire::ApiKeyList;
use partner_billing_client::{Error as ApiError, PanelClient};
use serde_json::json;

use crate::args::{self, usage};
use crate::input::read_password;
use crate::output::{Output, fields, opt, opt_utc, table, utc};
use crate::session::{PanelRemote, SessionFile};

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(flatten)]
    pub panel: PanelRemote,

    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Opens a panel session (12 h); the password is read from stdin or a prompt.
    Login {
        /// The account's client id (rsc_…).
        #[arg(long, env = "PARTNER_BILLING_CLIENT_ID", value_name = "C", value_parser = args::client_id)]
        client_id: Option<ClientId>,
    },
    /// Signs out: ends the panel session on the server and deletes the session file.
    Logout,
    /// Creates an API key; its secret is printed this once.
    Create {
        /// A label to tell keys apart (at most 64 characters).
        #[arg(long, value_name = "N")]
        name: Option<String>,
    },
    /// Lists the account's API keys, revoked ones included.
    List,
    /// Rolls an API key: prints a new key (same name, secret shown this once); the old key keeps
    /// working for the grace period, then is refused.
    Roll {
        /// The key to roll (rsk_…).
        #[arg(long, value_name = "K", value_parser = args::api_key_id)]
        api_key_id: ApiKeyId,
        /// How long the old key keeps working: `0` (stop now), seconds, or a number with `s`,
        /// `m`, `h` or `d` (`30m`, `1h`, `24h`, `7d`); at most 7 days [default: 24h]
        #[arg(long, value_name = "DURATION", value_parser = grace_period)]
        expires_in: Option<i64>,
    },
    /// Revokes an API key, from the very next request on.
    Revoke {
        /// The key to revoke (rsk_…).
        #[arg(long, value_name = "K", value_parser = args::api_key_id)]
        api_key_id: ApiKeyId,
    },
}

pub async fn run(base_url: &str, args: KeysArgs, out: Output) -> Result<ExitCode> {
    let file = SessionFile::resolve(args.panel.session_file)?;
    match args.command {
        KeysCommand::Login { client_id } => login(base_url, client_id, &file, out).await?,
        KeysCommand::Logout => logout(base_url, &file, out).await?,
        KeysCommand::Create { name } => {
            let key = panel(base_url, &file)?
                .create_api_key(name.as_deref())
                .await
                .map_err(session_error)?;
            eprintln!(
                "warning: the secret is shown this once and cannot be recovered; store it now, on servers only"
            );
            out.emit(&key, || {
                fields(&[
                    ("apiKeyId", key.api_key_id.clone()),
                    ("clientId", key.client_id.clone()),
                    ("secret", key.secret.clone()),
                    ("name", opt(key.name.as_deref())),
                    ("created", utc(key.created_utc)),
                ])
            })?;
        }
        KeysCommand::List => {
            let list = panel(base_url, &file)?
                .list_api_keys()
                .await
                .map_err(session_error)?;
            out.emit(&list, || key_table(&list))?;
        }
        KeysCommand::Roll {
            api_key_id,
            expires_in,
        } => {
            let key = panel(base_url, &file)?
                .roll_api_key(api_key_id.as_str(), expires_in)
                .await
                .map_err(session_error)?;
            eprintln!(
                "warning: the secret is shown this once and cannot be recovered; store it now, on servers only"
            );
            out.emit(&key, || {
                fields(&[
                    ("apiKeyId", key.api_key_id.clone()),
                    ("clientId", key.client_id.clone()),
                    ("secret", key.secret.clone()),
                    ("name", opt(key.name.as_deref())),
                    ("created", utc(key.created_utc)),
                    ("rolled", api_key_id.to_string()),
                ])
            })?;
        }
        KeysCommand::Revoke { api_key_id } => {
            panel(base_url, &file)?
                .revoke_api_key(api_key_id.as_str())
                .await
                .map_err(session_error)?;
            out.emit(
                &json!({ "apiKeyId": api_key_id.as_str(), "revoked": true }),
                || format!("revoked API key {api_key_id}"),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn login(
    base_url: &str,
    client_id: Option<ClientId>,
    file: &SessionFile,
    out: Output,
) -> Result<()> {
    let client_id = client_id
        .ok_or_else(|| usage("no client id: pass --client-id or set PARTNER_BILLING_CLIENT_ID"))?;
    let mut panel = PanelClient::new(base_url)?;
    let password = read_password(&format!("Panel password for {client_id}: ")).await?;
    let session = panel
        .login(client_id.as_str(), &password)
        .await
        .map_err(|err| match err {
            ApiError::Unauthorized => {
                anyhow!("unauthorized: wrong client id or password, or the account is suspended")
            }
            other => other.into(),
        })?;
    file.store(&session.session_token)?;
    let path = file.path().display().to_string();
    out.emit(
        &json!({
            "clientId": client_id.as_str(),
            "sessionFile": path,
            "expiresUtc": session.expires_utc,
        }),
        || {
            format!(
                "logged in as {client_id}; session saved to {path} (expires {})",
                utc(session.expires_utc)
            )
        },
    )
}

/// Ends the session on the server (an already ended one is fine) and forgets it here.
async fn logout(base_url: &str, file: &SessionFile, out: Output) -> Result<()> {
    let mut panel = panel(base_url, file)?;
    match panel.sign_out().await {
        Ok(()) | Err(ApiError::Unauthorized) => {}
        Err(other) => return Err(other.into()),
    }
    let removed = file.remove()?;
    let path = file.path().display().to_string();
    out.emit(
        &json!({ "signedOut": true, "sessionFile": path, "removed": removed }),
        || format!("signed out; session removed from {path}"),
    )
}

/// A panel client on the stored session.
pub(crate) fn panel(base_url: &str, file: &SessionFile) -> Result<PanelClient> {
    let token = file.token()?;
    Ok(PanelClient::with_session_token(base_url, token)?)
}

/// A rejected session says how to get a new one.
pub(crate) fn session_error(err: ApiError) -> anyhow::Error {
    match err {
        ApiError::Unauthorized => anyhow!(
            "unauthorized: the panel session is expired, revoked or invalid; run `partner-billing keys login`"
        ),
        other => other.into(),
    }
}

/// The API keys as an aligned table.
pub fn key_table(list: &ApiKeyList) -> String {
    let rows: Vec<Vec<String>> = list
        .api_keys
        .iter()
        .map(|k| {
            vec![
                k.api_key_id.clone(),
                k.status.clone(),
                utc(k.created_utc),
                opt_utc(k.last_used_utc),
                opt_utc(k.revoked_utc),
                opt_utc(k.expires_utc),
                opt(k.name.as_deref()),
            ]
        })
        .collect();
    table(
        &[
            "API_KEY_ID",
            "STATUS",
            "CREATED",
            "LAST_USED",
            "REVOKED",
            "EXPIRES",
            "NAME",
        ],
        &rows,
    )
}

/// `--expires-in`: `0`, plain seconds, or a whole number with `s`, `m`, `h` or `d`.
fn grace_period(value: &str) -> Result<i64, String> {
    let invalid = || {
        format!(
            "`{value}` is not a duration: use 0, seconds, or a number with s, m, h or d (30m, 1h, 24h, 7d)"
        )
    };
    let (digits, unit) = match value.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&value[..at], c),
        _ => (value, 's'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let per_unit = match unit {
        's' => 1,
        'm' => 60,
        'h' => 60 * 60,
        'd' => partner_billing::utc::SECONDS_PER_DAY,
        _ => return Err(invalid()),
    };
    let seconds = digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(per_unit))
        .ok_or_else(invalid)?;
    if seconds > ROLL_GRACE_MAX_SECONDS {
        return Err(format!("`{value}` is longer than the 7 days a roll allows"));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::grace_period;

    #[test]
    fn grace_periods() {
        assert_eq!(grace_period("0"), Ok(0));
        assert_eq!(grace_period("90"), Ok(90));
        assert_eq!(grace_period("45s"), Ok(45));
        assert_eq!(grace_period("30m"), Ok(1800));
        assert_eq!(grace_period("1h"), Ok(3600));
        assert_eq!(grace_period("24h"), Ok(86400));
        assert_eq!(grace_period("7d"), Ok(604_800));
        for bad in ["", "h", "-1", "1.5h", "2w", "8d", "604801", "1h30m", " 1h"] {
            assert!(grace_period(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
