//! `loadbench`: the real `partner-billing-server` under N concurrent HTTP clients for T seconds,
//! next to a raw baseline (the same SQL through sqlx, no HTTP, same concurrency), on SQLite or
//! PostgreSQL. See docs/performance.md.
//!
//! ```sh
//! cargo run --release -p partner-billing-tests --bin loadbench -- \
//!     --database sqlite --database postgres://postgres@127.0.0.1:5432/test \
//!     --clients 8,64 --seconds 10 --json target/loadbench.json
//! ```
//!
//! Per database it makes a fresh database (a temp SQLite file, or `CREATE DATABASE pbbench_…`
//! beside the given PostgreSQL URL, dropped at the end), seeds it through the core library
//! (timed apart from the measurements), then for every client count and scenario: starts the
//! server binary (a separate process, built by `cargo build -p partner-billing-server` in this
//! tool's profile unless `--server-bin` names one), drives it for the warm-up and the measured
//! window, reads the server's peak RSS (VmHWM), stops it, and runs the raw baseline for the same
//! window. Each run, HTTP or raw, starts right after a `CHECKPOINT`, and on PostgreSQL the
//! report gives the write-ahead log each took per request (`wal.rs`). Figures never fail the
//! run; a tool failure (server does not start, seeding fails, a scenario completes no request
//! at all) exits non-zero.
#![forbid(unsafe_code)]

mod driver;
mod history;
mod http;
mod lists;
mod raw;
mod report;
mod seed;
mod server;
mod wal;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};

use partner_billing::clock::Clock;
use partner_billing::store::{Backend, Store};

use crate::driver::Measured;
use crate::report::{Format, Report, RunReport, ScenarioReport};
use crate::seed::{FreshDb, Seeded};
use crate::server::Server;

/// What one request of a scenario does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// `GET /v1/billing/partner/balances`, each client with its own account's key.
    Balances,
    /// `POST /v1/billing/partner/licenses`, each request on a random one of the seeded accounts.
    LicenseSpread,
    /// `POST /v1/billing/partner/licenses`, every request on one account.
    LicenseHot,
    /// `POST /v1/billing/partner/promo-batches` with `count: 1000`, each client its own account.
    Promo,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::Balances,
        Scenario::LicenseSpread,
        Scenario::LicenseHot,
        Scenario::Promo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Balances => "balances",
            Self::LicenseSpread => "license-spread",
            Self::LicenseHot => "license-hot",
            Self::Promo => "promo-1000",
        }
    }

    /// Which seeded account request `seq` of client `worker` charges.
    pub fn account(self, worker: usize, accounts: usize) -> usize {
        match self {
            Self::Balances | Self::Promo => worker % accounts,
            Self::LicenseSpread => rand::random::<usize>() % accounts,
            Self::LicenseHot => 0,
        }
    }
}

/// Drive the real server over HTTP and compare with the same SQL without HTTP.
#[derive(Parser, Debug)]
#[command(name = "loadbench", about)]
struct Args {
    /// `sqlite` (a fresh file in a temporary directory) or a PostgreSQL URL (a fresh database
    /// `pbbench_…` is created on that server and dropped afterwards). Repeat for several.
    #[arg(long = "database", default_value = "sqlite")]
    databases: Vec<String>,
    /// Concurrent clients (closed loop, one keep-alive connection each); a comma list runs each.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    clients: Vec<usize>,
    /// Measured seconds per scenario, for the HTTP run and again for the raw baseline.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Unmeasured warm-up seconds before each measured window.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Scenarios to run (comma list); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    scenario: Vec<Scenario>,
    /// Seeded reseller accounts (each with one API key and credit); `license-spread` spreads
    /// over all of them.
    #[arg(long, default_value_t = 1000)]
    accounts: usize,
    /// The server binary to run. Default: `cargo build -p partner-billing-server` in this
    /// tool's profile (release or debug), and the binary it reports.
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// The server's `PARTNER_BILLING_LOG` filter (its log goes to a file in the temp dir).
    #[arg(long, default_value = "info")]
    server_log: String,
    /// Extra `NAME=VALUE` in the server's environment (which is otherwise cleared), e.g.
    /// `MALLOC_ARENA_MAX=2` to see how much of the RSS is allocator arenas. Repeatable.
    #[arg(long = "server-env", value_name = "NAME=VALUE", value_parser = parse_env)]
    server_env: Vec<(String, String)>,
    /// Give every seeded account a webhook endpoint subscribed to `license.issued` (and
    /// `promo_batch.generated`), delivering to a receiver in this process on 127.0.0.1 that
    /// answers 204: the cost of the outbox and its delivery on the write path.
    #[arg(long)]
    webhook_endpoint: bool,
    /// After the scenarios, grow the hot account (the first) by this many licenses through the
    /// API, then run the scenarios again on the grown database: first as its growth left the
    /// planner's statistics (autovacuum is off on the bench database: never analyzed), then
    /// after `ANALYZE`. The report gives each figure beside the fresh one.
    #[arg(long, default_value_t = 0)]
    history: u64,
    /// Also walk every list of the hot account (read API and panel) to its last page and time
    /// the first and the last page, and download the ledger CSV reading the server's memory;
    /// with `--history`, on the grown database (before and after `ANALYZE`).
    #[arg(long)]
    lists: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// CI check that the tool works: 2 clients, 0.5 s, no warm-up, 20 accounts (overrides
    /// `--clients`, `--seconds`, `--warmup`, `--accounts`). Figures are meaningless.
    #[arg(long)]
    smoke: bool,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| "expected NAME=VALUE".to_owned())
}

