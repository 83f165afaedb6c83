//! `partner-billing`: operator administration (`admin …`, on the database through the core
//! library) and reseller commands (`balance`, `license issue`, `promo generate`, `keys …`,
//! through the SDK).
//!
//! Exit status: 0 on success; 2 for a usage error, when the command could not run as called
//! (clap's own errors: a missing flag, a malformed value; a missing password on stdin or
//! credential in the environment; an output file that exists; a value the SDK refuses before
//! sending anything); 1 for anything else: a request the library or the service refused (an
//! unknown id, a reused reference, a reason with control characters, a balance that would go
//! below zero), or a failure. Every failure prints exactly one line on stderr, starting with
//! `error: `.
#![forbid(unsafe_code)]

mod account;
mod admin;
mod args;
mod generate;
mod input;
mod keys;
mod output;
mod partner;
mod promo;
mod reads;
mod session;
mod webhooks;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::output::Output;

const AFTER_HELP: &str = "\
Reseller credentials come from the environment: PARTNER_BILLING_CLIENT_ID (or --client-id) and
PARTNER_BILLING_SECRET (never a flag). `keys` commands use the panel session saved by
`keys login`, or PARTNER_BILLING_SESSION_TOKEN.

Exit status: 0 on success; 2 for a usage error (the command could not run as called);
1 otherwise, a refused request included (an unknown id, a reused reference, an invalid
reason, a balance below zero); every failure prints one `error: ` line on stderr.";

/// Partner Billing: prepaid subscription quota for resellers.
#[derive(Debug, Parser)]
#[command(name = "partner-billing", version, propagate_version = true, after_help = AFTER_HELP)]
struct Cli {
    /// Print exactly one JSON object on stdout instead of text (a list printed as it is read,
    /// such as `admin quota ledger`, is cut short if reading it fails part-way; exit 1).
    #[arg(long, global = true)]
    json: bool,

    /// The service, for the reseller commands [default: http://127.0.0.1:8080]
    #[arg(long, env = "PARTNER_BILLING_BASE_URL", value_name = "URL")]
    base_url: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Operator commands, run directly on the database.
    Admin(admin::AdminArgs),
    /// Shows the account's remaining quota per product (API key from the environment).
    Balance(partner::BalanceArgs),
    /// Licenses (API key from the environment).
    License(partner::LicenseArgs),
    /// Promo codes (API key from the environment).
    Promo(promo::PromoArgs),
    /// Shows the account's ledger, oldest first (API key from the environment).
    Ledger(reads::LedgerArgs),
    /// What became of a write, by its idempotency key (API key from the environment).
    Request(reads::RequestArgs),
    /// Manages the account's API keys through a reseller panel session.
    Keys(keys::KeysArgs),
    /// Manages webhook endpoints through a reseller panel session.
    Webhooks(webhooks::WebhooksArgs),
    /// Sets low-balance alerts through a reseller panel session.
    Alerts(webhooks::AlertsArgs),
    /// Prints a shell completion script: `partner-billing completions bash|zsh|fish`.
    Completions(generate::CompletionsArgs),
    /// Prints the man page (roff): `partner-billing man > partner-billing.1`.
    Man,
    /// The reseller account itself, through a panel session: its password.
    Account(account::AccountArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&anyhow::Error::new(err).context("cannot start the runtime")),
    };
    let out = Output { json: cli.json };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Admin(args) => admin::run(args, out).await,
            Command::Balance(args) => {
                let base_url = args.remote.resolve(cli.base_url);
                partner::balance(&base_url, args, out).await
            }
            Command::License(args) => {
                let base_url = args.remote.resolve(cli.base_url);
                partner::license(&base_url, args.command, out).await
            }
            Command::Promo(args) => {
                let base_url = args.remote.resolve(cli.base_url);
                promo::run(&base_url, args.command, out).await
            }
            Command::Ledger(args) => {
                let base_url = args.remote.resolve(cli.base_url);
                reads::ledger(&base_url, args, out).await
            }
            Command::Request(args) => {
                let base_url = args.remote.resolve(cli.base_url);
                reads::request(&base_url, args, out).await
            }
            Command::Keys(args) => {
                let base_url = args.panel.remote.resolve(cli.base_url);
                keys::run(&base_url, args, out).await
            }
            Command::Webhooks(args) => {
                let base_url = args.panel.remote.resolve(cli.base_url);
                webhooks::run(&base_url, args, out).await
            }
            Command::Alerts(args) => {
                let base_url = args.panel.remote.resolve(cli.base_url);
                webhooks::run_alerts(&base_url, args, out).await
            }
            Command::Completions(args) => generate::completions(Cli::command(), &args),
            Command::Man => generate::man(Cli::command()),
            Command::Account(args) => {
                let base_url = args.panel.remote.resolve(cli.base_url);
                account::run(&base_url, args, out).await
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(err) if ends_quietly(&err) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// Whether the reader of stdout went away (`| head`): it chose to stop reading; nothing
/// failed here. A broken pipe anywhere else (a connection to the database or the service)
/// is a failure like any other.
fn ends_quietly(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| cause.is::<output::StdoutClosed>())
}

/// Help and version as clap prints them; any other parse error as one line, exit 2.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        // No command at all: one line like every other usage error, not the whole help.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!("error: a command is required (see --help)");
            return ExitCode::from(2);
        }
        _ => {}
    }
    let rendered = err.render().to_string();
    let text = rendered
        .lines()
        .take_while(|line| !line.starts_with("Usage:"))
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("For more information"))
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    eprintln!("error: {} (see --help)", without_typed_values(err, text));
    ExitCode::from(2)
}

