//! `partner-billing-server`: the Partner Billing HTTP service.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use partner_billing::clock::Clock;
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
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    print_openapi: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.print_openapi {
        print!("{}", partner_billing_server::openapi_document());
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("PARTNER_BILLING_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let store = Store::connect(&args.database_url, Clock::system())
        .await
        .context("cannot open the database")?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, backend = ?store.backend(), "partner-billing-server listening");
    partner_billing_server::serve(listener, store.clone(), shutdown_signal()).await?;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
