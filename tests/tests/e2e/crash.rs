//! Crashes: server processes are killed at random moments under concurrent licenses and
//! promo batches, and restarted — by SIGKILL from outside, and from inside at fail points just
//! before and just after the COMMIT of a write. SQLite runs one process; PostgreSQL runs three
//! processes over one database. Afterwards every acknowledged write replays unchanged, every
//! attempted key — retried with its request — is charged exactly once, and every balance
//! equals its ledger.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use partner_billing::clock::Clock;
use partner_billing::domain::ClientId;
use partner_billing::quota;
use partner_billing::store::{CRASH_AT_ENV, Store};
use partner_billing_tests::Db;
use partner_billing_tests::process::ServerProcess;
use partner_billing_tests::seeded::{ApiKey, SeededDatabase};
use rand::Rng;
use serde_json::{Value, json};

/// Set (to anything) in the environment of this test executable when it is to serve as
/// `partner-billing-server` with crash points: see [`crash_test_server`].
const SERVE_ENV: &str = "PARTNER_BILLING_TESTS_SERVE";

/// The arguments that run [`crash_test_server`] alone in this executable, its log on stdout.
const CRASH_TEST_SERVER_ARGS: [&str; 4] = [
    "crash::crash_test_server",
    "--exact",
    "--nocapture",
    "--test-threads=1",
];

/// Not a check of its own: the crash tests start this test executable again with
/// [`SERVE_ENV`] set and run this function alone, which then serves exactly as
/// `partner-billing-server` does, with the crash points of feature `fault-injection` that only
/// test builds have (the feature is a dev-dependency feature, so no shipped binary has them).
/// Without [`SERVE_ENV`] it returns at once.
#[test]
fn crash_test_server() {
    if std::env::var_os(SERVE_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let served = runtime.block_on(partner_billing_server::command::run_with_args([
        "partner-billing-server",
    ]));
    std::process::exit(match served {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err:#}");
            1
        }
    });
}

/// Kills per run: 10 in CI; `PARTNER_BILLING_CRASH_KILLS=100` for the documented slow run.
fn kills() -> usize {
    std::env::var("PARTNER_BILLING_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(10)
}
/// Concurrent clients per server process.
const CLIENTS_PER_PROCESS: usize = 4;
const CREDIT: i64 = 1_000_000;

/// What one write asked for, and what it cost.
struct Attempt {
    path: &'static str,
    body: Value,
    units: i64,
    acknowledged: Option<Value>,
}

/// How the processes die.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// SIGKILL from outside, 30–250 ms into the round, to one process.
    Sigkill,
    /// Each process kills itself at its N-th write, just before or just after COMMIT.
    AroundCommit,
}

fn request(base_url: &str, key: &ApiKey, attempt: &Attempt) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{base_url}{}", attempt.path))
        .header("X-Client-Id", &key.client_id)
        .header("X-Client-Secret", &key.secret)
        .timeout(Duration::from_secs(20))
        .json(&attempt.body)
}

/// One server process of the crash run, and how to start it again.
struct Replica {
    process: ServerProcess,
    url: String,
    dir: std::path::PathBuf,
    key_file: String,
    fault: Fault,
    /// The crash point this process is armed with (`before-commit:N` …), if any.
    armed: Option<String>,
}

impl Replica {
    fn start(url: &str, dir: &std::path::Path, key_file: &str, fault: Fault) -> Self {
        let (process, armed) = Self::spawn(url, dir, key_file, fault);
        Self {
            process,
            url: url.to_owned(),
            dir: dir.to_owned(),
            key_file: key_file.to_owned(),
            fault,
            armed,
        }
    }

