//! The product side of `partner-billing admin` through the built binary, on a fresh SQLite file:
//! operator tokens, promo redemption by support staff, and a login's licenses. The reseller,
//! plan and promo batch are set up with the core library directly.
//!
//! Over 450 lines on purpose: one scenario per operator task (tokens, redemption, entitlements and
//! revocation), each spelling out the commands it runs and the output contract it checks.

mod common;

use common::{TempDir, assert_success, text};

use std::path::Path;
use std::process::{Command, Output};

use partner_billing::clock::Clock;
use partner_billing::crypto::MasterKey;
use partner_billing::domain::{IdempotencyKey, Login, Password, PlanSlug, Secret};
use partner_billing::plans::{self, NewPlan};
use partner_billing::promo::{self, GeneratePromoBatch};
use partner_billing::store::Store;
use partner_billing::{accounts, keys, quota};
use serde_json::Value;

fn database_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("billing.db").display())
}

/// Runs `partner-billing admin --database-url … <args>` with no `PARTNER_BILLING_*` variable
/// from the environment.
fn admin(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_partner-billing"));
    command
        .arg("admin")
        .arg("--database-url")
        .arg(database_url(dir))
        .args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PARTNER_BILLING_") {
            command.env_remove(name);
        }
    }
    command.output().expect("run partner-billing")
}

/// Runs with `--json`, expects success and exactly one JSON object on stdout.
fn json(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = admin(dir, &all);
    assert_success(&out, args);
    let stdout = text(&out.stdout);
    let mut stream = serde_json::Deserializer::from_str(&stdout).into_iter::<Value>();
    let value = stream.next().expect("a JSON value").expect("valid JSON");
    assert!(
        stream.next().is_none(),
        "more than one JSON value: {stdout:?}"
    );
    assert!(value.is_object(), "not an object: {stdout:?}");
    value
}

/// A failure: exit status `code`, nothing on stdout, one `error: ` line on stderr holding
/// `expected` (the shared check, [`common::assert_one_line_error`], and the status).
fn assert_one_line_error(out: &Output, code: i32, expected: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout {:?} stderr {:?}",
        text(&out.stdout),
        text(&out.stderr)
    );
    common::assert_one_line_error(out, expected)
}

