//! Runs the built `partner-billing` binary against a fresh SQLite file, through the operator
//! commands whose syntax is a stable contract (docs/design.md).

mod common;

use common::{TempDir, assert_one_line_error, assert_success, text};

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

struct Cli {
    database_url: String,
}

impl Cli {
    fn new(dir: &Path) -> Self {
        Self {
            database_url: format!("sqlite://{}", dir.join("billing.db").display()),
        }
    }

    /// Runs `partner-billing admin --database-url … <args>` with `stdin` piped in.
    fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_partner-billing"));
        command
            .arg("admin")
            .arg("--database-url")
            .arg(&self.database_url)
            .args(args);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PARTNER_BILLING_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn partner-billing");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait for partner-billing")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, "")
    }

    /// Runs with `--json`, expects success and exactly one JSON object on stdout.
    fn json(&self, args: &[&str]) -> Value {
        self.json_with_stdin(args, "")
    }

    fn json_with_stdin(&self, args: &[&str], stdin: &str) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run_with_stdin(&all, stdin);
        assert_success(&out, args);
        one_json_object(&out.stdout)
    }
}

/// stdout holds one JSON object and nothing else.
fn one_json_object(stdout: &[u8]) -> Value {
    let stdout = text(stdout);
    let mut stream = serde_json::Deserializer::from_str(&stdout).into_iter::<Value>();
    let value = stream.next().expect("a JSON value").expect("valid JSON");
    assert!(
        stream.next().is_none(),
        "more than one JSON value: {stdout:?}"
    );
    assert!(value.is_object(), "not an object: {stdout:?}");
    value
}