#[tokio::main]
async fn main() {
    // Warnings only, and not sqlx's slow-statement and slow-acquire notes: seeding SQLite from
    // 16 tasks, and 64 clients on a pool of 8, queue on purpose.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,sqlx=error"))
        .with_writer(std::io::stderr)
        .try_init();
    let mut args = Args::parse();
    if args.smoke {
        args.clients = vec![2];
        args.seconds = 0.5;
        args.warmup = 0.0;
        args.accounts = 20;
    }
    if args.webhook_endpoint {
        args.server_env.push((
            "PARTNER_BILLING_WEBHOOK_ALLOW_INSECURE".to_owned(),
            "true".to_owned(),
        ));
    }
    if let Err(err) = run(args).await {
        eprintln!("loadbench: error: {err:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients must be at least 1");
    }
    if !(args.seconds > 0.0 && args.warmup >= 0.0) {
        bail!("--seconds must be positive and --warmup not negative");
    }
    if args.accounts == 0 {
        bail!("--accounts must be at least 1");
    }
    let scenarios = if args.scenario.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenario.clone()
    };
    let server_bin = match &args.server_bin {
        Some(path) => path.clone(),
        None => server::build_server_binary()?,
    };
    // Absolute: the server runs in the temporary directory.
    let server_bin = std::fs::canonicalize(&server_bin)
        .with_context(|| format!("server binary {} not found", server_bin.display()))?;
    eprintln!("loadbench: server binary {}", server_bin.display());

    let mut report = Report::new(&args, &server_bin, &scenarios);
    for database in &args.databases {
        let fresh = FreshDb::create(database).await?;
        let result = run_database(&args, &scenarios, &server_bin, &fresh, &mut report).await;
        fresh.remove().await;
        result?;
    }
    report.finish();
    match args.format {
        Format::Table => print!("{}", report.table()),
        Format::Json => println!("{}", report.json_text()),
    }
    if let Some(path) = &args.json {
        std::fs::write(path, report.json_text() + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("loadbench: JSON report written to {}", path.display());
    }
    Ok(())
}

/// Every client count and scenario on one fresh database; with `--history`, again on the grown
/// database, before and after `ANALYZE`.
async fn run_database(
    args: &Args,
    scenarios: &[Scenario],
    server_bin: &std::path::Path,
    fresh: &FreshDb,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (seeded, receiver) = seed_database(args, fresh).await?;
    let result = run_seeded(args, scenarios, server_bin, fresh, &seeded, report).await;
    if let Some(receiver) = receiver {
        eprintln!(
            "loadbench: {}: the receiver got {} webhook requests",
            fresh.label(),
            receiver.received().len()
        );
    }
    result
}

async fn run_seeded(
    args: &Args,
    scenarios: &[Scenario],
    server_bin: &std::path::Path,
    fresh: &FreshDb,
    seeded: &Seeded,
    report: &mut Report,
) -> anyhow::Result<()> {
    if args.history > 0 {
        history::never_analyze(fresh).await?;
    }
    report
        .runs
        .extend(run_scenarios(args, scenarios, server_bin, fresh, seeded, None).await?);
    if args.history == 0 {
        if args.lists {
            let lists = lists_run(args, server_bin, fresh, seeded).await?;
            report.lists.push((fresh.label().to_owned(), lists));
        }
        return Ok(());
    }
    let server = Server::start(server_bin, fresh, &args.server_log, &args.server_env).await?;
    let seconds = history::grow(&server, seeded, args.history, fresh.label()).await?;
    server.stop().await?;
    eprintln!(
        "loadbench: {}: {} licenses of history grown through the API in {seconds:.0} s",
        fresh.label(),
        args.history
    );
    for analyzed in [false, true] {
        let label = if analyzed {
            let seconds = history::analyze(fresh).await?;
            eprintln!("loadbench: {}: ANALYZE took {seconds:.1} s", fresh.label());
            format!("{} licenses, analyzed", args.history)
        } else {
            format!("{} licenses, never analyzed", args.history)
        };
        let runs = run_scenarios(
            args,
            scenarios,
            server_bin,
            fresh,
            seeded,
            Some(label.clone()),
        )
        .await?;
        report.runs.extend(runs);
        if args.lists {
            let lists = lists_run(args, server_bin, fresh, seeded).await?;
            report
                .lists
                .push((format!("{}, {label}", fresh.label()), lists));
        }
    }
    Ok(())
}

