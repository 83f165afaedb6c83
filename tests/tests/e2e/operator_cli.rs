//! The operator's `admin` commands through the real binary, on the database a running server
//! uses: a revocation and a void are in the trail once, with the OS user running the command
//! (never what `$USER` says) and the reason; a refused request (a reused reference, a bad reason,
//! a balance below zero) exits 1 with one line and changes nothing; usage errors stay exit 2.

use std::process::Output;

use partner_billing_tests::receiver::subscribe;
use partner_billing_tests::{Db, Reseller, TempDir, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

use crate::audit_trail::all_entries;
use crate::cli::Cli;
use crate::panel::{get, sign_in};

both_databases!(
    admin_license_revoke_is_in_the_trail_once_with_the_os_user_and_the_reason,
    admin_promo_void_voids_the_batch_as_the_partner_api_does,
    refused_corrections_exit_1_with_one_line_and_nothing_changed,
);

/// What `$USER` and `$LOGNAME` claim in these tests: never the actor.
const SPOOFED_USER: &str = "spoofed-operator";

/// The binary on `app`'s database, with `$USER` and `$LOGNAME` naming someone else.
fn admin<'a>(app: &'a TestApp, dir: &'a TempDir) -> Cli<'a> {
    Cli {
        database_url: &app.database_url,
        base_url: &app.base_url,
        dir,
        env: vec![
            ("USER", SPOOFED_USER.to_owned()),
            ("LOGNAME", SPOOFED_USER.to_owned()),
        ],
    }
}

/// `cli:` and the name of the user this test runs as, found from the process's real uid in
/// `/proc/self/status` and `/etc/passwd` (never from the environment); `cli:uid:<n>` when the
/// uid has no name.
fn os_user_actor() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .expect("a real uid")
        .to_owned();
    let name = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 2 && fields[2] == uid).then(|| fields[0].to_owned())
        });
    match name {
        Some(name) => format!("cli:{name}"),
        None => format!("cli:uid:{uid}"),
    }
}

/// Asserts a refusal: exit 1 and exactly one `error: ` line on stderr naming `needle`.
fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(needle), "{needle} in {stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout");
}

/// The operator's trail of one account, newest first (`admin audit log --json`).
fn audit_log(cli: &Cli<'_>, client_id: &str) -> Vec<Value> {
    let log = cli.json(
        &[
            "admin",
            "--json",
            "audit",
            "log",
            "--client-id",
            client_id,
            "--limit",
            "500",
        ],
        None,
    );
    log["entries"].as_array().expect("entries").clone()
}

fn with_action<'a>(entries: &'a [Value], action: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["action"] == action).collect()
}

