//! HTTPS on the API listener (`--tls-cert`, `--tls-key`) and `--public-url`: HSTS and `Secure`
//! panel cookies exactly when browsers reach the server over HTTPS (docs/operations.md).

use std::process::{Command, Stdio};
use std::time::Duration;

use partner_billing::accounts;
use partner_billing::clock::Clock;
use partner_billing::domain::Password;
use partner_billing::store::Store;
use partner_billing_tests::process::{ServerProcess, binary};
use partner_billing_tests::{Db, TempDir, both_databases, fresh_database, write_private};

both_databases!(
    https_answers_with_hsts_and_plain_http_to_the_tls_port_fails,
    panel_cookies_are_secure_and_hsts_sent_only_for_an_https_public_url
);

/// A self-signed certificate for `localhost`, written as PEM files into `dir`; returns the
/// certificate's PEM and the paths.
fn certificate(dir: &TempDir) -> (String, String, String) {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let cert_pem = generated.cert.pem();
    let cert = dir.path.join("cert.pem");
    let key = dir.path.join("key.pem");
    std::fs::write(&cert, &cert_pem).unwrap();
    write_private(&key, generated.key_pair.serialize_pem().as_bytes());
    (
        cert_pem,
        cert.display().to_string(),
        key.display().to_string(),
    )
}

fn master_key(dir: &TempDir) -> String {
    let path = dir.path.join("master.key");
    write_private(&path, hex::encode(rand::random::<[u8; 32]>()).as_bytes());
    path.display().to_string()
}

async fn https_answers_with_hsts_and_plain_http_to_the_tls_port_fails(db: Db) {
    let (url, _home) = fresh_database(&db).await;
    let dir = TempDir::new();
    let (cert_pem, cert, key) = certificate(&dir);
    let key_file = master_key(&dir);
    let server = ServerProcess::start(
        &url,
        &dir.path,
        &[
            ("PARTNER_BILLING_TLS_CERT", &cert),
            ("PARTNER_BILLING_TLS_KEY", &key),
            ("PARTNER_BILLING_MASTER_KEY_FILE", &key_file),
        ],
    );
    let port = server.base_url.rsplit(':').next().expect("port").to_owned();
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let response = https
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect("an HTTPS answer from a certificate the client trusts");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    // Any answer has it, errors too.
    let missing = https
        .get(format!("https://localhost:{port}/no-such-page"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    // Plain HTTP to the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://localhost:{port}/healthz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(
        plain.is_err(),
        "plain HTTP was answered on the TLS port: {plain:?}"
    );
    // A client that does not trust the certificate is refused.
    let untrusting = reqwest::Client::new()
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await;
    assert!(untrusting.is_err(), "{untrusting:?}");
    assert!(
        server
            .wait_for_log("scheme=\"https\"", Duration::from_secs(5))
            .is_some(),
        "the server logs that it serves HTTPS"
    );
}

/// Signs in to the panel form of the server at `base_url`; returns the answer.
async fn sign_in(base_url: &str, client_id: &str, password: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{base_url}/panel/login"))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("client_id", client_id), ("password", password)])
        .send()
        .await
        .unwrap()
}

async fn panel_cookies_are_secure_and_hsts_sent_only_for_an_https_public_url(db: Db) {
    let (url, _home) = fresh_database(&db).await;
    let dir = TempDir::new();
    let key_file = master_key(&dir);
    let key_env = ("PARTNER_BILLING_MASTER_KEY_FILE", key_file.as_str());
    let plain = ServerProcess::start(&url, &dir.path, &[key_env]);
    let public = ServerProcess::start(
        &url,
        &dir.path,
        &[
            key_env,
            ("PARTNER_BILLING_PUBLIC_URL", "https://billing.example.com"),
        ],
    );
    let store = Store::connect(&url, Clock::system()).await.unwrap();
    let password = "a long enough password";
    let client_id = accounts::create_reseller(
        &store,
        "Acme Resale",
        Password::parse("password", password).unwrap(),
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap()
    .to_string();

    // Plain HTTP, no public URL: neither HSTS nor `Secure`, even when a client claims HTTPS.
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/panel/login", plain.base_url))
        .header("Sec-Fetch-Site", "same-origin")
        .header("X-Forwarded-Proto", "https")
        .form(&[("client_id", client_id.as_str()), ("password", password)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert!(
        response
            .headers()
            .get("strict-transport-security")
            .is_none()
    );
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("pb_session="), "{cookie}");
    assert!(!cookie.contains("Secure"), "{cookie}");

    // `--public-url https://…`: `Secure` and HSTS, on the panel and the API alike.
    let response = sign_in(&public.base_url, &client_id, password).await;
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("pb_session="), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    let health = reqwest::get(format!("{}/healthz", public.base_url))
        .await
        .unwrap();
    assert_eq!(
        health.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    store.close().await;
}

/// Runs the server with `env`, expecting it to refuse to start; returns its stderr.
fn refuses_to_start(dir: &TempDir, env: &[(&str, &str)]) -> String {
    let output = Command::new(binary("partner-billing-server"))
        .env_clear()
        .env(
            "PARTNER_BILLING_DATABASE_URL",
            format!("sqlite://{}", dir.path.join("billing.db").display()),
        )
        .env("PARTNER_BILLING_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .current_dir(&dir.path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run server");
    assert!(!output.status.success(), "the server started with {env:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn tls_flags_must_come_together_and_name_a_readable_pem_file() {
    let dir = TempDir::new();
    let (_, cert, key) = certificate(&dir);
    let stderr = refuses_to_start(&dir, &[("PARTNER_BILLING_TLS_CERT", &cert)]);
    assert!(stderr.contains("--tls-cert needs --tls-key"), "{stderr}");
    let stderr = refuses_to_start(&dir, &[("PARTNER_BILLING_TLS_KEY", &key)]);
    assert!(stderr.contains("--tls-key needs --tls-cert"), "{stderr}");

    let missing = dir.path.join("missing.pem").display().to_string();
    let stderr = refuses_to_start(
        &dir,
        &[
            ("PARTNER_BILLING_TLS_CERT", &cert),
            ("PARTNER_BILLING_TLS_KEY", &missing),
        ],
    );
    assert!(
        stderr.contains(&format!("cannot read TLS key file {missing}")),
        "{stderr}"
    );
    // A certificate where the key belongs: named, and no key material is quoted.
    let stderr = refuses_to_start(
        &dir,
        &[
            ("PARTNER_BILLING_TLS_CERT", &key),
            ("PARTNER_BILLING_TLS_KEY", &cert),
        ],
    );
    assert!(
        stderr.contains(&format!(
            "TLS certificate file {key} holds no PEM certificate"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("PRIVATE KEY"), "{stderr}");
    // Each refusal is one line.
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
