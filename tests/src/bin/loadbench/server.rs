//! The server under test: the `partner-billing-server` binary as a separate process (not
//! `tests/src/process.rs`, which other tests own), on 127.0.0.1:0, logging to a file.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use crate::seed::FreshDb;

/// Builds the server with `cargo build -p partner-billing-server` in this tool's own profile
/// (no test features: only the server's own feature set is enabled) and returns the path of the
/// binary cargo reports.
pub fn build_server_binary() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut command = std::process::Command::new(cargo);
    command
        .arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .args([
            "-p",
            "partner-billing-server",
            "--bin",
            "partner-billing-server",
        ])
        .arg("--message-format=json-render-diagnostics");
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    eprintln!(
        "loadbench: cargo build {}-p partner-billing-server",
        if cfg!(debug_assertions) {
            ""
        } else {
            "--release "
        }
    );
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo to build the server")?;
    if !output.status.success() {
        bail!("building partner-billing-server failed ({})", output.status);
    }
    let mut executable = None;
    for line in output.stdout.lines().map_while(Result::ok) {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact"
            && message["target"]["name"] == "partner-billing-server"
            && let Some(path) = message["executable"].as_str()
        {
            executable = Some(PathBuf::from(path));
        }
    }
    executable.context("cargo reported no partner-billing-server executable")
}

/// A running server; killed if dropped without [`Server::stop`].
pub struct Server {
    child: Child,
    pid: u32,
    pub base_url: String,
}

impl Server {
    /// Starts the binary on 127.0.0.1:0 over `fresh`'s database and waits (up to a minute) for
    /// the address it logs.
    pub async fn start(
        bin: &Path,
        fresh: &FreshDb,
        log_filter: &str,
        extra_env: &[(String, String)],
    ) -> anyhow::Result<Self> {
        let log_path = fresh
            .dir()
            .join(format!("server-{}.log", uuid::Uuid::new_v4().simple()));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut child = Command::new(bin)
            .env_clear()
            .env("PARTNER_BILLING_DATABASE_URL", &fresh.url)
            .env("PARTNER_BILLING_LISTEN", "127.0.0.1:0")
            .env("PARTNER_BILLING_MASTER_KEY_FILE", fresh.key_file())
            .env("PARTNER_BILLING_LOG", log_filter)
            .envs(extra_env.iter().map(|(k, v)| (k, v)))
            .current_dir(fresh.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let pid = child.id().context("the server exited at once")?;
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(address) = text
                .lines()
                .find_map(|line| line.split("address=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                return Ok(Self {
                    child,
                    pid,
                    base_url: format!("http://{address}"),
                });
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the server exited ({status}) before listening; its log:\n{}",
                    tail(&text)
                );
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the server logged no address within a minute (is --server-log at least \
                     info?); its log:\n{}",
                    tail(&text)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process's peak resident set size so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmHWM:")
    }

    /// The process's resident set size now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmRSS:")
    }

    fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .context("cannot read the server's /proc status")?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {field} in the server's /proc status"))
    }

    /// SIGTERM, then waits up to 15 s for the graceful exit (SIGKILL after that).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                eprintln!("loadbench: the server ignored SIGTERM for 15 s; killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