/// `--lists` against a server started for it.
async fn lists_run(
    args: &Args,
    server_bin: &std::path::Path,
    fresh: &FreshDb,
    seeded: &Seeded,
) -> anyhow::Result<lists::ListsReport> {
    let server = Server::start(server_bin, fresh, &args.server_log, &args.server_env).await?;
    let measured = lists::measure(&server, seeded).await;
    server.stop().await?;
    let measured = measured?;
    for list in &measured.lists {
        eprintln!(
            "loadbench: {}: {}: {} items in {} pages; first page {:.1} ms, last page {:.1} ms",
            fresh.label(),
            list.list,
            list.items,
            list.pages,
            list.first_ms,
            list.last_ms
        );
    }
    Ok(measured)
}

/// Seeds the accounts (and, with `--webhook-endpoint`, their endpoints and the receiver, which
/// answers for the rest of the run).
async fn seed_database(
    args: &Args,
    fresh: &FreshDb,
) -> anyhow::Result<(Seeded, Option<partner_billing_tests::receiver::Receiver>)> {
    let accounts = args
        .accounts
        .max(args.clients.iter().copied().max().unwrap_or(1));
    eprintln!("loadbench: {}: seeding {accounts} accounts", fresh.label());
    let seeded = seed::seed(&fresh.url, accounts).await?;
    eprintln!(
        "loadbench: {}: seeded in {:.1} s",
        fresh.label(),
        seeded.seconds
    );
    if args.webhook_endpoint {
        let receiver = partner_billing_tests::receiver::Receiver::start().await;
        subscribe(fresh, &seeded, &receiver.url).await?;
        eprintln!(
            "loadbench: {}: every account subscribed to license.issued at {}",
            fresh.label(),
            receiver.url
        );
        return Ok((seeded, Some(receiver)));
    }
    Ok((seeded, None))
}

/// Every client count and scenario on the database as it is now.
async fn run_scenarios(
    args: &Args,
    scenarios: &[Scenario],
    server_bin: &std::path::Path,
    fresh: &FreshDb,
    seeded: &Seeded,
    history: Option<String>,
) -> anyhow::Result<Vec<RunReport>> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let measure = Duration::from_secs_f64(args.seconds);
    let mut runs = Vec::new();
    for &clients in &args.clients {
        let mut run = RunReport::new(fresh.label(), history.clone(), clients, seeded);
        for &scenario in scenarios {
            let started = Instant::now();
            if scenario == Scenario::Promo {
                empty_promo_codes(&fresh.url).await?;
            }
            let start = wal::checkpoint(&fresh.url).await?;
            let (http, rss) = http_run(
                args, server_bin, fresh, seeded, scenario, clients, warmup, measure,
            )
            .await?;
            let http_wal = wal::since(&fresh.url, start, http.attempts).await?;
            if scenario == Scenario::Promo {
                empty_promo_codes(&fresh.url).await?;
            }
            let start = wal::checkpoint(&fresh.url).await?;
            let raw = raw_run(fresh, seeded, scenario, clients, warmup, measure).await?;
            let raw_wal = wal::since(&fresh.url, start, raw.attempts).await?;
            for (path, measured) in [("HTTP", &http), ("raw", &raw)] {
                if measured.ok == 0 {
                    bail!(
                        "{} {} at {clients} clients: no {path} request succeeded; errors: {:?}",
                        fresh.label(),
                        scenario.name(),
                        measured.error_samples
                    );
                }
            }
            for sample in &http.error_samples {
                eprintln!("loadbench: {} HTTP error: {sample}", scenario.name());
            }
            let entry = ScenarioReport::new(scenario, &http, &raw, &rss, [http_wal, raw_wal]);
            eprintln!(
                "loadbench: {} {clients} clients {}: {:.0} req/s (raw {:.0}), p50 {:.2} ms (raw {:.2}), {} errors, peak RSS {:.1} MiB [{:.0} s]",
                fresh.label(),
                scenario.name(),
                http.throughput(),
                raw.throughput(),
                http.percentile_ms(50.0),
                raw.percentile_ms(50.0),
                http.errors,
                rss.peak as f64 / 1024.0,
                started.elapsed().as_secs_f64()
            );
            run.scenarios.push(entry);
        }
        runs.push(run);
    }
    Ok(runs)
}

