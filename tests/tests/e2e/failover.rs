//! Losing the PostgreSQL leader under load (docs/reliability.md, "Failover"). The service runs
//! behind HAProxy on a Patroni pair with a synchronous standby; licenses, batches and
//! redemptions go through the SDK with its default retries; the leader's postmaster is
//! SIGKILLed. Then: a new leader, writes succeed again within 30 s, every acknowledged write
//! is there exactly once, the balance is exact, the audit is clean, and no server replica was
//! restarted.
//!
//! Ignored by default: `.ci/failover` builds the cluster (docs/ops/) and runs it with
//! `PARTNER_BILLING_FAILOVER_URL` (PostgreSQL through HAProxy) and
//! `PARTNER_BILLING_FAILOVER_NODES` (`name=patroni-rest-address=data-dir`, comma-separated).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use partner_billing_client::{Credentials, PartnerClient, ProductClient, RetryPolicy};
use partner_billing_tests::process::binary;
use partner_billing_tests::{Db, TempDir, TestApp, logs, write_private};

/// Units credited to the reseller; far more than the load uses.
const CREDIT: i64 = 1_000_000;
/// Codes per batch.
const BATCH_CODES: u32 = 3;
/// How long the load runs before the kill, and again once writes succeed.
const LOAD_BESIDE: Duration = Duration::from_secs(4);
/// Writes must succeed again within this long after the leader's death.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// One Patroni node: its name, REST address and data directory.
struct Node {
    name: String,
    rest: String,
    data_dir: String,
}

fn nodes() -> Vec<Node> {
    let spec = std::env::var("PARTNER_BILLING_FAILOVER_NODES")
        .expect("PARTNER_BILLING_FAILOVER_NODES names the Patroni nodes: run .ci/failover");
    spec.split(',')
        .map(|node| {
            let mut parts = node.splitn(3, '=');
            let mut next = || parts.next().expect("name=rest=data-dir").to_owned();
            Node {
                name: next(),
                rest: next(),
                data_dir: next(),
            }
        })
        .collect()
}

/// The node whose Patroni answers `GET /primary` with 200, if any.
async fn leader(http: &reqwest::Client, nodes: &[Node]) -> Option<usize> {
    for (i, node) in nodes.iter().enumerate() {
        let answer = http
            .get(format!("http://{}/primary", node.rest))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        if answer.is_ok_and(|a| a.status() == 200) {
            return Some(i);
        }
    }
    None
}

