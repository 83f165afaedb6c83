//! The `partner-billing-server` command: flags, start-up checks, serving, shutdown. The binary
//! is a thin `main` over [`run`], so test builds can wrap the same start-up.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use crate::ServeOptions;
use crate::logging::LogFormat;

use partner_billing::clock::Clock;
use partner_billing::crypto::default_master_key_path;
use partner_billing::db;
use partner_billing::key_check::{KeyFile, open_master_key, read_key_file};
use partner_billing::store::Store;

/// Serve the Partner Billing API.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Database URL: `sqlite://FILE` (created if missing) or `postgres://…`.
    #[arg(
        long,
        env = "PARTNER_BILLING_DATABASE_URL",
        default_value = "sqlite://partner-billing.db"
    )]
    database_url: String,
    /// Address to listen on.
    #[arg(long, env = "PARTNER_BILLING_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// The master key (32 bytes) for promo-code hashes and recovery payloads. Default:
    /// `partner-billing.key` beside the SQLite database (or in the working directory), created
    /// with mode 0600 if missing. A file named here must exist.
    #[arg(long, env = "PARTNER_BILLING_MASTER_KEY_FILE")]
    master_key_file: Option<PathBuf>,
    /// Group concurrent license requests that wait on the same lock into one transaction
    /// (each keeps its own writes and answer). `false` runs one transaction per request.
    #[arg(
        long,
        env = "PARTNER_BILLING_GROUP_COMMIT",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    group_commit: bool,
    /// Webhook retry schedule: one attempt, then one after each delay (units s, m, h, d),
    /// then the delivery is marked failed.
    #[arg(
        long,
        env = "PARTNER_BILLING_WEBHOOK_BACKOFF",
        default_value = partner_billing::webhooks::DEFAULT_BACKOFF,
        value_parser = parse_backoff
    )]
    webhook_backoff: Backoff,
    /// Allow `http://` and loopback webhook URLs (development and tests). Private,
    /// link-local and metadata addresses stay refused.
    #[arg(
        long,
        env = "PARTNER_BILLING_WEBHOOK_ALLOW_INSECURE",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    webhook_allow_insecure: bool,
    /// Serve `GET /metrics` (Prometheus text format) on this address, apart from the API.
    #[arg(long, env = "PARTNER_BILLING_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Log lines as `text` or `json` (one object per line); `PARTNER_BILLING_LOG` sets the
    /// filter.
    #[arg(
        long,
        env = "PARTNER_BILLING_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Most client connections open at once; more wait until one closes.
    #[arg(long, env = "PARTNER_BILLING_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Serve HTTPS with this certificate chain (PEM); needs `--tls-key`.
    #[arg(long, env = "PARTNER_BILLING_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`; needs `--tls-cert`.
    #[arg(long, env = "PARTNER_BILLING_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// The address browsers use, e.g. `https://billing.example.com`; when `https://`, panel
    /// cookies are `Secure` and HSTS is sent.
    #[arg(long, env = "PARTNER_BILLING_PUBLIC_URL")]
    public_url: Option<String>,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    print_openapi: bool,
}

/// A `--webhook-backoff` schedule.
#[derive(Debug, Clone)]
struct Backoff(Vec<std::time::Duration>);

fn parse_backoff(text: &str) -> Result<Backoff, String> {
    partner_billing::webhooks::parse_backoff(text).map(Backoff)
}

/// Parses the command line and serves until Ctrl-C or SIGTERM.
pub async fn run() -> anyhow::Result<()> {
    run_with_args(std::env::args_os()).await
}

/// As [`run`], with the command line given (the program name first): lets a test executable
/// serve without handing the server its own test-harness arguments.
pub async fn run_with_args<I, T>(args: I) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = Args::parse_from(args);
    if args.print_openapi {
        print!("{}", crate::openapi_document());
        return Ok(());
    }
    let _log_writer =
        crate::logging::init(args.log_format).context("cannot start the log writer")?;
    install_panic_hook();
    let tls = crate::tls::load(args.tls_cert.as_deref(), args.tls_key.as_deref())?;
    let public_https = args
        .public_url
        .as_deref()
        .is_some_and(|url| url.to_ascii_lowercase().starts_with("https://"));
    // The key file is read before the database is opened (a missing configured file, or an
    // unreadable, malformed or exposed one, stops the server before anything is created), and
    // checked against the database before serving: a foreign key stops the server now, not
    // at the first promo request (docs/security.md).
    let (key_path, file) = match &args.master_key_file {
        Some(path) => (path.clone(), KeyFile::Configured),
        None => (
            default_master_key_path(db::sqlite_file_path(&args.database_url)),
            KeyFile::Default,
        ),
    };
    let key_file = read_key_file(&key_path, file)?;
    let store = Store::connect(&args.database_url, Clock::system())
        .await
        .context("cannot open the database")?;
    let master_key = open_master_key(&store, key_file)
        .await?
        .ok_or_else(|| anyhow::anyhow!("master key file {} is missing", key_path.display()))?;
    let store = store
        .with_master_key(master_key)
        .with_group_commit(args.group_commit)
        .with_webhook_settings(partner_billing::webhooks::WebhookSettings {
            backoff: args.webhook_backoff.0,
            allow_insecure: args.webhook_allow_insecure,
        });
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let metrics_listener = match &args.metrics_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen for metrics on {address}"))?;
            tracing::info!(metrics_address = %listener.local_addr()?, "metrics listening");
            Some(listener)
        }
        None => None,
    };
    let shutdown = shutdown_signal().context("cannot install signal handlers")?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(address = %listener.local_addr()?, scheme, backend = ?store.backend(), "partner-billing-server listening");
    let options = ServeOptions {
        metrics_listener,
        max_connections: args.max_connections,
        tls,
        public_https,
        ..ServeOptions::default()
    };
    crate::serve_with(listener, store.clone(), shutdown, options).await?;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed here, before the server says it
/// is listening, so a signal that arrives right after start is never missed.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
        tracing::info!("shutting down");
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    })
}

/// Logs a panic's location but not its message: a message can quote the data it failed on
/// (a slice of a secret, a code), and logs must never hold those.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(%location, "panic; its message is withheld as it may quote request data");
    }));
}