/// One webhook endpoint per seeded account, subscribed to the charging events.
async fn subscribe(fresh: &FreshDb, seeded: &Seeded, url: &str) -> anyhow::Result<()> {
    let key = std::fs::read(fresh.key_file()).context("cannot read the master key")?;
    let key = partner_billing::crypto::MasterKey::from_file_contents(&key)
        .context("the master key file is malformed")?;
    let store = Store::connect(&fresh.url, Clock::system())
        .await?
        .with_master_key(key)
        .with_webhook_settings(partner_billing::webhooks::WebhookSettings {
            allow_insecure: true,
            ..Default::default()
        });
    let request = partner_billing::wire::CreateWebhookEndpointRequest {
        url: url.to_owned(),
        event_types: vec![
            "license.issued".to_owned(),
            "promo_batch.generated".to_owned(),
        ],
        description: Some("loadbench".to_owned()),
    };
    for account in seeded.accounts.iter() {
        let account_id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE client_id = $1")
            .bind(account.client_id.as_str())
            .fetch_one(store.pool())
            .await?;
        partner_billing::webhooks::create_endpoint(
            &store,
            account_id,
            &request,
            &partner_billing::audit::Origin::cli(),
        )
        .await?;
    }
    store.close().await;
    Ok(())
}

/// The server's peak RSS (`VmHWM`, KiB): once it listens (start-up and migrations), and at the
/// end of the scenario (over its whole life: start, warm-up and window).
pub struct Rss {
    pub idle_peak: u64,
    pub peak: u64,
}

/// One scenario over HTTP against a freshly started server; returns the measurements and the
/// server's RSS.
#[allow(clippy::too_many_arguments)]
async fn http_run(
    args: &Args,
    server_bin: &std::path::Path,
    fresh: &FreshDb,
    seeded: &Seeded,
    scenario: Scenario,
    clients: usize,
    warmup: Duration,
    measure: Duration,
) -> anyhow::Result<(Measured, Rss)> {
    let server = Server::start(server_bin, fresh, &args.server_log, &args.server_env).await?;
    eprintln!(
        "loadbench: {} {} {clients} clients: server pid {} at {}",
        fresh.label(),
        scenario.name(),
        server.pid(),
        server.base_url
    );
    let idle_peak = server.peak_rss_kib()?;
    let target = http::HttpTarget::new(&server.base_url, clients, seeded)?;
    let measured = driver::closed_loop(clients, warmup, measure, move |worker, seq| {
        let target = target.clone();
        async move { target.request(scenario, worker, seq).await }
    })
    .await;
    let peak = server.peak_rss_kib()?;
    server.stop().await?;
    Ok((measured, Rss { idle_peak, peak }))
}

/// The raw baseline of one scenario: its SQL through a pool configured as the server's, in this
/// process, with no server running.
async fn raw_run(
    fresh: &FreshDb,
    seeded: &Seeded,
    scenario: Scenario,
    clients: usize,
    warmup: Duration,
    measure: Duration,
) -> anyhow::Result<Measured> {
    let store = Store::connect(&fresh.url, Clock::system())
        .await
        .context("raw baseline cannot connect")?;
    // The promo baseline's rows reference a batch the HTTP run of the scenario made.
    let batch_row_id: Option<i64> = sqlx::query_scalar("SELECT MIN(id) FROM promo_batches")
        .fetch_one(store.pool())
        .await?;
    let target = raw::RawTarget::new(store.clone(), seeded, batch_row_id);
    let measured = driver::closed_loop(clients, warmup, measure, move |worker, seq| {
        let target = target.clone();
        async move { target.request(scenario, worker, seq).await }
    })
    .await;
    store.close().await;
    Ok(measured)
}

/// Empties `promo_codes` (nothing redeems in the benchmark), so that the HTTP run and the raw
/// baseline of the promo scenario each start from an empty table: a 1000-code insert of random
/// hashes costs more the larger the table's index, and the second path would otherwise pay for
/// the first one's rows.
async fn empty_promo_codes(url: &str) -> anyhow::Result<()> {
    let store = Store::connect(url, Clock::system())
        .await
        .context("cannot connect to empty promo_codes")?;
    let sql = match store.backend() {
        Backend::Sqlite => "DELETE FROM promo_codes",
        Backend::Postgres => "TRUNCATE promo_codes, promo_redemptions",
    };
    sqlx::query(sql)
        .execute(store.pool())
        .await
        .context("cannot empty promo_codes")?;
    store.close().await;
    Ok(())
}
