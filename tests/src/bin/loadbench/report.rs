//! The results: a Markdown table and a JSON document, plus the performance targets
//! (docs/performance.md, round 2: set-oriented group commit) judged from them (informational:
//! a missed target never fails the run).

use std::fmt::Write as _;
use std::path::Path;

use clap::ValueEnum;
use serde_json::{Value, json};

use crate::driver::Measured;
use crate::lists::ListsReport;
use crate::seed::Seeded;
use crate::wal::WalDelta;
use crate::{Args, Rss, Scenario};

/// What goes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Markdown table and the targets.
    Table,
    /// The JSON report.
    Json,
}

/// The figures of one path (HTTP or raw).
#[derive(Debug, Clone)]
pub struct PathFigures {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl PathFigures {
    fn from(m: &Measured) -> Self {
        Self {
            requests: m.ok,
            errors: m.errors,
            seconds: m.window.as_secs_f64(),
            throughput: m.throughput(),
            p50_ms: m.percentile_ms(50.0),
            p99_ms: m.percentile_ms(99.0),
        }
    }

    fn json(&self) -> Value {
        json!({
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "throughputPerSec": round(self.throughput, 1),
            "p50Ms": round(self.p50_ms, 3),
            "p99Ms": round(self.p99_ms, 3),
        })
    }
}

pub struct ScenarioReport {
    pub scenario: Scenario,
    pub http: PathFigures,
    pub raw: PathFigures,
    pub peak_rss_kib: u64,
    pub idle_rss_kib: u64,
    /// PostgreSQL: what the write-ahead log took during the HTTP run and the raw one.
    pub wal: [Option<WalDelta>; 2],
}

impl ScenarioReport {
    pub fn new(
        scenario: Scenario,
        http: &Measured,
        raw: &Measured,
        rss: &Rss,
        wal: [Option<WalDelta>; 2],
    ) -> Self {
        Self {
            scenario,
            http: PathFigures::from(http),
            raw: PathFigures::from(raw),
            peak_rss_kib: rss.peak,
            idle_rss_kib: rss.idle_peak,
            wal,
        }
    }

    /// HTTP throughput over raw throughput.
    pub fn throughput_ratio(&self) -> f64 {
        self.http.throughput / self.raw.throughput
    }

    /// HTTP p50 over raw p50.
    pub fn p50_ratio(&self) -> f64 {
        self.http.p50_ms / self.raw.p50_ms
    }

    fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }
}

/// One database at one client count.
pub struct RunReport {
    pub database: &'static str,
    /// With `--history`: what the database holds beyond the seed (e.g. "1000000 licenses, never
    /// analyzed"); `None` for the fresh database.
    pub history: Option<String>,
    pub clients: usize,
    pub seed_seconds: f64,
    pub accounts: usize,
    pub scenarios: Vec<ScenarioReport>,
}

impl RunReport {
    /// The database, and its history if any: `postgres (1000000 licenses, analyzed)`.
    pub fn label(&self) -> String {
        match &self.history {
            Some(history) => format!("{} ({history})", self.database),
            None => self.database.to_owned(),
        }
    }

    pub fn new(
        database: &'static str,
        history: Option<String>,
        clients: usize,
        seeded: &Seeded,
    ) -> Self {
        Self {
            database,
            history,
            clients,
            seed_seconds: seeded.seconds,
            accounts: seeded.accounts.len(),
            scenarios: Vec::new(),
        }
    }
}

pub struct Report {
    header: Value,
    pub runs: Vec<RunReport>,
    /// `--lists`, per database (and history stage).
    pub lists: Vec<(String, ListsReport)>,
    load_at_start: String,
    load_at_end: String,
}

impl Report {
    pub fn new(args: &Args, server_bin: &Path, scenarios: &[Scenario]) -> Self {
        let header = json!({
            "tool": "loadbench",
            "startedUtc": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "gitCommit": git_commit(),
            "serverBinary": server_bin.display().to_string(),
            "serverLog": args.server_log,
            "serverEnv": args.server_env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "seconds": args.seconds,
            "warmupSeconds": args.warmup,
            "clients": args.clients,
            "scenarios": scenarios.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "smoke": args.smoke,
            "machine": machine(),
        });
        Self {
            header,
            runs: Vec::new(),
            lists: Vec::new(),
            load_at_start: loadavg(),
            load_at_end: String::new(),
        }
    }