/// A plan `pro` (30 days, 2 redemptions per code), a reseller with quota, the login `alice`
/// registered, and a batch of two codes generated through the library with the master key in
/// `dir/partner-billing.key` (where the CLI looks by default). Returns the codes and the
/// reseller's client id.
fn set_up_batch(dir: &Path) -> (Vec<String>, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let key = MasterKey::load_or_create(&dir.join("partner-billing.key"), true).unwrap();
        let store = Store::connect(&database_url(dir), Clock::system())
            .await
            .unwrap()
            .with_master_key(key);
        let slug = PlanSlug::parse("plan", "pro").unwrap();
        plans::create_plan(
            &store,
            NewPlan::new(slug.clone(), "Pro", Some(30), Some(2), None).unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        plans::add_user(
            &store,
            &Login::parse("login", "alice").unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        let password = "correct horse battery";
        let client_id = accounts::create_reseller(
            &store,
            "Acme",
            Password::parse("password", password).unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        quota::credit(
            &store,
            &partner_billing::quota::Correction {
                client_id: &client_id,
                plan: &slug,
                units: 10,
                reason: "test",
                reference: None,
            },
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        let session = accounts::create_session(
            &store,
            client_id.as_str(),
            Password::parse("password", password).unwrap(),
            None,
            None,
        )
        .await
        .unwrap();
        let panel =
            accounts::authenticate_session(&store, &Secret::from_presented(session.session_token))
                .await
                .unwrap();
        let api_key = keys::create_api_key(
            &store,
            panel.account_id,
            Some("test"),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        let account = keys::authenticate_api_key(
            &store,
            &api_key.client_id,
            &Secret::from_presented(api_key.secret),
        )
        .await
        .unwrap();
        let batch = promo::generate_promo_batch(
            &store,
            &account,
            GeneratePromoBatch {
                plan: slug,
                count: 2,
                idempotency_key: IdempotencyKey::generate(),
            },
        )
        .await
        .unwrap();
        store.close().await;
        let codes = batch.value.codes.into_iter().map(|c| c.code).collect();
        (codes, client_id.to_string())
    })
}

#[test]
fn operator_tokens_are_shown_once_listed_without_secrets_and_revoked() {
    let dir = TempDir::new();
    let dir = dir.path.as_path();

    // Text: the token once on stdout, the warning on stderr.
    let out = admin(
        dir,
        &["operator-token", "create", "--name", "product-backend"],
    );
    assert_success(&out, &["operator-token create"]);
    let stdout = text(&out.stdout);
    let token = stdout
        .split_whitespace()
        .find(|word| word.starts_with("rso_"))
        .expect("the token on stdout")
        .to_owned();
    assert_eq!(token.len(), 4 + 43, "{token}");
    assert_eq!(stdout.matches(&token).count(), 1, "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("shown this once"), "{stderr:?}");
    assert!(!stderr.contains(&token), "{stderr:?}");

    // JSON: one object with name, token and createdUtc.
    let created = json(dir, &["operator-token", "create", "--name", "reporting"]);
    let second = created["token"].as_str().expect("token").to_owned();
    assert!(second.starts_with("rso_") && second.len() == 47, "{second}");
    assert_ne!(second, token);
    assert_eq!(created["name"], "reporting");
    assert!(created["createdUtc"].as_i64().unwrap() > 0);

    // Listing never shows a token.
    let out = admin(dir, &["operator-token", "list"]);
    assert_success(&out, &["operator-token list"]);
    let listed = text(&out.stdout);
    assert!(listed.contains("product-backend") && listed.contains("reporting"));
    assert!(!listed.contains("rso_"), "{listed}");
    let list = json(dir, &["operator-token", "list"]);
    assert!(!list.to_string().contains("rso_"), "{list}");
    let tokens = list["operatorTokens"].as_array().expect("operatorTokens");
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0]["name"], "product-backend");
    assert_eq!(tokens[0]["status"], "active");
    assert_eq!(tokens[0]["lastUsedUtc"], Value::Null);
    assert_eq!(tokens[0]["revokedUtc"], Value::Null);
    assert!(tokens[0]["createdUtc"].as_i64().is_some());

    // Revocation; again is fine; an unknown name is an error.
    let revoked = json(
        dir,
        &["operator-token", "revoke", "--name", "product-backend"],
    );
    assert_eq!(revoked["revoked"], true);
    assert_success(
        &admin(
            dir,
            &["operator-token", "revoke", "--name", "product-backend"],
        ),
        &["revoke again"],
    );
    assert_one_line_error(
        &admin(dir, &["operator-token", "revoke", "--name", "nobody"]),
        1,
        "no operator token named",
    );
    let list = json(dir, &["operator-token", "list"]);
    let tokens = list["operatorTokens"].as_array().unwrap();
    assert_eq!(tokens[0]["status"], "revoked");
    assert!(tokens[0]["revokedUtc"].as_i64().is_some());
    assert_eq!(tokens[1]["status"], "active");

    // Names stay unique after revocation.
    assert_one_line_error(
        &admin(
            dir,
            &["operator-token", "create", "--name", "product-backend"],
        ),
        1,
        "exists already",
    );
    // A bad name is refused: a refusal (exit 1), not a usage error.
    assert_one_line_error(
        &admin(dir, &["operator-token", "create", "--name", ""]),
        1,
        "name",
    );
    // The admin CLI never writes a master key.
    assert!(!dir.join("partner-billing.key").exists());
}

#[test]
fn support_staff_redeem_codes_and_list_licenses() {
    let dir = TempDir::new();
    let dir = dir.path.as_path();
    let (codes, client_id) = set_up_batch(dir);
    let code = codes[0].clone();

    // As typed by a user: lower case, spaces instead of hyphens. No key given: one is made.
    let typed = code.to_lowercase().replace('-', " ");
    let redeemed = json(
        dir,
        &["promo", "redeem", "--code", &typed, "--login", "alice"],
    );
    assert_eq!(redeemed["source"], "promo");
    assert_eq!(redeemed["planSlug"], "pro");
    assert_eq!(redeemed["login"], "alice");
    assert_eq!(redeemed["clientId"], client_id.as_str());
    assert_eq!(redeemed["replayed"], false);
    assert!(redeemed["expiresUtc"].as_i64().is_some());
    let license_id = redeemed["licenseId"].as_str().unwrap().to_owned();
    let key = redeemed["idempotencyKey"].as_str().unwrap().to_owned();
    assert!(key.len() >= 8, "{key}");
    assert!(!redeemed.to_string().contains(&code), "{redeemed}");

    // The same key and request: the same license, replayed.
    let again = json(
        dir,
        &[
            "promo",
            "redeem",
            "--code",
            &code,
            "--login",
            "alice",
            "--idempotency-key",
            &key,
        ],
    );
    assert_eq!(again["licenseId"], license_id.as_str());
    assert_eq!(again["replayed"], true);

    // Text output shows the key it used.
    plans_add_user(dir, "bob");
    let out = admin(dir, &["promo", "redeem", "--code", &code, "--login", "bob"]);
    assert_success(&out, &["promo redeem bob"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("idempotencyKey:"), "{stdout}");
    assert!(stdout.contains("promo"), "{stdout}");

    // The same login with a new key: already redeemed.
    let stderr = assert_one_line_error(
        &admin(
            dir,
            &["promo", "redeem", "--code", &code, "--login", "alice"],
        ),
        1,
        "Promo.AlreadyRedeemed",
    );
    assert!(!stderr.contains(&code), "{stderr}");

    // Unknown and malformed codes: the same answer, never echoing the input.
    let unknown = "ZZZZ-ZZZZ-ZZZZ-ZZZZ";
    let stderr = assert_one_line_error(
        &admin(
            dir,
            &["promo", "redeem", "--code", unknown, "--login", "alice"],
        ),
        1,
        "Promo.CodeNotFound",
    );
    assert!(!stderr.contains(unknown), "{stderr}");
    assert_one_line_error(
        &admin(
            dir,
            &[
                "promo",
                "redeem",
                "--code",
                "not a code",
                "--login",
                "alice",
            ],
        ),
        1,
        "Promo.CodeNotFound",
    );

    // An unregistered login.
    assert_one_line_error(
        &admin(
            dir,
            &["promo", "redeem", "--code", &codes[1], "--login", "mallory"],
        ),
        1,
        "Reseller.UnknownLogin",
    );

    // The licenses of alice: the redeemed one, with source promo.
    let listed = json(dir, &["user", "licenses", "--login", "alice"]);
    assert_eq!(listed["login"], "alice");
    let licenses = listed["licenses"].as_array().unwrap();
    assert_eq!(licenses.len(), 1, "{listed}");
    assert_eq!(licenses[0]["licenseId"], license_id.as_str());
    assert_eq!(licenses[0]["source"], "promo");
    assert_eq!(licenses[0]["planSlug"], "pro");
    assert_eq!(licenses[0]["clientId"], client_id.as_str());
    assert!(licenses[0]["batchId"].as_str().is_some());
    let out = admin(dir, &["user", "licenses", "--login", "alice"]);
    assert_success(&out, &["user licenses"]);
    let table = text(&out.stdout);
    assert!(
        table.contains(&license_id) && table.contains("promo"),
        "{table}"
    );
    assert_one_line_error(
        &admin(dir, &["user", "licenses", "--login", "mallory"]),
        1,
        "Reseller.UnknownLogin",
    );

    // A named key file that is missing: an error, and nothing is created.
    let missing = dir.join("elsewhere.key");
    let missing_arg = missing.display().to_string();
    assert_one_line_error(
        &admin(
            dir,
            &[
                "promo",
                "redeem",
                "--master-key-file",
                &missing_arg,
                "--code",
                &codes[1],
                "--login",
                "alice",
            ],
        ),
        1,
        "does not exist",
    );
    assert!(!missing.exists());
    // A named key file that exists is used.
    let out = admin(
        dir,
        &[
            "--master-key-file",
            &dir.join("partner-billing.key").display().to_string(),
            "promo",
            "redeem",
            "--code",
            &codes[1],
            "--login",
            "alice",
        ],
    );
    assert_success(&out, &["promo redeem with --master-key-file"]);
}

#[test]
fn redeem_never_creates_the_default_master_key() {
    let dir = TempDir::new();
    let dir = dir.path.as_path();
    let stderr = assert_one_line_error(
        &admin(
            dir,
            &[
                "promo",
                "redeem",
                "--code",
                "ABCD-EFGH-JKMN-PQRS",
                "--login",
                "alice",
            ],
        ),
        1,
        "does not exist",
    );
    assert!(stderr.contains("master key file"), "{stderr}");
    assert!(!dir.join("partner-billing.key").exists());
    // Loaded before the database is opened: nothing was created at all.
    assert!(!dir.join("billing.db").exists());
}

/// Registers a login through the binary.
fn plans_add_user(dir: &Path, login: &str) {
    let out = admin(dir, &["user", "add", "--login", login]);
    assert_success(&out, &["user add"]);
}

#[test]
fn operators_read_entitlements_and_revoke_licenses() {
    let dir = TempDir::new();
    let dir = dir.path.as_path();
    let (codes, _) = set_up_batch(dir);
    let redeemed = json(
        dir,
        &["promo", "redeem", "--code", &codes[0], "--login", "alice"],
    );
    let license_id = redeemed["licenseId"].as_str().unwrap().to_owned();

    let held = json(dir, &["user", "entitlements", "--login", "alice"]);
    assert_eq!(held["login"], "alice");
    let entries = held["entitlements"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{held}");
    assert_eq!(entries[0]["planSlug"], "pro");
    assert_eq!(entries[0]["activeNow"], true);
    assert_eq!(entries[0]["activeFromUtc"], redeemed["startsUtc"]);
    assert_eq!(entries[0]["activeUntilUtc"], redeemed["expiresUtc"]);
    let out = admin(dir, &["user", "entitlements", "--login", "alice"]);
    assert_success(&out, &["user entitlements"]);
    let table = text(&out.stdout);
    assert!(
        table.contains("ACTIVE_NOW") && table.contains("pro"),
        "{table}"
    );
    assert_one_line_error(
        &admin(dir, &["user", "entitlements", "--login", "mallory"]),
        1,
        "Reseller.UnknownLogin",
    );

    // A reason is required, and an unknown id is refused; nothing changes either way.
    for (args, code, expected) in [
        (
            vec![
                "license",
                "revoke",
                "--license-id",
                &license_id,
                "--reason",
                " ",
            ],
            1,
            "reason",
        ),
        (
            vec![
                "license",
                "revoke",
                "--license-id",
                "nope",
                "--reason",
                "typo",
            ],
            1,
            "License.NotFound",
        ),
    ] {
        assert_one_line_error(&admin(dir, &args), code, expected);
    }
    assert_eq!(
        json(dir, &["user", "entitlements", "--login", "alice"])["entitlements"],
        held["entitlements"]
    );

    let revoke = [
        "license",
        "revoke",
        "--license-id",
        &license_id,
        "--reason",
        "issued to the wrong login",
    ];
    let revoked = json(dir, &revoke);
    assert_eq!(revoked["licenseId"], license_id.as_str());
    assert!(revoked["revokedUtc"].as_i64().is_some());
    assert_eq!(revoked["startsUtc"], redeemed["startsUtc"]);
    // Again: the same license, unchanged.
    assert_eq!(json(dir, &revoke), revoked);
    let held = json(dir, &["user", "entitlements", "--login", "alice"]);
    assert_eq!(held["entitlements"], serde_json::json!([]));
    let out = admin(dir, &revoke);
    assert_success(&out, &["license revoke"]);
    assert!(
        text(&out.stdout).contains("revoked:"),
        "{}",
        text(&out.stdout)
    );
}