    fn spawn(
        url: &str,
        dir: &std::path::Path,
        key_file: &str,
        fault: Fault,
    ) -> (ServerProcess, Option<String>) {
        let mut env = vec![("PARTNER_BILLING_MASTER_KEY_FILE", key_file.to_owned())];
        let mut armed = None;
        if fault == Fault::AroundCommit {
            let mut rng = rand::thread_rng();
            let point = if rng.gen_bool(0.5) {
                "before-commit"
            } else {
                "after-commit"
            };
            let crash_at = format!("{point}:{}", rng.gen_range(3..40));
            env.push((CRASH_AT_ENV, crash_at.clone()));
            armed = Some(crash_at);
        }
        env.push((SERVE_ENV, "1".to_owned()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        (
            ServerProcess::start_binary(
                &std::env::current_exe().expect("test executable"),
                &CRASH_TEST_SERVER_ARGS,
                url,
                dir,
                &env,
            ),
            armed,
        )
    }

    fn restart(&mut self) {
        self.process.kill();
        (self.process, self.armed) = Self::spawn(&self.url, &self.dir, &self.key_file, self.fault);
    }
}

/// Runs `kills` rounds of load against `processes` server processes over `db`, each round
/// ending with one process killed; then checks that nothing was lost or charged twice.
async fn crash_run(db: Db, processes: usize, fault: Fault, kills: usize) {
    let seeded = SeededDatabase::new(&db, "Crash", "crash test password", CREDIT).await;
    let url = &seeded.url;
    let mut replicas: Vec<Replica> = (0..processes)
        .map(|_| Replica::start(url, &seeded.dir.path, &seeded.key_file, fault))
        .collect();
    let key = Arc::new(seeded.api_key(&replicas[0].process.base_url).await);

    let mut attempts: BTreeMap<String, Attempt> = BTreeMap::new();
    let mut crashes_at: BTreeMap<&str, usize> = BTreeMap::new();
    for round in 0..kills {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..processes * CLIENTS_PER_PROCESS)
            .map(|client| {
                let base_url = replicas[client % processes].process.base_url.clone();
                let key = key.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for i in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let idempotency_key = format!("crash-{round}-{client}-{i}");
                        let mut attempt = if i % 3 == 0 {
                            Attempt {
                                path: "/v1/billing/partner/promo-batches",
                                body: json!({"planSlug":"pro","count":4,"idempotencyKey":idempotency_key}),
                                units: 4,
                                acknowledged: None,
                            }
                        } else {
                            Attempt {
                                path: "/v1/billing/partner/licenses",
                                body: json!({"planSlug":"pro","login":"alice","idempotencyKey":idempotency_key}),
                                units: 1,
                                acknowledged: None,
                            }
                        };
                        let cut_off = match request(&base_url, &key, &attempt).send().await {
                            Ok(response) if response.status() == 200 => {
                                attempt.acknowledged = response.json().await.ok();
                                false
                            }
                            // Outcome unknown, retry with the same key (the contract of a
                            // 503): settled with the cut-off requests below. Seen only on
                            // SQLite with several processes on one file under the whole suite's
                            // load (a writer of another process holds the file's lock).
                            Ok(response) if response.status() == 503 => true,
                            Ok(response) => {
                                panic!("unexpected {} before the kill: {} {:?}", response.status(), attempt.path, response.text().await)
                            }
                            Err(_) => true,
                        };
                        done.push((idempotency_key, attempt));
                        if cut_off {
                            break;
                        }
                    }
                    done
                })
            })
            .collect();
        match fault {
            Fault::Sigkill => {
                let delay = rand::thread_rng().gen_range(30..250);
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let victim = rand::thread_rng().gen_range(0..processes);
                replicas[victim].process.kill();
            }
            Fault::AroundCommit => {
                // Each process kills itself at its armed commit; wait (bounded) for one to go.
                let started = Instant::now();
                while !replicas.iter_mut().any(|r| r.process.has_exited()) {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "no process reached its crash point"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            attempts.extend(worker.await.unwrap());
        }
        for replica in &mut replicas {
            if replica.process.has_exited() {
                if let Some(armed) = &replica.armed {
                    let point = if armed.starts_with("before") {
                        "before COMMIT"
                    } else {
                        "after COMMIT"
                    };
                    *crashes_at.entry(point).or_default() += 1;
                }
                replica.restart();
            }
        }
    }

    let acknowledged = attempts
        .values()
        .filter(|a| a.acknowledged.is_some())
        .count();
    assert!(
        acknowledged > kills,
        "the load did real work: {acknowledged} acknowledged"
    );
    let unknown = attempts.len() - acknowledged;
    eprintln!(
        "{fault:?} on {processes} process(es): {kills} kills {crashes_at:?}, {} writes \
         attempted, {acknowledged} acknowledged, {unknown} cut off",
        attempts.len()
    );

    // Every attempted key, retried with its request on any replica (restarted without crash
    // points): acknowledged ones replay unchanged, the others settle; each is charged once.
    for replica in &mut replicas {
        replica.fault = Fault::Sigkill;
        replica.restart();
    }
    let mut charged = 0;
    for (i, (idempotency_key, attempt)) in attempts.iter().enumerate() {
        let base_url = &replicas[i % processes].process.base_url;
        let response = request(base_url, &key, attempt).send().await.unwrap();
        assert_eq!(response.status(), 200, "{idempotency_key}");
        let body: Value = response.json().await.unwrap();
        if let Some(original) = &attempt.acknowledged {
            assert_eq!(&body, original, "{idempotency_key} replays unchanged");
        }
        charged += attempt.units;
    }
    for replica in &mut replicas {
        replica.process.kill();
    }
    let store = Store::connect(url, Clock::system()).await.unwrap();
    let client_id = ClientId::parse("c", &seeded.client_id).unwrap();
    let balances = quota::balances_for(&store, &client_id).await.unwrap();
    assert_eq!(
        balances.balances[0].remaining_balance,
        CREDIT - charged,
        "no unit lost, none charged twice"
    );
    let report = quota::audit_verify(&store).await.unwrap();
    assert!(
        report.discrepancies.is_empty(),
        "{:?}",
        report.discrepancies
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_sigkill_under_load_loses_nothing_and_charges_once() {
    crash_run(Db::Sqlite, 1, Fault::Sigkill, kills()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_crash_around_commit_loses_nothing_and_charges_once() {
    crash_run(Db::Sqlite, 1, Fault::AroundCommit, kills()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_three_processes_sigkill_under_load() {
    if let Some(db) = Db::postgres() {
        crash_run(db, 3, Fault::Sigkill, kills()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_three_processes_crash_around_commit() {
    if let Some(db) = Db::postgres() {
        crash_run(db, 3, Fault::AroundCommit, kills()).await;
    }
}
