//! `partner-billing admin …`: operator commands, straight on the database through the core
//! library. The command syntax is a stable contract (DESIGN.md §11).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use partner_billing::accounts::{self, Standing};
use partner_billing::crypto::default_master_key_path;
use partner_billing::domain::{ApiKeyId, ClientId, Login, Password, PlanSlug};
use partner_billing::key_check::{KeyFile, open_master_key};
use partner_billing::plans::{self, NewPlan};
use partner_billing::store::Store;
use partner_billing::{clock::Clock, keys, promo, quota};
use serde_json::json;

use crate::args;
use crate::input::read_password;
use crate::output::{Output, fields, opt, table, utc};
use crate::product;

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

    /// The master key file, read by `promo redeem` only; never created by these commands
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
    Plan(PlanCommand),
    /// End-user logins.
    #[command(subcommand)]
    User(UserCommand),
    /// Reseller accounts.
    #[command(subcommand)]
    Reseller(ResellerCommand),
    /// Prepaid quota and its ledger.
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// A reseller's API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Operator tokens: the product backend's credential on the product API.
    #[command(subcommand)]
    OperatorToken(product::OperatorTokenCommand),
    /// Promo codes, on an end user's behalf (support staff).
    #[command(subcommand)]
    Promo(product::PromoCommand),
    /// Consistency checks.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Drops the expired recovery payloads: the encrypted plaintext codes of promo batches
    /// past their 72-hour recovery window.
    Purge,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Creates a plan.
    Create {
        /// The plan's slug: 1-64 of a-z 0-9 . _ -.
        #[arg(long, value_name = "S", value_parser = args::plan_slug)]
        slug: PlanSlug,
        /// A display name.
        #[arg(long, value_name = "N")]
        name: String,
        /// Subscription length of a license in days; none for no end.
        #[arg(long, value_name = "D")]
        duration_days: Option<i64>,
        /// How many redemptions each promo code allows (default 1).
        #[arg(long, value_name = "R")]
        redemptions_per_code: Option<i64>,
        /// How long promo codes stay valid after generation (default 365).
        #[arg(long, value_name = "V")]
        code_validity_days: Option<i64>,
    },
    /// Lists the plans.
    List,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Registers an end-user login (idempotent).
    Add {
        /// The end user's login (1-254 characters).
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
    },
    /// Lists every license of a registered login, direct and redeemed.
    Licenses {
        /// The end user's login.
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
    },
}

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

#[derive(Debug, Args)]
pub struct ClientIdArg {
    /// The account's client id (rsc_…).
    #[arg(long, value_name = "C", value_parser = args::client_id)]
    client_id: ClientId,
}

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

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Lists an account's API keys.
    List(ClientIdArg),
    /// Revokes one of an account's API keys.
    Revoke {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// The key to revoke (rsk_…).
        #[arg(long, value_name = "K", value_parser = args::api_key_id)]
        api_key_id: ApiKeyId,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Checks that every balance equals the sum of its ledger (exit 1 if not).
    Verify,
}

/// Reads the password line (a no-echo prompt when stdin is a terminal) and checks its length
/// (12-128 characters).
async fn password_from_stdin() -> Result<Password> {
    let line = read_password("New panel password: ").await?;
    Password::parse("password", &line).map_err(|e| partner_billing::Error::from(e).into())
}