#[test]
fn operator_workflow_through_the_binary() {
    let dir = TempDir::new();
    let cli = Cli::new(&dir.path);

    // Plans.
    let plan = cli.json(&[
        "plan",
        "create",
        "--slug",
        "pro",
        "--name",
        "Pro",
        "--duration-days",
        "30",
        "--redemptions-per-code",
        "2",
        "--code-validity-days",
        "90",
    ]);
    assert_eq!(plan["slug"], "pro");
    assert_eq!(plan["durationDays"], 30);
    assert_eq!(plan["redemptionsPerCode"], 2);
    assert_eq!(plan["codeValidityDays"], 90);
    let out = cli.run(&["plan", "create", "--slug", "basic", "--name", "Basic"]);
    assert_success(&out, &["plan create basic"]);
    assert!(text(&out.stdout).contains("basic"));
    let plans = cli.json(&["plan", "list"]);
    let slugs: Vec<&str> = plans["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["basic", "pro"]);
    assert_eq!(plans["plans"][0]["durationDays"], Value::Null);
    assert_eq!(plans["plans"][0]["redemptionsPerCode"], 1);
    assert_eq!(plans["plans"][0]["codeValidityDays"], 365);
    assert_one_line_error(
        &cli.run(&["plan", "create", "--slug", "pro", "--name", "Again"]),
        "already exists",
    );

    // Users: idempotent, and says whether the login was new.
    assert_eq!(
        cli.json(&["user", "add", "--login", "alice@example.com"])["created"],
        true
    );
    assert_eq!(
        cli.json(&["user", "add", "--login", "alice@example.com"])["created"],
        false
    );

    // A reseller, with the password on stdin; it is never printed.
    let password = "correct horse battery";
    let created = cli.json_with_stdin(
        &["reseller", "create", "--name", "Acme", "--password-stdin"],
        &format!("{password}\n"),
    );
    let client_id = created["clientId"].as_str().expect("clientId").to_owned();
    assert!(
        client_id.starts_with("rsc_") && client_id.len() == 28,
        "{client_id}"
    );
    assert_eq!(created.as_object().unwrap().len(), 1);
    let shown = cli.json(&["reseller", "show", "--client-id", &client_id]);
    assert_eq!(shown["name"], "Acme");
    assert_eq!(shown["standing"], "good");
    assert!(!shown.to_string().contains(password));
    let listed = cli.json(&["reseller", "list"]);
    assert_eq!(listed["resellers"].as_array().unwrap().len(), 1);

    // Quota and ledger.
    let balance = cli.json(&[
        "quota",
        "credit",
        "--client-id",
        &client_id,
        "--plan",
        "pro",
        "--units",
        "10",
        "--reason",
        "initial order",
    ]);
    assert_eq!(
        balance,
        serde_json::json!({ "productSlug": "pro", "remainingBalance": 10 })
    );
    let balance = cli.json(&[
        "quota",
        "credit",
        "--client-id",
        &client_id,
        "--plan",
        "basic",
        "--units",
        "3",
        "--reason",
        "trial",
    ]);
    assert_eq!(balance["remainingBalance"], 3);
    let ledger = cli.json(&["quota", "ledger", "--client-id", &client_id]);
    let entries = ledger["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["kind"], "credit");
    assert_eq!(entries[0]["delta"], 10);
    assert_eq!(entries[0]["reason"], "initial order");
    let ledger = cli.json(&[
        "quota",
        "ledger",
        "--client-id",
        &client_id,
        "--plan",
        "basic",
    ]);
    assert_eq!(ledger["entries"].as_array().unwrap().len(), 1);
    let out = cli.run(&["quota", "ledger", "--client-id", &client_id]);
    assert_success(&out, &["quota ledger (text)"]);
    assert!(text(&out.stdout).contains("initial order"));

    // Standing.
    assert_eq!(
        cli.json(&["reseller", "suspend", "--client-id", &client_id])["standing"],
        "suspended"
    );
    assert_eq!(
        cli.json(&["reseller", "show", "--client-id", &client_id])["standing"],
        "suspended"
    );
    assert_eq!(
        cli.json(&["reseller", "reinstate", "--client-id", &client_id])["standing"],
        "good"
    );
    let changed = cli.json_with_stdin(
        &[
            "reseller",
            "set-password",
            "--client-id",
            &client_id,
            "--password-stdin",
        ],
        "another long password\n",
    );
    assert_eq!(changed["clientId"], client_id.as_str());

    // Keys: none yet.
    let keys = cli.json(&["key", "list", "--client-id", &client_id]);
    assert_eq!(keys, serde_json::json!({ "apiKeys": [] }));

    // Audit.
    let out = cli.run(&["audit", "verify"]);
    assert_success(&out, &["audit verify"]);
    let report = cli.json(&["audit", "verify"]);
    assert_eq!(report["ok"], true);
    assert_eq!(report["balancesChecked"], 2);
    assert_eq!(report["discrepancies"], serde_json::json!([]));

    // `--json` is accepted before and after the subcommand.
    let out = cli.run(&["plan", "list", "--json"]);
    assert_success(&out, &["plan list --json"]);
    assert_eq!(one_json_object(&out.stdout), plans);
}

#[test]
fn errors_are_one_line_and_non_zero() {
    let dir = TempDir::new();
    let cli = Cli::new(&dir.path);
    let unknown = "rsc_000000000000000000000000";

    for args in [
        vec!["reseller", "show", "--client-id", unknown],
        vec!["reseller", "suspend", "--client-id", unknown],
        vec!["key", "list", "--client-id", unknown],
        vec!["quota", "ledger", "--client-id", unknown],
    ] {
        let out = cli.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_one_line_error(&out, "reseller not found");
        let mut json_args = vec!["--json"];
        json_args.extend(&args);
        assert_one_line_error(&cli.run(&json_args), "reseller not found");
    }

    let out = cli.run(&[
        "quota",
        "credit",
        "--client-id",
        unknown,
        "--plan",
        "pro",
        "--units",
        "1",
        "--reason",
        "x",
    ]);
    assert_one_line_error(&out, "not found");

    // A plan that does not exist is said, not an empty ledger.
    let created = cli.json_with_stdin(
        &["reseller", "create", "--name", "Acme", "--password-stdin"],
        "a long password 123\n",
    );
    let client_id = created["clientId"].as_str().unwrap();
    let out = cli.run(&[
        "quota",
        "ledger",
        "--client-id",
        client_id,
        "--plan",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_one_line_error(&out, "unknown plan");
    // A negative number is said to be out of range, not taken for a flag.
    for args in [
        vec![
            "quota",
            "credit",
            "--client-id",
            client_id,
            "--plan",
            "pro",
            "--units",
            "-5",
            "--reason",
            "x",
        ],
        vec![
            "plan",
            "create",
            "--slug",
            "x",
            "--name",
            "X",
            "--duration-days",
            "-1",
        ],
    ] {
        let out = cli.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_one_line_error(&out, "is not in 1..=");
    }

    // Usage errors: exit 2, still one line.
    let out = cli.run(&["reseller", "show", "--client-id", "not-a-client-id"]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--client-id");
    let out = cli.run(&["plan", "create", "--name", "No slug"]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--slug");
    let out = cli.run(&["reseller", "create", "--name", "Acme"]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, "--password-stdin");

    // A password: missing on stdin, or too short; never echoed.
    let out = cli.run(&["reseller", "create", "--name", "Acme", "--password-stdin"]);
    assert_one_line_error(&out, "stdin");
    let out = cli.run_with_stdin(
        &["reseller", "create", "--name", "Acme", "--password-stdin"],
        "short1\n",
    );
    let stderr = assert_one_line_error(&out, "password");
    assert!(!stderr.contains("short1"), "{stderr}");
    assert_eq!(
        cli.json(&["reseller", "list"])["resellers"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "only the one created above"
    );
}

#[test]
fn purge_on_a_fresh_database_drops_nothing() {
    let dir = TempDir::new();
    let cli = Cli::new(&dir.path);
    assert_eq!(
        cli.json(&["purge"]),
        serde_json::json!({ "purged": 0, "purgedSessions": 0 })
    );
    let out = cli.run(&["purge"]);
    assert_success(&out, &["purge"]);
    assert_eq!(text(&out.stdout), "purged 0 expired recovery payloads\n");
}

#[test]
fn corrections_and_the_audit_log_through_the_binary() {
    let dir = TempDir::new();
    let cli = Cli::new(&dir.path);
    cli.json(&["plan", "create", "--slug", "pro", "--name", "Pro"]);
    let created = cli.json_with_stdin(
        &["reseller", "create", "--name", "Acme", "--password-stdin"],
        "correct horse battery\n",
    );
    let client_id = created["clientId"].as_str().unwrap().to_owned();
    let credit = |units: &str, reference: &str| {
        vec![
            "quota",
            "credit",
            "--client-id",
            client_id.as_str(),
            "--plan",
            "pro",
            "--units",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([units.to_owned()])
        .chain(["--reason", "top-up", "--reference"].map(str::to_owned))
        .chain([reference.to_owned()])
        .collect::<Vec<String>>()
    };
    let args = credit("1000", "inv-1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = cli.json(&args);
    assert_eq!(
        first,
        serde_json::json!({"productSlug": "pro", "remainingBalance": 1000, "replayed": false})
    );
    let again = cli.json(&args);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["remainingBalance"], 1000);
    let other = credit("100", "inv-1");
    let other: Vec<&str> = other.iter().map(String::as_str).collect();
    assert_one_line_error(&cli.run(&other), "reference");

    // `--units -900` as two words; below zero refused.
    let adjust = |units: &str| {
        cli.run(&[
            "--json",
            "quota",
            "adjust",
            "--client-id",
            &client_id,
            "--plan",
            "pro",
            "--units",
            units,
            "--reason",
            "meant 100, not 1000",
        ])
    };
    let out = adjust("-900");
    assert_success(&out, &["quota adjust --units -900"]);
    assert_eq!(one_json_object(&out.stdout)["remainingBalance"], 100);
    assert_one_line_error(&adjust("-101"), "insufficient quota");
    let ledger = cli.json(&["quota", "ledger", "--client-id", &client_id]);
    assert_eq!(ledger["entries"][1]["kind"], "adjustment");
    assert_eq!(ledger["entries"][1]["delta"], -900);
    assert_eq!(cli.json(&["audit", "verify"])["ok"], true);

    // The trail, newest first, with the OS user as the actor.
    let log = cli.json(&["audit", "log", "--client-id", &client_id]);
    let actions: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["quota.adjusted", "quota.credited", "account.created"]
    );
    assert!(
        log["entries"][0]["actor"]
            .as_str()
            .unwrap()
            .starts_with("cli:")
    );
    assert_eq!(log["entries"][0]["sourceAddress"], Value::Null);
    assert_eq!(log["entries"][0]["details"]["units"], -900);
    let limited = cli.json(&["audit", "log", "--limit", "1"]);
    assert_eq!(limited["entries"].as_array().unwrap().len(), 1);
    // Its cursor reads the next page (no master key here); altered by a character, or used
    // under another `--since`, it is refused.
    let cursor = limited["nextCursor"].as_str().expect("a next page");
    let next = cli.json(&["audit", "log", "--limit", "1", "--cursor", cursor]);
    assert_eq!(next["entries"].as_array().unwrap().len(), 1);
    assert_ne!(next["entries"], limited["entries"]);
    let mut altered = cursor.as_bytes().to_vec();
    altered[0] = if altered[0] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    assert_one_line_error(
        &cli.run(&["audit", "log", "--limit", "1", "--cursor", &altered]),
        "cursor",
    );
    assert_one_line_error(
        &cli.run(&["audit", "log", "--since", "0", "--cursor", cursor]),
        "cursor",
    );
    let far_future = cli.json(&["audit", "log", "--since", "99999999999"]);
    assert_eq!(far_future["entries"], serde_json::json!([]));
    let text = cli.run(&["audit", "log"]);
    assert_success(&text, &["audit log"]);
    assert!(common::text(&text.stdout).contains("quota.adjusted"));
    assert_one_line_error(&cli.run(&["audit", "log", "--limit", "0"]), "limit");
    // In text, where the next page starts is said on stderr, as for the reseller's lists.
    let paged = cli.run(&["audit", "log", "--limit", "1"]);
    assert_success(&paged, &["audit log --limit 1"]);
    let more = common::text(&paged.stderr);
    assert!(
        more.starts_with("more: run again with the same options and --cursor "),
        "{more}"
    );
}

/// Output into a pipe whose reader has gone (`| head`) ends quietly: no panic, no error line.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = TempDir::new();
    let cli = Cli::new(&dir.path);
    cli.json(&["plan", "create", "--slug", "pro", "--name", "Pro"]);
    let created = cli.json_with_stdin(
        &["reseller", "create", "--name", "Acme", "--password-stdin"],
        "a long password 123\n",
    );
    let client_id = created["clientId"].as_str().unwrap();
    let credit = [
        "quota",
        "credit",
        "--client-id",
        client_id,
        "--plan",
        "pro",
        "--units",
        "1",
    ];
    cli.json(&[&credit[..], &["--reason", "r"]].concat());
    let db = cli.database_url.as_str();
    let runs: [&[&str]; 6] = [
        &["completions", "bash"],
        &["man"],
        &["admin", "--database-url", db, "plan", "list"],
        &["admin", "--database-url", db, "--json", "plan", "list"],
        // A list printed as it is read (streamed), in text and in JSON.
        &[
            "admin",
            "--database-url",
            db,
            "quota",
            "ledger",
            "--client-id",
            client_id,
        ],
        &[
            "admin",
            "--database-url",
            db,
            "--json",
            "quota",
            "ledger",
            "--client-id",
            client_id,
        ],
    ];
    for args in runs {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_partner-billing"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run partner-billing");
        assert_eq!(text(&out.stderr), "", "{args:?}");
        assert!(out.status.success(), "{args:?}: {:?}", out.status);
    }
}