    pub fn finish(&mut self) {
        self.load_at_end = loadavg();
    }

    /// Each history run's scenarios against the same database's fresh run at the same client
    /// count: throughput with history over throughput without.
    fn history_ratios(&self) -> Vec<(&RunReport, Scenario, f64)> {
        let mut ratios = Vec::new();
        for run in self.runs.iter().filter(|r| r.history.is_some()) {
            let Some(fresh) = self.runs.iter().find(|f| {
                f.history.is_none() && f.database == run.database && f.clients == run.clients
            }) else {
                continue;
            };
            for s in &run.scenarios {
                if let Some(f) = fresh.scenarios.iter().find(|f| f.scenario == s.scenario) {
                    ratios.push((run, s.scenario, s.http.throughput / f.http.throughput));
                }
            }
        }
        ratios
    }

    /// Every performance target that this run's figures can judge (docs/performance.md).
    fn targets(&self) -> Vec<Value> {
        let mut targets = Vec::new();
        if self.header["smoke"] == true {
            // A smoke run's figures (debug build, half a second) judge nothing.
            return targets;
        }
        for (run, scenario, ratio) in self.history_ratios() {
            if scenario != Scenario::Promo {
                targets.push(target(
                    run,
                    &format!("{} throughput with history >= 0.9x fresh", scenario.name()),
                    ratio,
                    ratio >= 0.9,
                ));
            }
        }
        for (label, lists) in &self.lists {
            let mut judge = |what: String, value: f64, met: bool| {
                targets.push(json!({
                    "database": label,
                    "clients": Value::Null,
                    "target": what,
                    "value": round(value, 3),
                    "met": met,
                }));
            };
            for l in &lists.lists {
                let ratio = l.last_ms / l.first_ms;
                judge(
                    format!("{}: last page <= 3x first page", l.list),
                    ratio,
                    ratio <= 3.0,
                );
                judge(
                    format!("{}: last page <= 200 ms", l.list),
                    l.last_ms,
                    l.last_ms <= 200.0,
                );
            }
            let csv = &lists.csv;
            judge(
                "ledger CSV: first byte < 1000 ms".to_owned(),
                csv.first_byte_ms,
                csv.first_byte_ms < 1000.0,
            );
            let growth = csv.rss_peak_during_kib.saturating_sub(csv.rss_before_kib) as f64 / 1024.0;
            judge(
                "ledger CSV: server RSS growth <= 32 MiB".to_owned(),
                growth,
                growth <= 32.0,
            );
            let peak = lists.server_peak_kib as f64 / 1024.0;
            judge(
                "server peak RSS over the lists <= 128 MiB".to_owned(),
                peak,
                peak <= 128.0,
            );
        }
        for run in &self.runs {
            let throughput = |scenario| {
                run.scenarios
                    .iter()
                    .find(|s| s.scenario == scenario)
                    .map(|s| s.http.throughput)
            };
            if run.clients == 64
                && let (Some(hot), Some(read)) = (
                    throughput(Scenario::LicenseHot),
                    throughput(Scenario::Balances),
                )
            {
                targets.push(target(
                    run,
                    "license-hot req/s >= 0.9x balances req/s at 64 clients",
                    hot / read,
                    hot / read >= 0.9,
                ));
            }
            for s in &run.scenarios {
                match s.scenario {
                    Scenario::LicenseSpread => targets.push(target(
                        run,
                        "license-spread HTTP/raw throughput >= 1.0",
                        s.throughput_ratio(),
                        s.throughput_ratio() >= 1.0,
                    )),
                    Scenario::LicenseHot => targets.push(target(
                        run,
                        "license-hot HTTP/raw throughput >= 1.5",
                        s.throughput_ratio(),
                        s.throughput_ratio() >= 1.5,
                    )),
                    Scenario::Promo => targets.push(target(
                        run,
                        "promo-1000 HTTP p50 <= 1.2x raw insert p50",
                        s.p50_ratio(),
                        s.p50_ratio() <= 1.2,
                    )),
                    Scenario::Balances if run.clients == 8 => targets.push(target(
                        run,
                        "balances HTTP p50 <= 2 ms at 8 clients",
                        s.http.p50_ms,
                        s.http.p50_ms <= 2.0,
                    )),
                    Scenario::Balances => {}
                }
            }
            if run.clients == 64
                && let Some(peak) = run
                    .scenarios
                    .iter()
                    .map(ScenarioReport::peak_rss_mib)
                    .reduce(f64::max)
            {
                targets.push(target(
                    run,
                    "server peak RSS <= 64 MiB at 64 clients (max over scenarios)",
                    peak,
                    peak <= 64.0,
                ));
            }
        }
        targets
    }