pub async fn run(args: AdminArgs, out: Output) -> Result<ExitCode> {
    // Read stdin before touching the database, so a missing password changes nothing.
    let password = match &args.command {
        AdminCommand::Reseller(
            ResellerCommand::Create { .. } | ResellerCommand::SetPassword { .. },
        ) => Some(password_from_stdin().await?),
        _ => None,
    };
    // Only a redemption needs the master key; it is loaded (never created) before the
    // database is touched, so a missing key changes nothing.
    if let AdminCommand::Promo(_) = &args.command {
        product::load_master_key(args.master_key_file.as_deref(), &args.database_url)?;
    }
    let mut store = Store::connect(&args.database_url, Clock::system())
        .await
        .context("cannot open the database")?;
    // Every command checks the key file it is given (or the default one, when present)
    // against the database's fingerprint (DESIGN.md §19); none creates a key.
    let (key_path, file) = match &args.master_key_file {
        Some(path) => (path.clone(), KeyFile::Configured),
        None => (
            default_master_key_path(&args.database_url),
            KeyFile::DefaultIfPresent,
        ),
    };
    if let Some(key) = open_master_key(&store, &key_path, file).await? {
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
        AdminCommand::Plan(cmd) => plan(store, cmd, out).await?,
        AdminCommand::User(UserCommand::Add { login }) => {
            let created = plans::add_user(store, &login).await?;
            out.emit(
                &json!({ "login": login.as_str(), "created": created }),
                || {
                    if created {
                        format!("registered user {login}")
                    } else {
                        format!("user {login} was already registered")
                    }
                },
            )?;
        }
        AdminCommand::User(UserCommand::Licenses { login }) => {
            product::user_licenses(store, &login, out).await?;
        }
        AdminCommand::Reseller(cmd) => reseller(store, cmd, password, out).await?,
        AdminCommand::Quota(cmd) => quota_cmd(store, cmd, out).await?,
        AdminCommand::Key(cmd) => key(store, cmd, out).await?,
        AdminCommand::OperatorToken(cmd) => product::operator_token(store, cmd, out).await?,
        AdminCommand::Promo(cmd) => product::promo(store, cmd, out).await?,
        AdminCommand::Audit(AuditCommand::Verify) => return audit(store, out).await,
        AdminCommand::Purge => {
            let purged = promo::purge_expired(store).await?;
            let sessions = partner_billing::accounts::purge_expired_sessions(store).await?;
            out.emit(
                &json!({ "purged": purged, "purgedSessions": sessions }),
                || format!("purged {purged} expired recovery payloads"),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn plan(store: &Store, cmd: PlanCommand, out: Output) -> Result<()> {
    match cmd {
        PlanCommand::Create {
            slug,
            name,
            duration_days,
            redemptions_per_code,
            code_validity_days,
        } => {
            let new = NewPlan::new(
                slug,
                &name,
                duration_days,
                redemptions_per_code,
                code_validity_days,
            )?;
            let plan = plans::create_plan(store, new).await?;
            out.emit(&plan, || {
                format!("created plan {} ({})", plan.slug, plan.name)
            })
        }
        PlanCommand::List => {
            let plans = plans::list_plans(store).await?;
            out.emit(&json!({ "plans": plans }), || {
                let rows: Vec<Vec<String>> = plans
                    .iter()
                    .map(|p| {
                        vec![
                            p.slug.clone(),
                            p.name.clone(),
                            p.duration_days
                                .map_or_else(|| "-".to_owned(), |d| d.to_string()),
                            p.redemptions_per_code.to_string(),
                            p.code_validity_days.to_string(),
                            utc(p.created_utc),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "SLUG",
                        "NAME",
                        "DURATION_DAYS",
                        "REDEMPTIONS_PER_CODE",
                        "CODE_VALIDITY_DAYS",
                        "CREATED",
                    ],
                    &rows,
                )
            })
        }
    }
}

async fn reseller(
    store: &Store,
    cmd: ResellerCommand,
    password: Option<Password>,
    out: Output,
) -> Result<()> {
    let password = || password.context("internal: password not read");
    match cmd {
        ResellerCommand::Create { name, .. } => {
            let client_id = accounts::create_reseller(store, &name, password()?).await?;
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
            accounts::set_password(store, &client_id, password()?).await?;
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
    accounts::set_standing(store, client_id, standing).await?;
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

async fn quota_cmd(store: &Store, cmd: QuotaCommand, out: Output) -> Result<()> {
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

async fn key(store: &Store, cmd: KeyCommand, out: Output) -> Result<()> {
    match cmd {
        KeyCommand::List(ClientIdArg { client_id }) => {
            let list = keys::list_api_keys_for(store, &client_id).await?;
            out.emit(&list, || crate::keys::key_table(&list))
        }
        KeyCommand::Revoke {
            client_id,
            api_key_id,
        } => {
            keys::revoke_api_key_for(store, &client_id, api_key_id.as_str()).await?;
            out.emit(
                &json!({ "clientId": client_id.as_str(), "apiKeyId": api_key_id.as_str(), "revoked": true }),
                || format!("revoked API key {api_key_id} of {client_id}"),
            )
        }
    }
}

async fn audit(store: &Store, out: Output) -> Result<ExitCode> {
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
