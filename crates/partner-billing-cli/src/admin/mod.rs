//! `partner-billing admin …`: operator commands, straight on the database through the core
//! library. The command syntax is a stable contract (docs/design.md).
//!
//! One file per noun of the command line (`plan`, `user`, `license`, `reseller`, `quota`, `key`,
//! `operator-token`, `promo`, `audit`), each with its subcommand enum and its handler; this one
//! holds the shared flags, opens the database and dispatches.

mod audit;
mod keys;
mod licenses;
mod operator_tokens;
mod plans;
mod promo;
mod quota;
mod resellers;
mod users;

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use partner_billing::clock::Clock;
use partner_billing::crypto::default_master_key_path;
use partner_billing::db;
use partner_billing::domain::{ClientId, Password};
use partner_billing::key_check::{KeyFile, open_master_key, read_key_file};
use partner_billing::store::Store;
use serde_json::json;

use crate::args;
use crate::input::read_password;
use crate::output::Output;

/// Operator commands, run directly on the database.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The database: sqlite://FILE (created if missing) or postgres://…
    #[arg(
        long,
        global = true,
        env = "PARTNER_BILLING_DATABASE_URL",
        default_value = "sqlite://partner-billing.db",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub database_url: String,

    /// The master key file: every command checks it is the database's key (`promo redeem`
    /// uses it); never created by these commands
    /// [default: partner-billing.key beside the SQLite database, else in the working directory]
    #[arg(
        long,
        global = true,
        env = "PARTNER_BILLING_MASTER_KEY_FILE",
        value_name = "FILE"
    )]
    pub master_key_file: Option<PathBuf>,

    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Plans (products) and their promo policy.
    #[command(subcommand)]
    Plan(plans::PlanCommand),
    /// End-user logins.
    #[command(subcommand)]
    User(users::UserCommand),
    /// Licenses: revocation.
    #[command(subcommand)]
    License(licenses::LicenseCommand),
    /// Reseller accounts.
    #[command(subcommand)]
    Reseller(resellers::ResellerCommand),
    /// Prepaid quota and its ledger.
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
    /// A reseller's API keys.
    #[command(subcommand)]
    Key(keys::KeyCommand),
    /// Operator tokens: the product backend's credential on the product API.
    #[command(subcommand)]
    OperatorToken(operator_tokens::OperatorTokenCommand),
    /// Promo codes: redeeming one on an end user's behalf (support staff), voiding a batch.
    #[command(subcommand)]
    Promo(promo::PromoCommand),
    /// The audit trail (who changed what) and the balances' consistency check.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Drops the expired recovery payloads: the encrypted plaintext codes of promo batches
    /// past their 72-hour recovery window.
    Purge,
}

// `--client-id`, for the commands that name one account and nothing else. (A plain comment:
// a doc comment on an `Args` struct can replace the about text of the commands using it.)
#[derive(Debug, Args)]
pub struct ClientIdArg {
    /// The account's client id (rsc_…).
    #[arg(long, value_name = "C", value_parser = args::client_id)]
    client_id: ClientId,
}

/// Reads the password line (a no-echo prompt when stdin is a terminal) and checks its length
/// (12-128 characters).
async fn password_from_stdin() -> Result<Password> {
    let line = read_password("New panel password: ").await?;
    Password::parse("password", &line)
        .map_err(|e| args::usage(format!("the password on stdin {}", e.message)))
}

pub async fn run(args: AdminArgs, out: Output) -> Result<ExitCode> {
    // Read stdin before touching the database, so a missing password changes nothing.
    let password = match &args.command {
        AdminCommand::Reseller(command) if command.reads_password() => {
            Some(password_from_stdin().await?)
        }
        _ => None,
    };
    // Only a redemption needs the master key; it is loaded (never created) before the
    // database is touched, so a missing key changes nothing.
    if let AdminCommand::Promo(command) = &args.command
        && command.needs_master_key()
    {
        promo::load_master_key(args.master_key_file.as_deref(), &args.database_url)?;
    }
    // Every command checks the key file it is given (or the default one, when present)
    // against the database's fingerprint (docs/security.md); none creates a key. The file is
    // read before the database is opened, so a bad one creates nothing.
    let (key_path, file) = match &args.master_key_file {
        Some(path) => (path.clone(), KeyFile::Configured),
        None => (
            default_master_key_path(db::sqlite_file_path(&args.database_url)),
            KeyFile::DefaultIfPresent,
        ),
    };
    let key_file = read_key_file(&key_path, file)?;
    let mut store = Store::connect(&args.database_url, Clock::system())
        .await
        .context("cannot open the database")?;
    if let Some(key) = open_master_key(&store, key_file).await? {
        store = store.with_master_key(key);
    }
    let result = dispatch(&store, args.command, password, out).await;
    store.close().await;
    result
}

async fn dispatch(
    store: &Store,
    command: AdminCommand,
    password: Option<Password>,
    out: Output,
) -> Result<ExitCode> {
    match command {
        AdminCommand::Plan(cmd) => plans::run(store, cmd, out).await?,
        AdminCommand::User(cmd) => users::run(store, cmd, out).await?,
        AdminCommand::License(cmd) => licenses::run(store, cmd, out).await?,
        AdminCommand::Reseller(cmd) => resellers::run(store, cmd, password, out).await?,
        AdminCommand::Quota(cmd) => quota::run(store, cmd, out).await?,
        AdminCommand::Key(cmd) => keys::run(store, cmd, out).await?,
        AdminCommand::OperatorToken(cmd) => operator_tokens::run(store, cmd, out).await?,
        AdminCommand::Promo(cmd) => promo::run(store, cmd, out).await?,
        AdminCommand::Audit(cmd) => return audit::run(store, cmd, out).await,
        AdminCommand::Purge => purge(store, out).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn purge(store: &Store, out: Output) -> Result<()> {
    let purged = partner_billing::promo::purge_expired(store).await?;
    let sessions = partner_billing::accounts::purge_expired_sessions(store).await?;
    out.emit(
        &json!({ "purged": purged, "purgedSessions": sessions }),
        || format!("purged {purged} expired recovery payloads"),
    )
}

/// A library error shown with its API code first (`Promo.CodeNotFound: promo code not found`),
/// keeping the error as its source.
#[derive(Debug)]
struct Coded {
    err: partner_billing::Error,
    note: String,
}

impl Coded {
    fn new(err: partner_billing::Error, note: String) -> Self {
        Self { err, note }
    }
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.err.code() {
            Some(code) => write!(f, "{}: {}{}", code.as_str(), self.err, self.note),
            None => write!(f, "{}{}", self.err, self.note),
        }
    }
}

impl std::error::Error for Coded {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}