async fn issue(app: &TestApp, r: &Reseller, login: &str) -> String {
    let response = app
        .partner(Method::POST, "/v1/billing/partner/licenses", r)
        .json(&json!({
            "planSlug": "pro",
            "login": login,
            "idempotencyKey": format!("license-{}", uuid::Uuid::new_v4().simple()),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let license: Value = response.json().await.unwrap();
    license["licenseId"].as_str().unwrap().to_owned()
}

async fn revoked_utc(app: &TestApp, r: &Reseller, license_id: &str) -> Value {
    let license: Value = app
        .partner(
            Method::GET,
            &format!("/v1/billing/partner/licenses/{license_id}"),
            r,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    license["revokedUtc"].clone()
}

async fn admin_license_revoke_is_in_the_trail_once_with_the_os_user_and_the_reason(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 5).await;
    let first = issue(&app, &r, "alice").await;
    let second = issue(&app, &r, "alice").await;
    let dir = TempDir::new();
    let cli = admin(&app, &dir);
    let reason = "issued to the wrong login (ticket 42)";
    let revoke = |license_id: &str, reason: &str| {
        cli.run(
            &[
                "admin",
                "--json",
                "license",
                "revoke",
                "--license-id",
                license_id,
                "--reason",
                reason,
            ],
            None,
        )
    };

    // A reason with a control character, or past the bound, is refused as a credit's is:
    // exit 1, one line, nothing revoked, nothing in the trail.
    let before = audit_log(&cli, &r.client_id);
    for bad in ["two\nlines", "colour \u{1b}[31m", &"x".repeat(10 * 1024)] {
        assert_refused(&revoke(&second, bad), "reason");
    }
    assert_eq!(revoked_utc(&app, &r, &second).await, Value::Null);
    assert_eq!(audit_log(&cli, &r.client_id), before);

    let out = revoke(&first, reason);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revoked: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(revoked["revokedUtc"].is_i64(), "{revoked}");
    // Again: the same license, nothing changed, no second entry.
    let again = revoke(&first, "a second reason");
    assert!(again.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap(),
        revoked
    );

    let entries = audit_log(&cli, &r.client_id);
    let revocations = with_action(&entries, "license.revoked");
    assert_eq!(revocations.len(), 1, "{entries:#?}");
    let entry = revocations[0];
    assert_eq!(entry["actor"], os_user_actor().as_str(), "{entry}");
    assert_ne!(entry["actor"], format!("cli:{SPOOFED_USER}").as_str());
    assert_eq!(entry["ids"]["licenseId"], first.as_str(), "{entry}");
    assert_eq!(entry["details"]["reason"], reason, "{entry}");
    assert_eq!(entry["clientId"], r.client_id.as_str());
    assert!(entry["sourceAddress"].is_null() && entry["requestId"].is_null());

    // The reseller sees it, in JSON and on the panel's activity page.
    let token = app.session(&r.client_id, &r.password).await;
    let theirs = all_entries(&app, &token).await;
    let seen = with_action(&theirs, "license.revoked");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["ids"]["licenseId"], first.as_str());
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let page = get(&app, "/panel/activity", &cookie).await;
    assert!(page.body.contains("license.revoked"), "{}", page.body);
    assert!(page.body.contains(&first));
    app.stop().await;
}

async fn admin_promo_void_voids_the_batch_as_the_partner_api_does(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 10).await;
    let token = app.operator_token("backend").await;
    let (_receiver, _panel, _endpoint) = subscribe(&app, &r, &["promo_batch.voided"]).await;
    let (batch_id, codes) = app.promo_batch(&r, "pro", 2).await;
    let (kept_id, _) = app.promo_batch(&r, "pro", 1).await;
    let balance = app.balance(&r, "pro").await;
    let dir = TempDir::new();
    let cli = admin(&app, &dir);
    let void = |batch_id: &str, reason: &str| {
        cli.run(
            &[
                "admin",
                "--json",
                "promo",
                "void",
                "--batch-id",
                batch_id,
                "--reason",
                reason,
            ],
            None,
        )
    };
    let events = || {
        app.count_rows(
            "SELECT COUNT(*) FROM webhook_events WHERE event_type = 'promo_batch.voided'",
        )
    };

    // Refused: a bad reason, an unknown batch; nothing voided.
    assert_refused(&void(&kept_id, "line\nbreak"), "reason");
    assert_refused(
        &void("00000000-0000-4000-8000-000000000000", "no such batch"),
        "Reseller.PromoBatchNotFound",
    );

    let reason = "chargeback 7";
    let out = void(&batch_id, reason);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(shown["voidedUtc"].is_i64(), "{shown}");
    // The batch as the read API shows it.
    let listed: Value = app
        .partner(Method::GET, "/v1/billing/partner/promo-batches", &r)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let read = listed["promoBatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["batchId"] == batch_id.as_str())
        .unwrap();
    assert_eq!(&shown, read);
    assert_eq!(events().await, 1);
    // Again: unchanged, no second event or entry.
    let again = void(&batch_id, "again");
    assert!(again.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap(),
        shown
    );
    assert_eq!(events().await, 1);

    // Its codes redeem no more; the other batch is untouched; no unit came back.
    let redeemed = app.redeem(&token, &codes[0], "alice", "redeem-1").await;
    assert_eq!(redeemed.status(), 410);
    let body: Value = redeemed.json().await.unwrap();
    assert_eq!(body["code"], "Promo.CodeVoided");
    assert_eq!(
        app.count_rows("SELECT COUNT(*) FROM promo_batches WHERE voided_utc IS NOT NULL")
            .await,
        1
    );
    assert_eq!(app.balance(&r, "pro").await, balance);

    let entries = audit_log(&cli, &r.client_id);
    let voids = with_action(&entries, "promo_batch.voided");
    assert_eq!(voids.len(), 1, "{entries:#?}");
    assert_eq!(voids[0]["actor"], os_user_actor().as_str(), "{}", voids[0]);
    assert_eq!(voids[0]["ids"]["batchId"], batch_id.as_str());
    assert_eq!(voids[0]["details"]["reason"], reason);
    app.stop().await;
}

async fn refused_corrections_exit_1_with_one_line_and_nothing_changed(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    app.plan("max").await;
    let r = app.reseller().await;
    let dir = TempDir::new();
    let cli = admin(&app, &dir);
    let correct = |kind: &str, plan: &str, units: &str, reason: &str, reference: Option<&str>| {
        let mut args = vec![
            "admin",
            "--json",
            "quota",
            kind,
            "--client-id",
            r.client_id.as_str(),
            "--plan",
            plan,
            "--units",
            units,
            "--reason",
            reason,
        ];
        if let Some(reference) = reference {
            args.extend(["--reference", reference]);
        }
        cli.run(&args, None)
    };
    let first = correct("credit", "pro", "5", "PO 1", Some("po-1"));
    assert!(first.status.success());
    let state = || async {
        (
            app.balance(&r, "pro").await,
            app.balance(&r, "max").await,
            app.count_rows("SELECT COUNT(*) FROM ledger_entries").await,
            app.count_rows("SELECT COUNT(*) FROM audit_entries").await,
        )
    };
    let before = state().await;

    // The reference on another correction: other units, another plan, another kind.
    for (kind, plan, units) in [
        ("credit", "pro", "6"),
        ("credit", "max", "5"),
        ("adjust", "pro", "5"),
    ] {
        assert_refused(
            &correct(kind, plan, units, "PO 1", Some("po-1")),
            "reference",
        );
    }
    // A reason with control characters or past the bound.
    for kind in ["credit", "adjust"] {
        for bad in ["a\nb", "tab\there", &"y".repeat(501)] {
            assert_refused(&correct(kind, "pro", "1", bad, None), "reason");
        }
    }
    // Below zero.
    assert_refused(
        &correct("adjust", "pro", "-6", "too much", None),
        "insufficient quota",
    );
    assert_eq!(state().await, before, "nothing changed");
    // The same credit again is a replay, not a refusal.
    let replay = correct("credit", "pro", "5", "PO 1", Some("po-1"));
    assert!(replay.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&replay.stdout).unwrap()["replayed"],
        true
    );

    // Usage errors stay exit 2, a number out of its range as much as a malformed one.
    let out_of_range = |kind: &str, units: &str| {
        let mut args = vec!["admin", "quota", kind, "--client-id", r.client_id.as_str()];
        args.extend(["--plan", "pro", "--units", units, "--reason", "x"]);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let mut out_of_range_flags = vec![
        out_of_range("credit", "0"),
        out_of_range("credit", "1000000001"),
        out_of_range("adjust", "0"),
        out_of_range("adjust", "-1000000001"),
        out_of_range("adjust", "-9223372036854775808"),
    ];
    for (flag, value) in [
        ("--duration-days", "0"),
        ("--redemptions-per-code", "36501"),
        ("--code-validity-days", "0"),
    ] {
        let args = [
            "admin", "plan", "create", "--slug", "new", "--name", "New", flag, value,
        ];
        out_of_range_flags.push(args.map(str::to_owned).to_vec());
    }
    for limit in ["0", "501"] {
        let args = ["admin", "audit", "log", "--limit", limit];
        out_of_range_flags.push(args.map(str::to_owned).to_vec());
    }
    for args in &out_of_range_flags {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli.run(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("not in") || stderr.contains("between"),
            "{args:?}: {stderr}"
        );
    }
    let plans = cli.run(&["admin", "--json", "plan", "list"], None);
    assert!(!String::from_utf8_lossy(&plans.stdout).contains("\"new\""));
    for args in [
        // No command at all, and a key no request could carry.
        vec![],
        vec!["request", "show", "abc"],
        vec!["admin", "quota", "credit", "--client-id", "not-a-client"],
        vec![
            "admin",
            "quota",
            "adjust",
            "--client-id",
            r.client_id.as_str(),
            "--plan",
            "pro",
            "--units",
            "many",
            "--reason",
            "x",
        ],
    ] {
        let out = cli.run(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    assert_eq!(state().await, before);
    app.stop().await;
}
