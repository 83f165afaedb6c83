//! The panel in a real browser: Debian's Chromium driven through chromedriver (WebDriver), on
//! SQLite and PostgreSQL. Sign in, create a key, read its secret once, use it through the SDK,
//! see "Last used", revoke it and see the SDK get 401; a forged CSRF token refused; sign out.
//!
//! Fails loudly when `chromium` or `chromedriver` is missing (`.ci/run` installs them). The
//! ignored `panel_screenshots` writes `docs/panel/*.png`:
//! `cargo test -p partner-billing-tests --test e2e panel_screenshots -- --ignored`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use partner_billing_client::{Credentials, Error, PartnerClient, RetryPolicy};
use partner_billing_tests::{Db, TempDir, TestApp, both_databases};
use serde_json::json;

both_databases!(panel_in_a_real_browser);

/// chromedriver on a free port with a fresh Chromium profile; both end on drop.
struct Browser {
    client: Client,
    driver: Child,
    _profile: TempDir,
}

impl Browser {
    async fn start() -> Self {
        // Two rustls crypto providers are linked (fantoccini's and reqwest's): choose one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        for tool in ["chromium", "chromedriver"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                found,
                "{tool} is not installed: `apt-get install -y chromium chromium-driver` (the panel's browser test needs it)"
            );
        }
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = TempDir::new();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path.display()),
                ]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        // chromedriver needs a moment to listen: retry the connection, bounded.
        let mut last_error = None;
        for _ in 0..100 {
            let mut builder = ClientBuilder::rustls().expect("rustls connector");
            builder.capabilities(capabilities.clone());
            match builder.connect(&url).await {
                Ok(client) => {
                    return Self {
                        client,
                        driver,
                        _profile: profile,
                    };
                }
                Err(err) => last_error = Some(err.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cannot open a chromedriver session: {last_error:?}");
    }

    async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    /// Clicks a link or a submit button and waits, bounded, for the page it leads to: the old
    /// document goes stale and the new one has loaded. (A click returns as soon as the browser
    /// took it, before a form's POST and its redirect have finished.)
    async fn click(&self, css: &str) {
        let old_page = self.client.find(Locator::Css("html")).await.unwrap();
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while old_page.tag_name().await.is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "clicking {css} led to no new page"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        loop {
            let state = self
                .client
                .execute("return document.readyState", vec![])
                .await
                .unwrap();
            if state == "complete" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the page after {css} never finished loading"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn source(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// How many elements `css` finds.
    async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// Reloads the page (a form's page: the browser sends again what loaded it) and checks it
    /// is `path` again, without `secret` and with as many `rows` as before.
    async fn reload_shows_no_secret(&self, path: &str, secret: &str, rows: &str) {
        let before = self.count(rows).await;
        self.client.refresh().await.unwrap();
        assert_eq!(self.path().await, path);
        assert!(
            !self.source().await.contains(secret),
            "{path}: the secret again"
        );
        assert_eq!(self.count("code#new-secret").await, 0, "{path}");
        assert_eq!(
            self.count(rows).await,
            before,
            "{path}: the form sent again"
        );
    }

    /// From the page at `path` that shows `secret`, to another page and "Back": `path` again,
    /// without the secret, in the page or in `code#new-secret`.
    async fn back_after_another_page_shows_no(&self, path: &str, secret: &str) {
        self.click("a[href='/panel/ledger']").await;
        self.client.back().await.unwrap();
        assert_eq!(self.path().await, path);
        assert!(
            !self.source().await.contains(secret),
            "{path}: the back button showed the secret again"
        );
        assert_eq!(self.count("code#new-secret").await, 0, "{path}");
    }

    async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    async fn stop(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

async fn sign_in(browser: &Browser, app: &TestApp, client_id: &str, password: &str) {
    browser.client.goto(&app.url("/panel")).await.unwrap();
    assert_eq!(
        browser.path().await,
        "/panel/login",
        "signed out: to the sign-in page"
    );
    browser.fill("#client_id", client_id).await;
    browser.fill("#password", password).await;
    browser.click("button[type=submit]").await;
}

async fn panel_in_a_real_browser(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", 5).await;
    app.plan("team-annual").await;
    app.credit(&r, "team-annual", 100_000).await;
    let browser = Browser::start().await;

    // A wrong password: the generic answer, the id kept, the password not.
    sign_in(&browser, &app, &r.client_id, "not the password").await;
    assert!(
        browser
            .source()
            .await
            .contains("Client ID or password is incorrect.")
    );
    let kept = browser
        .client
        .find(Locator::Css("#client_id"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some(r.client_id.as_str()));

    sign_in(&browser, &app, &r.client_id, &r.password).await;
    assert_eq!(browser.path().await, "/panel");
    assert_eq!(browser.text("#client-id").await, r.client_id);
    assert!(browser.text("table#balances").await.contains("pro"));
    // At 375 px the balances (three short columns) fit without scrolling sideways.
    browser.client.set_window_size(375, 900).await.unwrap();
    let overflow = browser
        .client
        .execute(
            "const box = document.querySelector('table#balances').parentElement; \
             return [box.scrollWidth - box.clientWidth, document.documentElement.clientWidth];",
            vec![],
        )
        .await
        .unwrap();
    assert!(overflow[1].as_i64().unwrap() <= 375, "{overflow}");
    assert_eq!(overflow[0], 0, "the balances scroll at 375 px: {overflow}");
    browser.client.set_window_size(1280, 900).await.unwrap();

    // Create a key: the secret is shown once.
    browser.click("a[href='/panel/api-keys']").await;
    browser.fill("#name", "browser key").await;
    browser
        .click("form[action='/panel/api-keys'] button[type=submit]")
        .await;
    let secret = browser.text("code#new-secret").await;
    assert!(secret.starts_with("rss_"), "{secret}");
    let key_id = browser.text("#new-key-id").await;
    // A reload shows it no more, and creates no other key (the form is not sent again).
    browser
        .reload_shows_no_secret("/panel/api-keys", &secret, "table#api-keys tbody tr")
        .await;
    // Nor does the back button, nor following the link again.
    browser.client.back().await.unwrap();
    assert!(!browser.source().await.contains(&secret));
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();
    browser.click("a[href='/panel/api-keys']").await;
    assert!(!browser.source().await.contains(&secret));
    assert!(
        browser
            .client
            .find(Locator::Css("code#new-secret"))
            .await
            .is_err()
    );

    // Nor the back button after another page: Chromium keeps a `no-store` page in its
    // back/forward cache unless a cookie changes meanwhile, which the next page sees to.
    browser.fill("#name", "second key").await;
    browser
        .click("form[action='/panel/api-keys'] button[type=submit]")
        .await;
    let second = browser.text("code#new-secret").await;
    assert!(second.starts_with("rss_"), "{second}");
    browser
        .back_after_another_page_shows_no("/panel/api-keys", &second)
        .await;
    // The same for a webhook endpoint's signing secret.
    browser
        .client
        .goto(&app.url("/panel/webhooks"))
        .await
        .unwrap();
    browser.fill("#url", "http://127.0.0.1:9/hook").await;
    browser
        .client
        .find(Locator::Css("input[id='event-webhook.test']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .click("form[action='/panel/webhooks'] button[type=submit]")
        .await;
    let signing = browser.text("code#new-secret").await;
    assert!(signing.starts_with("whsec_"), "{signing}");
    browser
        .back_after_another_page_shows_no("/panel/webhooks", &signing)
        .await;
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();

    // Use it through the SDK; "Last used" fills in.
    let sdk = PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &secret))
        .unwrap()
        .with_retry_policy(RetryPolicy::none());
    assert_eq!(
        sdk.balances().await.unwrap().balances[0].remaining_balance,
        5
    );
    browser.client.refresh().await.unwrap();
    let row = format!("tr[data-key-id='{key_id}']");
    let last_used = browser.text(&format!("{row} td:nth-child(5)")).await;
    assert!(last_used.ends_with(" UTC"), "Last used: {last_used:?}");

    // A forged CSRF token: refused, nothing changed.
    browser
        .client
        .execute(
            "document.querySelectorAll('input[name=csrf]').forEach(e => e.value = 'forged');",
            vec![],
        )
        .await
        .unwrap();
    browser.click(&format!("{row} button")).await;
    assert!(browser.source().await.contains("Request refused"));
    assert!(sdk.balances().await.is_ok(), "the key still works");

    // Revoke for real: the SDK gets 401.
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();
    browser.click(&format!("{row} button")).await;
    assert_eq!(browser.path().await, "/panel/api-keys");
    assert!(browser.text(&row).await.contains("revoked"));
    assert!(browser.text("#key-notice").await.contains("revoked"));
    assert!(matches!(sdk.balances().await, Err(Error::Unauthorized)));

    // Sign out: back to the sign-in page, and the panel stays closed.
    browser.click("form.signout button").await;
    assert_eq!(browser.path().await, "/panel/login");
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();
    assert_eq!(browser.path().await, "/panel/login");
    browser.stop().await;
}

/// Screenshots of every page into `docs/panel/` (run by hand; see the module comment).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "writes docs/panel/*.png; run by hand"]
async fn panel_screenshots() {
    let app = TestApp::spawn(&Db::Sqlite).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(365)).await;
    app.plan_with_days("starter", Some(30)).await;
    app.user("alice@example.com").await;
    app.credit(&r, "pro", 120).await;
    app.credit(&r, "starter", 40).await;
    let sdk = PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap();
    sdk.issue_license("pro", "alice@example.com", None)
        .await
        .unwrap();
    sdk.generate_promo_batch("starter", 25, None).await.unwrap();
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/panel");
    std::fs::create_dir_all(&out).unwrap();
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/panel/login")).await.unwrap();
    let shot = |name: &'static str| {
        let client = browser.client.clone();
        let path = out.join(name);
        async move {
            std::fs::write(&path, client.screenshot().await.unwrap()).unwrap();
        }
    };
    shot("login.png").await;
    sign_in(&browser, &app, &r.client_id, &r.password).await;
    shot("overview.png").await;
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();
    browser.fill("#name", "production backend").await;
    browser
        .click("form[action='/panel/api-keys'] button[type=submit]")
        .await;
    shot("api-keys-new-secret.png").await;
    // Webhooks: add an endpoint (its secret shown once), send a test event, see it delivered.
    let receiver = partner_billing_tests::receiver::Receiver::start().await;
    browser
        .client
        .goto(&app.url("/panel/webhooks"))
        .await
        .unwrap();
    shot("webhooks-empty.png").await;
    browser.fill("#url", &receiver.url).await;
    browser.fill("#description", "billing alerts").await;
    for event_type in ["balance.low", "license.issued", "webhook.test"] {
        browser
            .client
            .find(Locator::Css(&format!("input[value='{event_type}']")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    browser
        .click("form[action='/panel/webhooks'] button[type=submit]")
        .await;
    shot("webhooks-new-secret.png").await;
    let signing_secret = browser.text("code#new-secret").await;
    assert!(signing_secret.starts_with("whsec_"), "{signing_secret}");
    // A reload shows it no more and adds no second endpoint.
    browser
        .reload_shows_no_secret("/panel/webhooks", &signing_secret, "form[action$='/test']")
        .await;
    assert_eq!(
        browser.count("form[action$='/test']").await,
        1,
        "one endpoint"
    );
    browser
        .click("form[action$='/test'] button[type=submit]")
        .await;
    receiver.wait_for(1).await;
    partner_billing_tests::receiver::eventually("the delivery on the webhooks page", || async {
        browser
            .client
            .goto(&app.url("/panel/webhooks"))
            .await
            .unwrap();
        let html = browser.client.source().await.unwrap();
        html.contains("delivered (HTTP").then_some(())
    })
    .await;
    shot("webhooks.png").await;
    // A low-balance alert on settings, then shown on the overview.
    browser
        .client
        .goto(&app.url("/panel/settings"))
        .await
        .unwrap();
    browser.fill("#alert-pro", "25").await;
    browser
        .click("form[action='/panel/settings/alerts'] button[type=submit]")
        .await;
    browser.client.goto(&app.url("/panel")).await.unwrap();
    shot("overview.png").await;
    for (path, name) in [
        ("/panel/api-keys", "api-keys.png"),
        ("/panel/ledger", "ledger.png"),
        ("/panel/promo-batches", "promo-batches.png"),
        ("/panel/licenses", "licenses.png"),
        ("/panel/settings", "settings.png"),
    ] {
        browser.client.goto(&app.url(path)).await.unwrap();
        shot(name).await;
    }
    browser.client.set_window_size(375, 800).await.unwrap();
    browser
        .client
        .goto(&app.url("/panel/api-keys"))
        .await
        .unwrap();
    shot("api-keys-375px.png").await;
    browser.stop().await;
}
