//! The README walkthrough, end to end with the real binaries: an empty database to a first
//! license using only the `partner-billing` CLI against a running `partner-billing-server`.
//!
//! Over 450 lines on purpose: two long walkthroughs (the README's, and webhooks and alerts),
//! their commands and the output they read spelled out as a reader types them.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use partner_billing_tests::process::{ServerProcess, binary};
use partner_billing_tests::{Db, TempDir, both_databases, fresh_database};
use serde_json::Value;

both_databases!(readme_walkthrough, webhooks_and_alerts_with_the_cli);

/// The `partner-billing` binary with a clean environment: the database and service named,
/// `HOME` and the working directory in `dir`, and `env` besides.
pub(crate) struct Cli<'a> {
    pub(crate) database_url: &'a str,
    pub(crate) base_url: &'a str,
    pub(crate) dir: &'a TempDir,
    pub(crate) env: Vec<(&'static str, String)>,
}

impl Cli<'_> {
    pub(crate) fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(binary("partner-billing"))
            .args(args)
            .env_clear()
            .env("HOME", &self.dir.path)
            .env("PARTNER_BILLING_DATABASE_URL", self.database_url)
            .env("PARTNER_BILLING_BASE_URL", self.base_url)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir(&self.dir.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cli");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
        drop(input);
        child.wait_with_output().expect("cli output")
    }

    pub(crate) fn json(&self, args: &[&str], stdin: Option<&str>) -> Value {
        let output = self.run(args, stdin);
        assert!(
            output.status.success(),
            "partner-billing {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?} printed no JSON object ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }
}

async fn readme_walkthrough(db: Db) {
    let (database_url, home) = fresh_database(&db).await;
    let dir = &home.dir;
    let server = ServerProcess::start(&database_url, &dir.path, &[]);
    let base_url = server.base_url.clone();
    let mut cli = Cli {
        database_url: &database_url,
        base_url: &base_url,
        dir,
        env: vec![],
    };
    let password = "correct horse battery staple";

    // Operator: a plan, an end user, a reseller and its quota.
    cli.json(
        &[
            "admin",
            "--json",
            "plan",
            "create",
            "--slug",
            "pro",
            "--name",
            "Pro",
            "--duration-days",
            "30",
        ],
        None,
    );
    cli.json(
        &[
            "admin",
            "--json",
            "user",
            "add",
            "--login",
            "alice@example.com",
        ],
        None,
    );
    let reseller = cli.json(
        &[
            "admin",
            "--json",
            "reseller",
            "create",
            "--name",
            "Acme",
            "--password-stdin",
        ],
        Some(&format!("{password}\n")),
    );
    let client_id = reseller["clientId"].as_str().expect("clientId").to_owned();
    assert!(client_id.starts_with("rsc_"));
    let credited = cli.json(
        &[
            "admin",
            "--json",
            "quota",
            "credit",
            "--client-id",
            &client_id,
            "--plan",
            "pro",
            "--units",
            "10",
            "--reason",
            "PO 1234",
        ],
        None,
    );
    assert_eq!(
        credited,
        serde_json::json!({"productSlug": "pro", "remainingBalance": 10})
    );

    // Reseller: panel login, an API key, a first license. Before the login, a panel command
    // is a usage error (a missing credential), one line, exit 2.
    let not_yet = cli.run(&["keys", "list"], None);
    assert_eq!(not_yet.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&not_yet.stderr);
    assert!(stderr.starts_with("error: not logged in"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let login = cli.run(
        &["keys", "login", "--client-id", &client_id],
        Some(&format!("{password}\n")),
    );
    assert!(
        login.status.success(),
        "keys login: {}",
        String::from_utf8_lossy(&login.stderr)
    );
    let key = cli.json(&["--json", "keys", "create", "--name", "backend"], None);
    let secret = key["secret"].as_str().expect("secret").to_owned();
    cli.env = vec![
        ("PARTNER_BILLING_CLIENT_ID", client_id.clone()),
        ("PARTNER_BILLING_SECRET", secret),
    ];
    let license = cli.json(
        &[
            "--json",
            "license",
            "issue",
            "--plan",
            "pro",
            "--login",
            "alice@example.com",
            "--idempotency-key",
            "first-license",
        ],
        None,
    );
    assert_eq!(license["login"], "alice@example.com");
    assert_eq!(license["remainingBalance"], 9);
    // Retrying the same command replays the same license.
    let again = cli.json(
        &[
            "--json",
            "license",
            "issue",
            "--plan",
            "pro",
            "--login",
            "alice@example.com",
            "--idempotency-key",
            "first-license",
        ],
        None,
    );
    assert_eq!(again["licenseId"], license["licenseId"]);
    let balance = cli.json(&["--json", "balance"], None);
    assert_eq!(balance["balances"][0]["remainingBalance"], 9, "{balance}");
    let text = cli.run(&["balance"], None);
    assert!(String::from_utf8_lossy(&text.stdout).contains("pro"));

    // Issued to the wrong login: revoked, idempotently; no unit comes back.
    let id = license["licenseId"].as_str().expect("license id");
    let revoked = cli.json(&["--json", "license", "revoke", "--license-id", id], None);
    assert_eq!(revoked["licenseId"], license["licenseId"]);
    assert!(revoked["revokedUtc"].as_i64().is_some(), "{revoked}");
    let again = cli.json(&["--json", "license", "revoke", "--license-id", id], None);
    assert_eq!(again, revoked);
    // In text, `show` and `list` say it is revoked, and when its period starts.
    let shown = cli.run(&["license", "show", "--license-id", id], None);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let lines: Vec<&str> = shown.lines().map(str::trim).collect();
    assert!(lines.iter().any(|l| l.starts_with("starts:")), "{shown}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("revoked:") && !l.ends_with('-')),
        "{shown}"
    );
    let listed = cli.run(&["license", "list"], None);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let header = listed.lines().next().unwrap_or_default();
    assert!(
        header.contains("STARTS") && header.contains("REVOKED"),
        "{listed}"
    );
    let unknown = cli.run(&["license", "revoke", "--license-id", "nope"], None);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("License.NotFound"), "{stderr}");
    let balance = cli.json(&["--json", "balance"], None);
    assert_eq!(balance["balances"][0]["remainingBalance"], 9, "{balance}");

    // Promo codes into a private CSV file; an existing file is never overwritten.
    let out = dir.path.join("codes.csv");
    let out_arg = out.to_str().expect("utf-8 path");
    let generated = cli.run(
        &[
            "promo", "generate", "--plan", "pro", "--count", "5", "--out", out_arg,
        ],
        None,
    );
    assert!(
        generated.status.success(),
        "promo generate: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let csv = std::fs::read_to_string(&out).expect("csv written");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 6, "header and five codes: {csv}");
    assert!(lines[0].starts_with("code"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let again = cli.run(
        &[
            "promo", "generate", "--plan", "pro", "--count", "5", "--out", out_arg,
        ],
        None,
    );
    assert!(!again.status.success(), "refuses to overwrite");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), csv);
    let balance = cli.json(&["--json", "balance"], None);
    assert_eq!(
        balance["balances"][0]["remainingBalance"], 4,
        "one batch of five charged: {balance}"
    );

    // Errors: one line on stderr, non-zero exit, nothing charged.
    let refused = cli.run(
        &["license", "issue", "--plan", "pro", "--login", "nobody"],
        None,
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Reseller.UnknownLogin"), "{stderr}");

    // The operator's view: the ledger and a clean audit.
    let ledger = cli.json(
        &[
            "admin",
            "--json",
            "quota",
            "ledger",
            "--client-id",
            &client_id,
        ],
        None,
    );
    assert_eq!(
        ledger["entries"].as_array().map(Vec::len),
        Some(3),
        "{ledger}"
    );
    let audit = cli.run(&["admin", "audit", "verify"], None);
    assert!(
        audit.status.success(),
        "audit: {}",
        String::from_utf8_lossy(&audit.stderr)
    );

    // A balance changed behind the ledger's back is found: exit 1 and the discrepancy named.
    let store = partner_billing::store::Store::connect(
        &database_url,
        partner_billing::clock::Clock::system(),
    )
    .await
    .expect("store");
    sqlx::query("UPDATE balances SET remaining = remaining + 1")
        .execute(store.pool())
        .await
        .expect("tamper");
    let tampered = cli.run(&["admin", "--json", "audit", "verify"], None);
    assert_eq!(
        tampered.status.code(),
        Some(1),
        "audit verify exits 1 on a discrepancy"
    );
    let report: Value = serde_json::from_slice(&tampered.stdout).expect("one JSON object");
    assert_eq!(
        report["discrepancies"][0]["clientId"],
        client_id.as_str(),
        "{report}"
    );
    assert_eq!(report["discrepancies"][0]["balance"], 5);
    assert_eq!(report["discrepancies"][0]["ledgerSum"], 4);
    store.close().await;
}

/// `webhooks add|list|test|deliveries|remove` and `alerts set`, against the real server
/// binary, delivering to a receiver on 127.0.0.1.
async fn webhooks_and_alerts_with_the_cli(db: Db) {
    use partner_billing_tests::receiver::{Receiver, TEST_WEBHOOK_ENV};

    let (database_url, home) = fresh_database(&db).await;
    let dir = &home.dir;
    let server = ServerProcess::start(&database_url, &dir.path, &TEST_WEBHOOK_ENV);
    let base_url = server.base_url.clone();
    let mut cli = Cli {
        database_url: &database_url,
        base_url: &base_url,
        dir,
        env: vec![],
    };
    let password = "correct horse battery staple";
    cli.json(
        &[
            "admin", "--json", "plan", "create", "--slug", "pro", "--name", "Pro",
        ],
        None,
    );
    cli.json(
        &["admin", "--json", "user", "add", "--login", "alice"],
        None,
    );
    let reseller = cli.json(
        &[
            "admin",
            "--json",
            "reseller",
            "create",
            "--name",
            "Acme",
            "--password-stdin",
        ],
        Some(&format!("{password}\n")),
    );
    let client_id = reseller["clientId"].as_str().expect("clientId").to_owned();
    cli.json(
        &[
            "admin",
            "--json",
            "quota",
            "credit",
            "--client-id",
            &client_id,
            "--plan",
            "pro",
            "--units",
            "5",
            "--reason",
            "PO 1",
        ],
        None,
    );
    let login = cli.run(
        &["keys", "login", "--client-id", &client_id],
        Some(&format!("{password}\n")),
    );
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );

    let receiver = Receiver::start().await;
    let added = cli.json(
        &[
            "--json",
            "webhooks",
            "add",
            "--url",
            &receiver.url,
            "--event",
            "license.issued",
            "--event",
            "balance.low",
        ],
        None,
    );
    let id = added["webhookEndpointId"].as_str().expect("id").to_owned();
    let secret = added["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with("whsec_"));
    let listed = cli.json(&["--json", "webhooks", "list"], None);
    assert_eq!(
        listed["webhookEndpoints"][0]["webhookEndpointId"],
        id.as_str()
    );
    assert_eq!(
        listed["webhookEndpoints"][0]["eventTypes"],
        serde_json::json!(["license.issued", "balance.low"])
    );
    assert!(!listed.to_string().contains(&secret));
    let alert = cli.json(
        &["--json", "alerts", "set", "--plan", "pro", "--below", "5"],
        None,
    );
    assert_eq!(
        alert,
        serde_json::json!({"productSlug": "pro", "lowBalanceThreshold": 5})
    );

    let key = cli.json(&["--json", "keys", "create"], None);
    cli.env = vec![
        ("PARTNER_BILLING_CLIENT_ID", client_id.clone()),
        (
            "PARTNER_BILLING_SECRET",
            key["secret"].as_str().expect("secret").to_owned(),
        ),
    ];
    cli.json(
        &[
            "--json", "license", "issue", "--plan", "pro", "--login", "alice",
        ],
        None,
    );
    let received = receiver.wait_for(2).await;
    let mut types: Vec<String> = received
        .iter()
        .map(|r| {
            standardwebhooks::Webhook::new(&secret)
                .unwrap()
                .verify(&r.body, &r.headers)
                .expect("signed");
            r.json()["type"].as_str().unwrap().to_owned()
        })
        .collect();
    types.sort();
    assert_eq!(types, ["balance.low", "license.issued"]);

    let queued = cli.json(&["--json", "webhooks", "test", "--id", &id], None);
    assert_eq!(queued["queued"], true);
    receiver.wait_for(3).await;
    let deliveries =
        partner_billing_tests::receiver::eventually("three attempts listed", || async {
            let d = cli.json(&["--json", "webhooks", "deliveries", "--id", &id], None);
            (d["deliveries"].as_array().map(Vec::len) == Some(3)).then_some(d)
        })
        .await;
    assert_eq!(deliveries["deliveries"][0]["eventType"], "webhook.test");
    assert_eq!(deliveries["deliveries"][0]["statusCode"], 204);
    let table = cli.run(&["webhooks", "deliveries", "--id", &id], None);
    assert!(String::from_utf8_lossy(&table.stdout).contains("webhook.test"));

    cli.json(&["--json", "webhooks", "remove", "--id", &id], None);
    let listed = cli.json(&["--json", "webhooks", "list"], None);
    assert_eq!(listed["webhookEndpoints"], serde_json::json!([]));
    let again = cli.run(&["webhooks", "remove", "--id", &id], None);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.starts_with("error: Reseller.WebhookEndpointNotFound"),
        "{stderr}"
    );
    let bad = cli.run(
        &[
            "webhooks",
            "add",
            "--url",
            "https://10.0.0.1/",
            "--event",
            "license.issued",
        ],
        None,
    );
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("url"));
}