    pub fn json(&self) -> Value {
        let mut doc = self.header.clone();
        doc["loadAverage"] = json!({"start": self.load_at_start, "end": self.load_at_end});
        doc["runs"] = self
            .runs
            .iter()
            .map(|run| {
                json!({
                    "database": run.database,
                    "history": run.history,
                    "clients": run.clients,
                    "accounts": run.accounts,
                    "seedSeconds": round(run.seed_seconds, 2),
                    "scenarios": run.scenarios.iter().map(|s| json!({
                        "scenario": s.scenario.name(),
                        "http": s.http.json(),
                        "serverPeakRssMiB": round(s.peak_rss_mib(), 1),
                        "serverPeakRssAtListenMiB": round(s.idle_rss_kib as f64 / 1024.0, 1),
                        "raw": s.raw.json(),
                        "throughputRatio": round(s.throughput_ratio(), 3),
                        "p50Ratio": round(s.p50_ratio(), 3),
                        "wal": {"http": s.wal[0].map(|w| w.json()), "raw": s.wal[1].map(|w| w.json())},
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        doc["historyRatios"] = self
            .history_ratios()
            .into_iter()
            .map(|(run, scenario, ratio)| {
                json!({
                    "database": run.label(),
                    "clients": run.clients,
                    "scenario": scenario.name(),
                    "throughputHistoryOverFresh": round(ratio, 3),
                })
            })
            .collect();
        doc["lists"] = self
            .lists
            .iter()
            .map(|(label, lists)| {
                json!({
                    "database": label,
                    "lists": lists.lists.iter().map(|l| json!({
                        "list": l.list,
                        "pages": l.pages,
                        "items": l.items,
                        "firstPageMs": round(l.first_ms, 2),
                        "lastPageMs": round(l.last_ms, 2),
                    })).collect::<Vec<_>>(),
                    "csv": {
                        "lines": lists.csv.lines,
                        "bytes": lists.csv.bytes,
                        "firstByteMs": round(lists.csv.first_byte_ms, 1),
                        "totalMs": round(lists.csv.total_ms, 1),
                        "rssBeforeMiB": round(lists.csv.rss_before_kib as f64 / 1024.0, 1),
                        "rssPeakDuringMiB": round(lists.csv.rss_peak_during_kib as f64 / 1024.0, 1),
                    },
                    "serverPeakRssMiB": round(lists.server_peak_kib as f64 / 1024.0, 1),
                })
            })
            .collect();
        doc["targets"] = Value::Array(self.targets());
        doc
    }

    pub fn json_text(&self) -> String {
        serde_json::to_string_pretty(&self.json()).unwrap_or_default()
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let h = &self.header;
        if h["smoke"] == true {
            let _ = writeln!(
                out,
                "SMOKE RUN: checks that the tool works; its figures measure nothing.\n"
            );
        }
        let _ = writeln!(
            out,
            "loadbench ({} build, commit {}): {} s measured after {} s warm-up per scenario and \
             path; {} CPUs ({}); load average {} at start, {} at end.\n",
            h["profile"].as_str().unwrap_or_default(),
            h["gitCommit"].as_str().unwrap_or_default(),
            h["seconds"],
            h["warmupSeconds"],
            h["machine"]["cpus"],
            h["machine"]["cpuModel"].as_str().unwrap_or_default(),
            self.load_at_start,
            self.load_at_end,
        );
        let _ = writeln!(
            out,
            "| database | clients | scenario | HTTP req/s | HTTP p50 ms | HTTP p99 ms | errors | server peak RSS MiB | raw req/s | raw p50 ms | raw p99 ms | req/s HTTP/raw | p50 HTTP/raw |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for run in &self.runs {
            for s in &run.scenarios {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    run.label(),
                    run.clients,
                    s.scenario.name(),
                    s.http.throughput,
                    s.http.p50_ms,
                    s.http.p99_ms,
                    s.http.errors,
                    s.peak_rss_mib(),
                    s.raw.throughput,
                    s.raw.p50_ms,
                    s.raw.p99_ms,
                    s.throughput_ratio(),
                    s.p50_ratio(),
                );
            }
        }
        crate::wal::table(&self.runs, &mut out);
        let ratios = self.history_ratios();
        if !ratios.is_empty() {
            let _ = writeln!(
                out,
                "\nWith history, throughput over the fresh database's (same run):\n\n\
                 | database | clients | scenario | history / fresh |\n|---|---:|---|---:|"
            );
            for (run, scenario, ratio) in ratios {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.2} |",
                    run.label(),
                    run.clients,
                    scenario.name(),
                    ratio
                );
            }
        }
        for (label, lists) in &self.lists {
            let _ = writeln!(
                out,
                "\nLists of the hot account, {label} (median of 5 fetches per page):\n\n\
                 | list | items | pages | first page ms | last page ms | last / first |\n\
                 |---|---:|---:|---:|---:|---:|"
            );
            for l in &lists.lists {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                    l.list,
                    l.items,
                    l.pages,
                    l.first_ms,
                    l.last_ms,
                    l.last_ms / l.first_ms
                );
            }
            let csv = &lists.csv;
            let _ = writeln!(
                out,
                "\nLedger CSV: {} lines, {:.1} MB; first byte after {:.1} ms, all of it in {:.1} s; \
                 server RSS {:.1} MiB before, at most {:.1} MiB during (+{:.1} MiB); server peak \
                 RSS over its life {:.1} MiB.",
                csv.lines,
                csv.bytes as f64 / 1e6,
                csv.first_byte_ms,
                csv.total_ms / 1000.0,
                csv.rss_before_kib as f64 / 1024.0,
                csv.rss_peak_during_kib as f64 / 1024.0,
                csv.rss_peak_during_kib.saturating_sub(csv.rss_before_kib) as f64 / 1024.0,
                lists.server_peak_kib as f64 / 1024.0,
            );
        }
        let _ = writeln!(out);
        for (i, run) in self.runs.iter().enumerate() {
            // One seed per database, shared by its client counts and history stages.
            if run.history.is_some() || (i > 0 && self.runs[i - 1].database == run.database) {
                continue;
            }
            let _ = writeln!(
                out,
                "Seeding {} ({} accounts): {:.1} s, not measured.",
                run.database, run.accounts, run.seed_seconds
            );
        }
        let targets = self.targets();
        if !targets.is_empty() {
            let _ = writeln!(out, "\nTargets (informational):\n");
            for t in targets {
                let clients = match t["clients"].as_u64() {
                    Some(n) => format!(" {n} clients"),
                    None => String::new(),
                };
                let _ = writeln!(
                    out,
                    "- {}{clients}: {}: {:.2} -> {}",
                    t["database"].as_str().unwrap_or_default(),
                    t["target"].as_str().unwrap_or_default(),
                    t["value"].as_f64().unwrap_or(f64::NAN),
                    if t["met"] == true { "met" } else { "MISSED" },
                );
            }
        }
        out
    }
}

fn target(run: &RunReport, what: &str, value: f64, met: bool) -> Value {
    json!({
        "database": run.label(),
        "clients": run.clients,
        "target": what,
        "value": round(value, 3),
        "met": met,
    })
}

pub fn round(value: f64, places: i32) -> Value {
    if !value.is_finite() {
        return Value::Null;
    }
    let factor = 10f64.powi(places);
    json!((value * factor).round() / factor)
}

/// The checked-out commit, `-dirty` when tracked files differ from it (empty without git).
fn git_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return String::new();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{head}-dirty"),
        _ => head,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_default();
    let mem_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib / 1024);
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpuModel": model,
        "memMiB": mem_mib,
        "loadGenerator": "same machine (the bench process shares the CPUs with the server)",
    })
}