/// What the load got acknowledged, and what failed for good.
#[derive(Default)]
struct Acknowledged {
    licenses: Vec<String>,
    batches: Vec<String>,
    redemptions: Vec<String>,
    failures: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the Patroni cluster that .ci/failover builds"]
async fn patroni_leader_killed_under_load() {
    let url = std::env::var("PARTNER_BILLING_FAILOVER_URL")
        .expect("PARTNER_BILLING_FAILOVER_URL is PostgreSQL through HAProxy: run .ci/failover");
    let nodes = nodes();
    let http = reqwest::Client::new();
    let app = TestApp::spawn(&Db::Postgres(url)).await;
    app.plan_with_days("pro", Some(30)).await;
    // Every license and redemption goes to a login of its own.
    sqlx::query(
        "INSERT INTO users (login, created_utc) \
         SELECT 'failover-' || g, 0 FROM generate_series(1, 50000) AS g",
    )
    .execute(app.store.pool())
    .await
    .expect("register logins");
    let r = app.reseller().await;
    app.credit(&r, "pro", CREDIT).await;
    let token = app.operator_token("failover").await;
    let mut replicas = app.process_replicas(2);
    let pids: Vec<u32> = replicas.servers.iter().map(|s| s.pid()).collect();
    let urls = replicas.base_urls();

    let stop = Arc::new(AtomicBool::new(false));
    let logins = Arc::new(AtomicU64::new(0));
    let codes = Arc::new(Mutex::new(Vec::<String>::new()));
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let next_login = {
        let logins = Arc::clone(&logins);
        move || format!("failover-{}", logins.fetch_add(1, Ordering::SeqCst) + 1)
    };
    let mut load = Vec::new();
    for (n, base_url) in urls.iter().enumerate() {
        let partner = PartnerClient::new(base_url, Credentials::new(&r.client_id, &r.secret))
            .expect("SDK client");
        let product = ProductClient::new(base_url, &token).expect("SDK client");
        // Licenses.
        load.push(tokio::spawn({
            let (partner, stop, acked, next_login) = (
                partner.clone(),
                stop.clone(),
                acked.clone(),
                next_login.clone(),
            );
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let answer = partner.issue_license("pro", &next_login(), None).await;
                    let mut acked = acked.lock().unwrap();
                    match answer {
                        Ok(issued) => acked.licenses.push(issued.value.license_id),
                        Err(err) => acked.failures.push(format!("license via {n}: {err}")),
                    }
                }
            }
        }));
        // Batches, whose codes the redemptions use.
        load.push(tokio::spawn({
            let (partner, stop, acked, codes) =
                (partner.clone(), stop.clone(), acked.clone(), codes.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let answer = partner.generate_promo_batch("pro", BATCH_CODES, None).await;
                    let mut acked = acked.lock().unwrap();
                    match answer {
                        Ok(issued) => {
                            acked.batches.push(issued.value.batch_id);
                            codes
                                .lock()
                                .unwrap()
                                .extend(issued.value.codes.into_iter().map(|c| c.code));
                        }
                        Err(err) => acked.failures.push(format!("batch via {n}: {err}")),
                    }
                }
            }
        }));
        // Redemptions.
        load.push(tokio::spawn({
            let (stop, acked, codes, next_login) = (
                stop.clone(),
                acked.clone(),
                codes.clone(),
                next_login.clone(),
            );
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let code = codes.lock().unwrap().pop();
                    let Some(code) = code else {
                        // No code yet: the batches are behind. A pause in the load, not a wait
                        // for anything.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let answer = product.redeem_promo_code(&code, &next_login(), None).await;
                    let mut acked = acked.lock().unwrap();
                    match answer {
                        Ok(redeemed) => acked.redemptions.push(redeemed.value.license_id),
                        Err(err) => acked.failures.push(format!("redemption via {n}: {err}")),
                    }
                }
            }
        }));
    }

    tokio::time::sleep(LOAD_BESIDE).await;
    let old_leader = leader(&http, &nodes)
        .await
        .expect("a leader before the kill");
    let data_dir = &nodes[old_leader].data_dir;
    let postmaster = std::fs::read_to_string(format!("{data_dir}/postmaster.pid"))
        .expect("the leader's postmaster.pid");
    let postmaster = postmaster.lines().next().expect("a pid").trim().to_owned();
    let acked_before = acked.lock().unwrap().licenses.len();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &postmaster])
        .status()
        .expect("kill");
    assert!(killed.success(), "SIGKILL the postmaster {postmaster}");
    let death = Instant::now();
    eprintln!(
        "failover: SIGKILL to {}'s postmaster (pid {postmaster}) after {acked_before} licenses",
        nodes[old_leader].name
    );

    // A probe sends one license without the SDK's retries, again and again with the same key
    // (it may have landed) until it is answered: that answer is the service back.
    let probe = PartnerClient::new(&urls[0], Credentials::new(&r.client_id, &r.secret))
        .expect("SDK client")
        .with_retry_policy(RetryPolicy::none().with_request_timeout(Duration::from_secs(2)));
    let (probe_key, probe_login) = (
        format!("probe-{}", uuid::Uuid::new_v4().simple()),
        next_login(),
    );
    let mut new_leader = None;
    let mut probes = 0;
    let recovered = loop {
        assert!(
            death.elapsed() < RECOVERY_BOUND,
            "no write succeeded within {RECOVERY_BOUND:?} of the leader's death"
        );
        if new_leader.is_none()
            && let Some(i) = leader(&http, &nodes).await.filter(|i| *i != old_leader)
        {
            new_leader = Some((i, death.elapsed()));
        }
        probes += 1;
        if let Ok(issued) = probe
            .issue_license("pro", &probe_login, Some(&probe_key))
            .await
        {
            acked.lock().unwrap().licenses.push(issued.value.license_id);
            break death.elapsed();
        }
        // The pace of the probe, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    while new_leader.is_none() {
        assert!(death.elapsed() < RECOVERY_BOUND, "no new leader");
        new_leader = leader(&http, &nodes)
            .await
            .filter(|i| *i != old_leader)
            .map(|i| (i, death.elapsed()));
    }
    let (new_leader, leader_after) = new_leader.expect("a new leader");
    tokio::time::sleep(LOAD_BESIDE).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("load task");
    }

    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let retries = logs::captured()
        .matches("partner-billing request failed; retrying")
        .count();
    eprintln!(
        "failover: new leader {} after {:.1} s; writes succeed again after {:.1} s; \
         {probes} probes; acknowledged {} licenses, {} batches, {} redemptions; \
         {} SDK retries; {} failures",
        nodes[new_leader].name,
        leader_after.as_secs_f64(),
        recovered.as_secs_f64(),
        acked.licenses.len(),
        acked.batches.len(),
        acked.redemptions.len(),
        retries,
        acked.failures.len(),
    );
    assert!(
        acked.failures.is_empty(),
        "every write lands within the SDK's default retries: {:?}",
        acked.failures
    );
    assert!(
        acked.licenses.len() > acked_before,
        "licenses after the failover"
    );
    assert!(!acked.batches.is_empty() && !acked.redemptions.is_empty());

    // Every acknowledged write exactly once, and nothing else.
    let stored = |sql: &'static str| {
        let pool = app.store.pool().clone();
        async move {
            let mut ids: Vec<String> = sqlx::query_scalar(sql)
                .fetch_all(&pool)
                .await
                .expect("stored ids");
            ids.sort();
            ids
        }
    };
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };
    assert_eq!(
        stored("SELECT license_id FROM licenses WHERE source = 'direct'").await,
        sorted(acked.licenses.clone()),
        "each acknowledged license once"
    );
    assert_eq!(
        stored("SELECT batch_id FROM promo_batches").await,
        sorted(acked.batches.clone()),
        "each acknowledged batch once"
    );
    assert_eq!(
        stored("SELECT license_id FROM licenses WHERE source = 'promo'").await,
        sorted(acked.redemptions.clone()),
        "each acknowledged redemption once"
    );
    let charged = acked.licenses.len() as i64 + acked.batches.len() as i64 * i64::from(BATCH_CODES);
    assert_eq!(app.balance(&r, "pro").await, Some(CREDIT - charged));
    audit_verify(&app);
    for (server, pid) in replicas.servers.iter_mut().zip(&pids) {
        assert!(!server.has_exited(), "replica {pid} kept running");
        assert_eq!(server.pid(), *pid);
    }
    drop(replicas);
    app.stop().await;
}

/// `partner-billing admin audit verify` against the database: exit 0.
fn audit_verify(app: &TestApp) {
    let dir = TempDir::new();
    let key = dir.path.join("master.key");
    write_private(&key, hex::encode(app.master_key()).as_bytes());
    let output = std::process::Command::new(binary("partner-billing"))
        .args(["admin", "audit", "verify"])
        .env_clear()
        .env("HOME", &dir.path)
        .env("PARTNER_BILLING_DATABASE_URL", &app.database_url)
        .env("PARTNER_BILLING_MASTER_KEY_FILE", &key)
        .output()
        .expect("run the CLI");
    assert!(
        output.status.success(),
        "admin audit verify: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "failover: admin audit verify: {}",
        String::from_utf8_lossy(&output.stdout).trim()
    );
}