/// A parse error's text without what was typed where it does not belong: a value after a flag
/// that takes none (`--password-stdin=…`) or a stray word may be a password or a secret, so
/// neither is repeated (a stray flag's name is, and a mistyped command); nor is anything typed
/// that is shaped like one of the service's secrets, wherever it stood.
fn without_typed_values(err: &clap::Error, text: &str) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let typed = |kind| match err.get(kind) {
        Some(ContextValue::String(value)) => Some(value.as_str()),
        _ => None,
    };
    let stray = match err.kind() {
        ErrorKind::TooManyValues => typed(ContextKind::InvalidValue),
        ErrorKind::UnknownArgument => {
            typed(ContextKind::InvalidArg).filter(|a| !a.starts_with('-'))
        }
        _ => None,
    };
    let secret_shaped = typed(ContextKind::InvalidValue)
        .into_iter()
        .chain(typed(ContextKind::InvalidArg))
        .chain(typed(ContextKind::InvalidSubcommand))
        .find(|value| SECRET_PREFIXES.iter().any(|p| value.contains(p)));
    let mut text = text.to_owned();
    for value in stray.into_iter().chain(secret_shaped) {
        let value = value.split_once('=').map_or(value, |(_, v)| v);
        // Only where clap quotes it, so that a short value leaves the rest of the text whole.
        if !value.is_empty() {
            text = text
                .replace(&format!("'{value}'"), "'…'")
                .replace(&format!("'-- {value}'"), "'-- …'");
        }
    }
    text
}

/// How the service's secrets and tokens begin: API key secrets, operator tokens, panel
/// sessions, webhook signing secrets.
const SECRET_PREFIXES: [&str; 4] = ["rss_", "rso_", "rps_", "whsec_"];

/// One line on stderr; exit 2 when the command could not run as called (a usage error), else
/// 1: a refusal of what the operator or reseller asked (the library's or the service's, a
/// validation included) is not a usage error.
fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", one_line(err));
    let usage_error = err.chain().any(|cause| {
        cause.is::<args::UsageError>()
            || matches!(
                cause.downcast_ref::<partner_billing_client::Error>(),
                Some(partner_billing_client::Error::InvalidInput { .. })
            )
    });
    ExitCode::from(if usage_error { 2 } else { 1 })
}

/// The error and its causes on one line, skipping a cause its parent already spells out.
fn one_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[test]
    fn only_a_closed_stdout_ends_quietly() {
        use anyhow::Context;
        let closed = Err::<(), _>(super::output::StdoutClosed).context("writing the list");
        assert!(super::ends_quietly(&closed.unwrap_err()));
        // The database's connection broken mid-command: a failure, said.
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let broken = Err::<(), _>(pipe).context("cannot open the database");
        assert!(!super::ends_quietly(&broken.unwrap_err()));
    }

    #[test]
    fn the_command_tree_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// What a parse error says of the command line typed, in the one line printed.
    fn usage_text(args: &[&str]) -> String {
        let err = super::Cli::try_parse_from(args).expect_err("a usage error");
        super::without_typed_values(&err, &err.render().to_string())
    }

    #[test]
    fn a_parse_error_never_repeats_a_value_typed_where_none_belongs() {
        let secret = "rss_LH14ftTvZ61PqWkd9qU8hXb2rJcYt0aE3mFz7vNsGy1";
        let cases: [&[&str]; 5] = [
            &[
                "partner-billing",
                "admin",
                "reseller",
                "create",
                "--name",
                "N",
                "--password-stdin=a long password 123",
            ],
            &[
                "partner-billing",
                "admin",
                "reseller",
                "create",
                "--name",
                "N",
                "--password-stdin",
                "my long password",
            ],
            &["partner-billing", "balance", secret],
            &["partner-billing", "rso_1234567890abcdef"],
            &[
                "partner-billing",
                "admin",
                "quota",
                "credit",
                "--units",
                secret,
            ],
        ];
        // A short value: the rest of the message is left whole.
        let short = usage_text(&[
            "partner-billing",
            "admin",
            "reseller",
            "create",
            "--name",
            "N",
            "--password-stdin=a",
        ]);
        assert!(
            short.contains("unexpected value '…' for '--password-stdin' found"),
            "{short}"
        );
        for args in cases {
            let text = usage_text(args);
            let typed = args.last().unwrap();
            let typed = typed.split_once('=').map_or(*typed, |(_, v)| v);
            assert!(!text.contains(typed), "{text}");
            assert!(text.contains('…'), "{text}");
        }
        // What is no secret is still said: a mistyped flag, a bad number.
        assert!(
            usage_text(&["partner-billing", "admin", "plan", "list", "--bogus"])
                .contains("--bogus")
        );
        assert!(usage_text(&["partner-billing", "admin", "plna"]).contains("'plna'"));
        let units = [
            "partner-billing",
            "admin",
            "quota",
            "credit",
            "--client-id",
            "rsc_9h99ZeW3Bcm7VqKdq9n80Ppb",
            "--plan",
            "p",
            "--reason",
            "r",
            "--units",
            "abc",
        ];
        assert!(usage_text(&units).contains("'abc'"));
    }
}
