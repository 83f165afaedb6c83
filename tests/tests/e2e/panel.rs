//! The HTML reseller panel (docs/design.md) over plain HTTP: sign-in, the key life cycle with the
//! secret shown once, CSRF and cross-site refusals, the security headers, every page, sign-out.
//! (`panel_browser` drives the same panel through Chromium.)
//!
//! Over 450 lines on purpose: one scenario per page and rule of the panel, each spelling out its
//! requests and the HTML it checks.

use partner_billing::accounts::{self, Standing};
use partner_billing::domain::ClientId;
use partner_billing_client::{Credentials, Error, PartnerClient, RetryPolicy};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};

both_databases!(
    sign_in_failures_all_read_the_same,
    key_life_cycle_with_the_secret_shown_once,
    forged_and_cross_site_forms_change_nothing,
    every_page_renders_with_its_table_or_empty_state,
    sign_out_ends_the_session_at_once,
    settings_password_change_ends_other_sessions,
    roll_shows_the_new_secret_once_and_the_old_key_expires,
    a_new_secret_opens_on_its_page_in_its_session_within_its_minute,
    the_overview_shows_units_spent_per_day_and_product,
    a_revoke_or_void_leads_back_to_the_page_it_came_from
);

/// A client that does not follow redirects, so that 303s can be checked.
pub(crate) fn browserless() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

async fn read(response: reqwest::Response) -> Page {
    Page {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

pub(crate) async fn get(app: &TestApp, path: &str, cookie: &str) -> Page {
    let response = browserless()
        .get(app.url(path))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    read(response).await
}

pub(crate) async fn post(app: &TestApp, path: &str, cookie: &str, form: &[(&str, &str)]) -> Page {
    let response = browserless()
        .post(app.url(path))
        .header("Cookie", cookie)
        .header("Sec-Fetch-Site", "same-origin")
        .form(form)
        .send()
        .await
        .unwrap();
    read(response).await
}

/// The page a form's `303` leads to, fetched as a browser would: with the session and the
/// `pb_flash` cookie the answer set (the message the page shows once). The page drops that
/// cookie in its answer; fetched again without it, it shows the message no more.
pub(crate) async fn follow(app: &TestApp, answer: &Page, cookie: &str) -> Page {
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.headers[LOCATION].to_str().unwrap();
    let flash = set_flash_cookie(answer);
    let page = get(app, location, &format!("{cookie}; {flash}")).await;
    assert!(drops_flash(&page), "the page drops the flash cookie");
    page
}

/// The `pb_flash` cookie an answer sets (`name=value`), its attributes checked.
fn set_flash_cookie(answer: &Page) -> String {
    let flash = answer
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("pb_flash="))
        .expect("a flash cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/panel", "Max-Age=60"] {
        assert!(flash.contains(attribute), "{flash}");
    }
    flash.split(';').next().unwrap().to_owned()
}

/// Whether a page's answer drops the `pb_flash` cookie.
fn drops_flash(page: &Page) -> bool {
    page.headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.starts_with("pb_flash=;") && v.contains("Max-Age=0"))
}

/// Signs in through the form; returns the `Cookie` header value.
pub(crate) async fn sign_in(app: &TestApp, client_id: &str, password: &str) -> String {
    let page = post(
        app,
        "/panel/login",
        "",
        &[("client_id", client_id), ("password", password)],
    )
    .await;
    assert_eq!(page.status, 303, "sign-in: {}", page.body);
    assert_eq!(page.headers[LOCATION], "/panel");
    let cookie = page.headers[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/panel"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    cookie.split(';').next().unwrap().to_owned()
}

/// The column headers of `table#id`, in order.
fn column_headers(page: &Page, id: &str) -> Vec<String> {
    let head = between(&page.body, &format!("<table id=\"{id}\">"), "</thead>").expect(id);
    head.split("<th scope=\"col\"")
        .skip(1)
        .map(|cell| {
            let text = cell.split_once('>').map_or("", |(_, rest)| rest);
            text.split("</th>").next().unwrap_or_default().to_owned()
        })
        .collect()
}

pub(crate) fn between<'a>(body: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = body.find(start)? + start.len();
    let len = body[from..].find(end)?;
    Some(&body[from..from + len])
}

pub(crate) fn csrf(page: &Page) -> String {
    between(&page.body, "name=\"csrf\" value=\"", "\"")
        .expect("a CSRF field")
        .to_owned()
}

pub(crate) fn assert_security_headers(page: &Page) {
    assert_eq!(
        page.headers["content-security-policy"],
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    );
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    assert_eq!(page.headers["referrer-policy"], "no-referrer");
    assert_eq!(page.headers["cache-control"], "no-store");
    assert!(
        !page
            .headers
            .keys()
            .any(|k| k.as_str().starts_with("access-control-"))
    );
}

fn sdk(app: &TestApp, client_id: &str, secret: &str) -> PartnerClient {
    PartnerClient::new(&app.base_url, Credentials::new(client_id, secret))
        .unwrap()
        .with_retry_policy(RetryPolicy::none())
}

async fn sign_in_failures_all_read_the_same(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let suspended = app.reseller().await;
    let id = ClientId::parse("clientId", &suspended.client_id).unwrap();
    accounts::set_standing(
        &app.store,
        &id,
        Standing::Suspended,
        &partner_billing::audit::Origin::cli(),
    )
    .await
    .unwrap();
    let attempts = [
        (r.client_id.as_str(), "wrong password here"),
        ("rsc_000000000000000000000000", r.password.as_str()),
        (suspended.client_id.as_str(), suspended.password.as_str()),
    ];
    let mut bodies = Vec::new();
    for (client_id, password) in attempts {
        let page = post(
            &app,
            "/panel/login",
            "",
            &[("client_id", client_id), ("password", password)],
        )
        .await;
        assert_eq!(page.status, 401, "{client_id}");
        assert!(page.headers.get(SET_COOKIE).is_none());
        assert!(
            page.body.contains("Client ID or password is incorrect."),
            "{}",
            page.body
        );
        assert!(
            !page.body.contains(password),
            "the password is never echoed"
        );
        assert!(
            page.body.contains(&format!("value=\"{client_id}\"")),
            "the id is kept"
        );
        assert_security_headers(&page);
        bodies.push(page.body.replace(client_id, "ID"));
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "one answer for every cause"
    );
    // The login page itself has labelled inputs and the button.
    let page = get(&app, "/panel/login", "").await;
    assert_eq!(page.status, 200);
    for text in [
        "<label for=\"client_id\">Client ID</label>",
        "<label for=\"password\">Password</label>",
        ">Sign in</button>",
    ] {
        assert!(page.body.contains(text), "{text}");
    }
}

async fn key_life_cycle_with_the_secret_shown_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", 7).await;
    // No cookie: to the sign-in page. A JSON-API bearer token or an API key opens nothing.
    let token = app.session(&r.client_id, &r.password).await;
    for authorization in [
        format!("Bearer {token}"),
        format!(
            "Basic {}",
            base64_of(&format!("{}:{}", r.client_id, r.secret))
        ),
    ] {
        let response = browserless()
            .get(app.url("/panel"))
            .header("Authorization", authorization)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303);
        assert_eq!(response.headers()[LOCATION], "/panel/login");
    }

    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let overview = get(&app, "/panel", &cookie).await;
    assert_eq!(overview.status, 200);
    assert_security_headers(&overview);
    assert!(overview.body.contains(&r.client_id));
    assert!(overview.body.contains("Acme Resale"));
    assert!(overview.body.contains("<table id=\"balances\">"));
    assert!(overview.body.contains("<td class=\"num\">7</td>"));

    let keys = get(&app, "/panel/api-keys", &cookie).await;
    assert!(keys.body.contains("<table id=\"api-keys\">"));
    for header in [
        "Name",
        "Key ID",
        "Status",
        "Created",
        "Last used",
        "Expires",
    ] {
        assert!(
            keys.body
                .contains(&format!("<th scope=\"col\">{header}</th>")),
            "{header}"
        );
    }
    let created = post(
        &app,
        "/panel/api-keys",
        &cookie,
        &[("csrf", &csrf(&keys)), ("name", "web shop")],
    )
    .await;
    // Post/Redirect/Get: the page after the form shows the secret.
    assert_security_headers(&created);
    let created = follow(&app, &created, &cookie).await;
    assert_eq!(created.status, 200, "{}", created.body);
    let secret = between(&created.body, "<code id=\"new-secret\">", "</code>")
        .expect("the secret, once")
        .to_owned();
    assert!(secret.starts_with("rss_"));
    assert!(created.body.contains("will not be shown again"));
    assert_eq!(
        between(&created.body, "<code id=\"new-client-id\">", "</code>"),
        Some(r.client_id.as_str()),
        "the client id beside the secret"
    );
    let key_id = between(&created.body, "<code id=\"new-key-id\">", "</code>")
        .unwrap()
        .to_owned();
    // A reload (GET) never shows it again.
    let again = get(&app, "/panel/api-keys", &cookie).await;
    assert!(!again.body.contains(&secret));
    assert!(!again.body.contains("new-secret"));
    let row = between(&again.body, &format!("data-key-id=\"{key_id}\""), "</tr>").unwrap();
    assert!(row.contains("web shop") && row.contains("never"), "{row}");

    // The secret works through the SDK, and "Last used" fills in.
    let client = sdk(&app, &r.client_id, &secret);
    assert_eq!(
        client.balances().await.unwrap().balances[0].remaining_balance,
        7
    );
    let used = get(&app, "/panel/api-keys", &cookie).await;
    let row = between(&used.body, &format!("data-key-id=\"{key_id}\""), "</tr>").unwrap();
    assert_eq!(
        row.matches("<time datetime=").count(),
        2,
        "Created and Last used: {row}"
    );
    assert!(row.contains(" UTC</time>"), "{row}");

    // Revoke: the SDK gets 401 from the next request on.
    let revoked = post(
        &app,
        &format!("/panel/api-keys/{key_id}/revoke"),
        &cookie,
        &[("csrf", &csrf(&used))],
    )
    .await;
    assert_eq!(revoked.status, 303);
    assert!(matches!(client.balances().await, Err(Error::Unauthorized)));
    let after = follow(&app, &revoked, &cookie).await;
    let notice = between(&after.body, "id=\"key-notice\">", "</p>").expect("a notice");
    assert!(
        notice.contains(&format!("Key {key_id} revoked")),
        "{notice}"
    );
    let row = between(&after.body, &format!("data-key-id=\"{key_id}\""), "</tr>").unwrap();
    assert!(row.contains("revoked") && !row.contains("Revoke"), "{row}");
    assert!(
        !row.contains("never"),
        "a revoked key has no expiry to show: {row}"
    );
    let reload = get(&app, "/panel/api-keys", &cookie).await;
    assert!(!reload.body.contains("key-notice"), "said once");
    // The other key is untouched.
    assert!(sdk(&app, &r.client_id, &r.secret).balances().await.is_ok());
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn forged_and_cross_site_forms_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let keys = get(&app, "/panel/api-keys", &cookie).await;
    let token = csrf(&keys);
    let revoke = format!("/panel/api-keys/{}/revoke", r.api_key_id);
    // (what, form fields, extra headers)
    type Refusal<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<(&'a str, String)>);
    let refusals: Vec<Refusal> = vec![
        (
            "no token",
            vec![],
            vec![("Sec-Fetch-Site", "same-origin".into())],
        ),
        ("wrong token", vec![("csrf", "0".repeat(64).leak())], vec![]),
        (
            "cross-site",
            vec![("csrf", token.as_str())],
            vec![("Sec-Fetch-Site", "cross-site".into())],
        ),
        (
            "same-site",
            vec![("csrf", token.as_str())],
            vec![("Sec-Fetch-Site", "same-site".into())],
        ),
        (
            "foreign origin",
            vec![("csrf", token.as_str())],
            vec![("Origin", "https://evil.example".into())],
        ),
        (
            "null origin alone",
            vec![("csrf", token.as_str())],
            vec![("Origin", "null".into())],
        ),
        // A request the user made directly (a typed address): never a form, which a page posts.
        (
            "no site",
            vec![("csrf", token.as_str())],
            vec![("Sec-Fetch-Site", "none".into())],
        ),
    ];
    for (what, form, headers) in refusals {
        for path in [revoke.as_str(), "/panel/api-keys", "/panel/logout"] {
            let mut request = browserless()
                .post(app.url(path))
                .header("Cookie", &cookie)
                .form(&form);
            for (name, value) in &headers {
                request = request.header(*name, value);
            }
            let page = read(request.send().await.unwrap()).await;
            assert_eq!(page.status, 403, "{what} on {path}");
            assert_security_headers(&page);
            // A form of this session without its token: the page keeps "Sign out".
            if what == "no token" || what == "wrong token" {
                assert!(
                    page.body.contains("action=\"/panel/logout\""),
                    "{what} on {path}: {}",
                    page.body
                );
            }
        }
    }
    // The sign-in form too: from another site, or not from a page at all.
    for site in ["cross-site", "same-site", "none"] {
        let page = read(
            browserless()
                .post(app.url("/panel/login"))
                .header("Sec-Fetch-Site", site)
                .form(&[
                    ("client_id", r.client_id.as_str()),
                    ("password", r.password.as_str()),
                ])
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(page.status, 403, "sign-in with Sec-Fetch-Site: {site}");
        assert!(
            !page.headers.contains_key(SET_COOKIE),
            "no session for {site}"
        );
    }
    // Nothing changed: one active key, still working, and the session still open.
    let list = get(&app, "/panel/api-keys", &cookie).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body.matches("data-key-id=").count(), 1);
    assert!(sdk(&app, &r.client_id, &r.secret).balances().await.is_ok());
    // Chromium's same-origin POST under no-referrer: `Origin: null` with
    // `Sec-Fetch-Site: same-origin` is accepted.
    let page = read(
        browserless()
            .post(app.url(&revoke))
            .header("Cookie", &cookie)
            .header("Origin", "null")
            .header("Sec-Fetch-Site", "same-origin")
            .form(&[("csrf", token.as_str())])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page.status, 303);
    assert!(matches!(
        sdk(&app, &r.client_id, &r.secret).balances().await,
        Err(Error::Unauthorized)
    ));
}

async fn every_page_renders_with_its_table_or_empty_state(db: Db) {
    let app = TestApp::spawn(&db).await;
    let fresh = app.reseller().await;
    let cookie = sign_in(&app, &fresh.client_id, &fresh.password).await;
    // An empty list says so, and its table is still there with its
    // columns and no rows: a page has the same shape whatever it holds.
    for (path, empty, tables) in [
        ("/panel", "No balances yet", &["balances", "usage"][..]),
        ("/panel", "Nothing spent in the last 30 days", &["usage"]),
        ("/panel/ledger", "No ledger entries", &["ledger"]),
        (
            "/panel/promo-batches",
            "No promo batches yet",
            &["promo-batches"],
        ),
        ("/panel/licenses", "No licenses yet", &["licenses"]),
        (
            "/panel/webhooks",
            "No webhook endpoints yet",
            &["webhook-endpoints", "webhook-deliveries"],
        ),
    ] {
        let page = get(&app, path, &cookie).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(page.body.contains(empty), "{path}");
        for table in tables {
            assert!(!column_headers(&page, table).is_empty(), "{path} {table}");
            let body = between(&page.body, &format!("<table id=\"{table}\">"), "</table>")
                .expect(table)
                .split("<tbody>")
                .nth(1)
                .expect("a tbody");
            assert!(!body.contains("<tr"), "{path} {table}: no rows, got {body}");
        }
        assert!(page.body.contains(">Sign out</button>"), "{path}");
        assert_security_headers(&page);
    }
    let settings = get(&app, "/panel/settings", &cookie).await;
    for text in [
        "Current password",
        "New password",
        ">Change password</button>",
    ] {
        assert!(settings.body.contains(text), "{text}");
    }

    let r: Reseller = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 10).await;
    let client = sdk(&app, &r.client_id, &r.secret);
    client
        .issue_license("pro", "alice", Some("panel-license-1"))
        .await
        .unwrap();
    let batch = client
        .generate_promo_batch("pro", 3, Some("panel-batch-1"))
        .await
        .unwrap()
        .value;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;

    let ledger = get(&app, "/panel/ledger?product=pro", &cookie).await;
    assert!(ledger.body.contains("<table id=\"ledger\">"));
    assert_eq!(
        ledger.body.matches("<tr>").count(),
        1 + 3,
        "header + 3 entries"
    );
    assert!(ledger.body.contains("Download CSV"));
    let csv = get(&app, "/panel/ledger.csv", &cookie).await;
    assert_eq!(csv.status, 200);
    assert!(
        csv.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let lines: Vec<&str> = csv.body.lines().collect();
    assert_eq!(
        lines[0],
        "created_utc,product_slug,kind,units,balance_after,reference"
    );
    assert_eq!(lines.len(), 4, "{}", csv.body);
    assert!(
        lines[1].contains(",pro,promo_batch,-3,6,"),
        "newest first: {}",
        lines[1]
    );

    let batches = get(&app, "/panel/promo-batches", &cookie).await;
    assert!(batches.body.contains("<table id=\"promo-batches\">"));
    assert!(batches.body.contains(&batch.batch_id));
    for code in &batch.codes {
        assert!(!batches.body.contains(&code.code), "never a code");
        assert!(!csv.body.contains(&code.code), "never a code");
    }

    // The contract's columns, and "Void" a button that asks first.
    assert_eq!(
        column_headers(&batches, "promo-batches"),
        [
            "Batch",
            "Product",
            "Codes",
            "Redeemed",
            "Created",
            "Recoverable until",
            "Voided"
        ]
    );
    let void_form = format!(
        "<form class=\"inline\" method=\"get\" action=\"/panel/promo-batches/{}/void\">",
        batch.batch_id
    );
    let void_button = between(&batches.body, &void_form, "</form>").expect("a Void form");
    assert!(void_button.contains(">Void</button>"), "{void_button}");
    let confirm = get(
        &app,
        &format!("/panel/promo-batches/{}/void?", batch.batch_id),
        &cookie,
    )
    .await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.body.contains("Void promo batch?"),
        "{}",
        confirm.body
    );
    // The id as typed in capitals: the notice names the batch as the list shows it.
    let voided = post(
        &app,
        &format!(
            "/panel/promo-batches/{}/void",
            batch.batch_id.to_uppercase()
        ),
        &cookie,
        &[("csrf", &csrf(&confirm))],
    )
    .await;
    assert_eq!(voided.headers[LOCATION], "/panel/promo-batches");
    let after = follow(&app, &voided, &cookie).await;
    let notice = between(&after.body, "id=\"batch-notice\">", "</p>").expect("a notice");
    assert!(
        notice.contains(&format!("Batch {} voided", batch.batch_id)),
        "{notice}"
    );
    let row = between(
        &after.body,
        &format!("id=\"batch-{}\"", batch.batch_id),
        "</tr>",
    )
    .unwrap();
    assert!(
        row.contains("<time") && !row.contains(">Void</button>"),
        "{row}"
    );
    let reload = get(&app, "/panel/promo-batches", &cookie).await;
    assert!(!reload.body.contains("batch-notice"), "said once");

    let licenses = get(&app, "/panel/licenses?login=alice", &cookie).await;
    assert!(licenses.body.contains("<table id=\"licenses\">"));
    assert_eq!(
        column_headers(&licenses, "licenses"),
        [
            "License", "Login", "Product", "Created", "Starts", "Expires", "Revoked"
        ]
    );
    // Every page links the panel's icon, which is served (no request for `/favicon.ico`).
    let login = get(&app, "/panel/login", "").await;
    for page in [&batches, &licenses, &login] {
        assert!(
            page.body
                .contains("<link rel=\"icon\" href=\"/panel/assets/favicon.svg\""),
            "{}",
            page.body
        );
    }
    // A path the panel does not have: the panel's own page (and icon), not plain text.
    let missing = get(&app, "/panel/no-such-page", &cookie).await;
    assert_eq!(missing.status, 404);
    assert_security_headers(&missing);
    assert!(
        missing.body.contains("Page not found")
            && missing
                .body
                .contains("<link rel=\"icon\" href=\"/panel/assets/favicon.svg\""),
        "{}",
        missing.body
    );
    // Signed in, it keeps the "Sign out" button every page has; signed out, it has none.
    assert!(
        missing.body.contains(">Sign out</button>"),
        "{}",
        missing.body
    );
    let missing_signed_out = get(&app, "/panel/no-such-page", "").await;
    assert_eq!(missing_signed_out.status, 404);
    assert!(missing_signed_out.body.contains("Page not found"));
    assert!(!missing_signed_out.body.contains("Sign out"));
    // A form's address visited as a page (typed into the address bar after a refused form):
    // 405, and a page of the panel's own too.
    let form_address = get(&app, "/panel/settings/password", &cookie).await;
    assert_eq!(form_address.status, 405);
    assert_security_headers(&form_address);
    assert!(
        form_address.body.contains("Not a page")
            && form_address.body.contains(">Sign out</button>"),
        "{}",
        form_address.body
    );
    let form_address_signed_out = get(&app, "/panel/settings/password", "").await;
    assert_eq!(form_address_signed_out.status, 405);
    assert!(form_address_signed_out.body.contains("Not a page"));
    assert!(!form_address_signed_out.body.contains("Sign out"));
    let icon = get(&app, "/panel/assets/favicon.svg", "").await;
    assert_eq!(icon.status, 200);
    assert_eq!(icon.headers["content-type"], "image/svg+xml");
    assert!(icon.body.starts_with("<svg"));
    assert!(licenses.body.contains("<td>alice</td>"));
    let nobody = get(&app, "/panel/licenses?login=bob", &cookie).await;
    assert!(nobody.body.contains("No licenses for this login"));
    // A filter that is not a login: the error beside the form, the input kept, the page's
    // navigation (and its Sign out) still there.
    let too_long = "a".repeat(255);
    let refused = get(&app, &format!("/panel/licenses?login={too_long}"), &cookie).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("id=\"login-filter-error\""));
    assert!(refused.body.contains(&format!("value=\"{too_long}\"")));
    assert!(refused.body.contains("/panel/logout"));
    assert!(!refused.body.contains("<table id=\"licenses\">"));
    // A cursor the panel did not make is the client's mistake, not the server's.
    // Every list says so alike; an empty cursor is the first page, as none.
    for list in ["licenses", "ledger", "promo-batches", "activity"] {
        let bad_cursor = get(&app, &format!("/panel/{list}?cursor=not-a-cursor"), &cookie).await;
        assert_eq!(bad_cursor.status, 400, "{list}");
        assert!(bad_cursor.body.contains("Not a valid request"), "{list}");
        assert!(!bad_cursor.body.contains("on our side"), "{list}");
        let empty = get(&app, &format!("/panel/{list}?cursor="), &cookie).await;
        let first = get(&app, &format!("/panel/{list}"), &cookie).await;
        assert_eq!(empty.status, 200, "{list}: {}", empty.body);
        let table = |page: &Page| {
            between(&page.body, "<table", "</table>")
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(table(&empty), table(&first), "{list}");
    }
    // Signed in, a message page has its Sign out button as every page does.
    for path in [
        "/panel/licenses?cursor=not-a-cursor",
        "/panel/activity?cursor=not-a-cursor",
        "/panel/promo-batches/00000000-0000-4000-8000-000000000000/void",
    ] {
        let page = get(&app, path, &cookie).await;
        assert!(matches!(page.status, 400 | 404), "{path}: {}", page.status);
        assert!(page.body.contains("action=\"/panel/logout\""), "{path}");
        assert!(
            page.body
                .contains(&format!("value=\"{}\"", csrf(&licenses))),
            "{path}"
        );
    }
    // The first account sees none of it.
    let other = get(
        &app,
        "/panel/promo-batches",
        &sign_in(&app, &fresh.client_id, &fresh.password).await,
    )
    .await;
    assert!(!other.body.contains(&batch.batch_id));
    let css = get(&app, "/panel/assets/panel.css", "").await;
    assert_eq!(css.status, 200);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}

async fn sign_out_ends_the_session_at_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let page = get(&app, "/panel/settings", &cookie).await;
    let out = post(&app, "/panel/logout", &cookie, &[("csrf", &csrf(&page))]).await;
    assert_eq!(out.status, 303);
    assert_eq!(out.headers[LOCATION], "/panel/login");
    assert!(
        out.headers[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let after = get(&app, "/panel", &cookie).await;
    assert_eq!(after.status, 303);
    assert_eq!(after.headers[LOCATION], "/panel/login");
    // An unknown cookie likewise.
    let unknown = get(&app, "/panel/api-keys", "pb_session=rps_unknown").await;
    assert_eq!(unknown.status, 303);
}

async fn settings_password_change_ends_other_sessions(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let here = sign_in(&app, &r.client_id, &r.password).await;
    let elsewhere = sign_in(&app, &r.client_id, &r.password).await;
    let settings = get(&app, "/panel/settings", &here).await;
    let token = csrf(&settings);
    let wrong = post(
        &app,
        "/panel/settings/password",
        &here,
        &[
            ("csrf", &token),
            ("current_password", "not the password"),
            ("new_password", "a brand new password"),
        ],
    )
    .await;
    assert_eq!(wrong.status, 400);
    assert!(wrong.body.contains("The current password is incorrect."));
    assert!(!wrong.body.contains("a brand new password"));
    let short = post(
        &app,
        "/panel/settings/password",
        &here,
        &[
            ("csrf", &token),
            ("current_password", &r.password),
            ("new_password", "short"),
        ],
    )
    .await;
    assert_eq!(short.status, 400);
    assert!(short.body.contains("12 to 128 characters"));
    assert_eq!(
        get(&app, "/panel", &elsewhere).await.status,
        200,
        "nothing changed yet"
    );

    let changed = post(
        &app,
        "/panel/settings/password",
        &here,
        &[
            ("csrf", &token),
            ("current_password", &r.password),
            ("new_password", "a brand new password"),
        ],
    )
    .await;
    // Post/Redirect/Get: a reload of the page that says so sends no password again (it would
    // now be the wrong one, and count as a failed sign-in).
    assert_eq!(changed.headers[LOCATION], "/panel/settings");
    let shown = follow(&app, &changed, &here).await;
    assert_eq!(shown.status, 200);
    assert!(shown.body.contains("Password changed."));
    // The browser dropped the message's cookie (`follow` checked it): a reload shows nothing.
    let reloaded = get(&app, "/panel/settings", &here).await;
    assert!(!reloaded.body.contains("Password changed."), "shown once");
    assert_eq!(
        get(&app, "/panel", &here).await.status,
        200,
        "this session stays"
    );
    assert_eq!(
        get(&app, "/panel", &elsewhere).await.status,
        303,
        "others end"
    );
    sign_in(&app, &r.client_id, "a brand new password").await;
    let old = post(
        &app,
        "/panel/login",
        "",
        &[("client_id", &r.client_id), ("password", &r.password)],
    )
    .await;
    assert_eq!(old.status, 401);
}

async fn roll_shows_the_new_secret_once_and_the_old_key_expires(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let keys = get(&app, "/panel/api-keys", &cookie).await;
    let old_id = between(&keys.body, "data-key-id=\"", "\"")
        .unwrap()
        .to_owned();
    let row = between(&keys.body, &format!("data-key-id=\"{old_id}\""), "</tr>").unwrap();
    for option in ["now", "1 hour", "24 hours", "7 days"] {
        assert!(row.contains(&format!(">{option}</option>")), "{row}");
    }
    assert!(row.contains(">Roll</button>"), "{row}");

    // A grace period the panel does not offer changes nothing.
    let refused = post(
        &app,
        &format!("/panel/api-keys/{old_id}/roll"),
        &cookie,
        &[("csrf", &csrf(&keys)), ("expires_in", "5")],
    )
    .await;
    assert_eq!(refused.status, 400);
    // Beside the form refused: in the key's row, not the "Create key" form.
    let row = between(&refused.body, &format!("data-key-id=\"{old_id}\""), "</tr>").unwrap();
    assert!(row.contains("role=\"alert\""), "{row}");
    assert!(!refused.body.contains("create-key-error"));
    assert_eq!(refused.body.matches("data-key-id=").count(), 1);

    // Five active keys: a roll with a grace period is refused in the row, its choice kept.
    let token = csrf(&keys);
    for name in ["k2", "k3", "k4", "k5"] {
        let made = post(
            &app,
            "/panel/api-keys",
            &cookie,
            &[("csrf", &token), ("name", name)],
        )
        .await;
        assert_eq!(made.status, 303);
    }
    let at_limit = post(
        &app,
        &format!("/panel/api-keys/{old_id}/roll"),
        &cookie,
        &[("csrf", &token), ("expires_in", "3600")],
    )
    .await;
    assert_eq!(at_limit.status, 409);
    let row = between(
        &at_limit.body,
        &format!("data-key-id=\"{old_id}\""),
        "</tr>",
    )
    .unwrap();
    assert!(
        row.contains("role=\"alert\"") && row.contains("keys are already active"),
        "{row}"
    );
    assert!(
        row.contains("<option value=\"3600\" selected>1 hour</option>"),
        "{row}"
    );
    assert_eq!(
        at_limit.body.matches(" selected>").count(),
        5,
        "the other rows offer 24 hours"
    );
    // The four made just now are revoked again: back to one active key.
    for id in at_limit
        .body
        .split("data-key-id=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
    {
        if id != old_id {
            let gone = post(
                &app,
                &format!("/panel/api-keys/{id}/revoke"),
                &cookie,
                &[("csrf", &token)],
            )
            .await;
            assert_eq!(gone.status, 303);
        }
    }

    // A one-hour grace: a new key now, shown once; the old one still works, with its expiry.
    let rolled = post(
        &app,
        &format!("/panel/api-keys/{old_id}/roll"),
        &cookie,
        &[("csrf", &csrf(&keys)), ("expires_in", "3600")],
    )
    .await;
    assert_security_headers(&rolled);
    let rolled = follow(&app, &rolled, &cookie).await;
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    let secret = between(&rolled.body, "<code id=\"new-secret\">", "</code>")
        .expect("the new secret, once")
        .to_owned();
    assert!(secret.starts_with("rss_"));
    assert!(sdk(&app, &r.client_id, &secret).balances().await.is_ok());
    assert!(sdk(&app, &r.client_id, &r.secret).balances().await.is_ok());
    // The page says which key the new one replaces and until when that one works.
    let replaces = between(&rolled.body, "<p id=\"rolled-key\">", "</p>").expect("the rolled key");
    let stops = partner_billing::utc::rfc3339(app.store.now_utc() + 3600).unwrap();
    assert!(
        replaces.contains(&format!("<code>{old_id}</code>"))
            && replaces.contains(&format!("keeps working until <time datetime=\"{stops}\">")),
        "{replaces}"
    );
    let again = get(&app, "/panel/api-keys", &cookie).await;
    assert!(
        !again.body.contains(&secret),
        "a reload never shows it again"
    );
    let row = between(&again.body, &format!("data-key-id=\"{old_id}\""), "</tr>").unwrap();
    assert_eq!(
        row.matches("<time datetime=").count(),
        3,
        "Created, Last used and Expires: {row}"
    );

    // Past the grace period the old key gets the empty 401 and is listed expired (a page
    // half-way keeps the panel session from idling out).
    app.store.clock().advance(1800);
    assert_eq!(get(&app, "/panel/api-keys", &cookie).await.status, 200);
    app.store.clock().advance(1800);
    assert!(matches!(
        sdk(&app, &r.client_id, &r.secret).balances().await,
        Err(Error::Unauthorized)
    ));
    let later = get(&app, "/panel/api-keys", &cookie).await;
    let row = between(&later.body, &format!("data-key-id=\"{old_id}\""), "</tr>").unwrap();
    assert!(
        row.contains("expired") && !row.contains(">Roll</button>"),
        "{row}"
    );

    // A roll of the expired key (a stale page): refused above the list, its row has no form.
    let stale = post(
        &app,
        &format!("/panel/api-keys/{old_id}/roll"),
        &cookie,
        &[("csrf", &csrf(&later)), ("expires_in", "3600")],
    )
    .await;
    assert_eq!(stale.status, 404);
    let row = between(&stale.body, &format!("data-key-id=\"{old_id}\""), "</tr>").unwrap();
    assert!(!row.contains("role=\"alert\""), "{row}");
    assert!(
        stale.body.contains(
            "<p class=\"error\" role=\"alert\" id=\"key-error\">That key does not exist or is no longer active.</p>"
        ),
        "{}",
        stale.body
    );

    // Rolled "now", the replaced key is said to work no more; a created key replaces none.
    let new_id = between(&rolled.body, "<code id=\"new-key-id\">", "</code>").unwrap();
    let now = post(
        &app,
        &format!("/panel/api-keys/{new_id}/roll"),
        &cookie,
        &[("csrf", &csrf(&later)), ("expires_in", "0")],
    )
    .await;
    let now = follow(&app, &now, &cookie).await;
    let replaces = between(&now.body, "<p id=\"rolled-key\">", "</p>").expect("the rolled key");
    assert!(
        replaces.contains(&format!("<code>{new_id}</code>, which no longer works.")),
        "{replaces}"
    );
    let created = post(
        &app,
        "/panel/api-keys",
        &cookie,
        &[("csrf", &csrf(&now)), ("name", "x")],
    )
    .await;
    let created = follow(&app, &created, &cookie).await;
    assert!(
        created.body.contains("id=\"new-secret\""),
        "{}",
        created.body
    );
    assert!(!created.body.contains("rolled-key"), "{}", created.body);
}

/// The cookie that carries a new key's secret to the page after "Create key" opens on that
/// page only, in the session that made the key only, unaltered, and for a minute only: another
/// page leaves it for its own, another session's page or an altered cookie shows nothing (and
/// drops it), the same cookie sent again shows nothing, within its minute or after it.
async fn a_new_secret_opens_on_its_page_in_its_session_within_its_minute(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let other_session = sign_in(&app, &r.client_id, &r.password).await;
    let keys = get(&app, "/panel/api-keys", &cookie).await;
    let created = post(
        &app,
        "/panel/api-keys",
        &cookie,
        &[("csrf", &csrf(&keys)), ("name", "flash")],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let flash = set_flash_cookie(&created);
    // Another page: nothing shown, the cookie left for its own page.
    let webhooks = get(&app, "/panel/webhooks", &format!("{cookie}; {flash}")).await;
    assert_eq!(webhooks.status, 200);
    assert!(!webhooks.body.contains("new-secret"));
    assert!(!drops_flash(&webhooks), "left for the keys page");
    // Another session of the same account: nothing shown, the cookie dropped.
    let stranger = get(
        &app,
        "/panel/api-keys",
        &format!("{other_session}; {flash}"),
    )
    .await;
    assert_eq!(stranger.status, 200);
    assert!(!stranger.body.contains("new-secret"));
    assert!(drops_flash(&stranger));
    // Altered by one character: nothing shown, the cookie dropped.
    let (name, sealed) = flash.split_once('=').unwrap();
    let middle = sealed.len() / 2;
    let swapped = if &sealed[middle..=middle] == "A" {
        "B"
    } else {
        "A"
    };
    let altered = format!(
        "{name}={}{swapped}{}",
        &sealed[..middle],
        &sealed[middle + 1..]
    );
    let tampered = get(&app, "/panel/api-keys", &format!("{cookie}; {altered}")).await;
    assert_eq!(tampered.status, 200);
    assert!(!tampered.body.contains("new-secret"), "{}", tampered.body);
    assert!(drops_flash(&tampered));
    // Its own page and session: the secret, once.
    let shown = get(&app, "/panel/api-keys", &format!("{cookie}; {flash}")).await;
    assert!(
        shown.body.contains("<code id=\"new-secret\">rss_"),
        "{}",
        shown.body
    );
    assert!(drops_flash(&shown));
    // The same cookie kept and sent again within its minute: nothing, the secret was shown.
    let again = get(&app, "/panel/api-keys", &format!("{cookie}; {flash}")).await;
    assert_eq!(again.status, 200);
    assert!(!again.body.contains("new-secret"), "{}", again.body);
    // Two secrets made one after the other, the first page never loaded: the newer replaces
    // the older, whose cookie then opens nothing; the newer opens once.
    let older = set_flash_cookie(
        &post(
            &app,
            "/panel/api-keys",
            &cookie,
            &[("csrf", &csrf(&keys)), ("name", "older")],
        )
        .await,
    );
    let newer = set_flash_cookie(
        &post(
            &app,
            &format!("/panel/api-keys/{}/roll", r.api_key_id),
            &cookie,
            &[("csrf", &csrf(&keys)), ("expires_in", "0")],
        )
        .await,
    );
    for (which, sent, shows) in [
        ("older", &older, false),
        ("newer", &newer, true),
        ("newer again", &newer, false),
    ] {
        let page = get(&app, "/panel/api-keys", &format!("{cookie}; {sent}")).await;
        assert_eq!(
            page.body.contains("<code id=\"new-secret\">rss_"),
            shows,
            "{which}: {}",
            page.body
        );
    }
    // A prefetch takes nothing: the secret still opens for the page the person loads.
    let third = set_flash_cookie(
        &post(
            &app,
            "/panel/api-keys",
            &cookie,
            &[("csrf", &csrf(&keys)), ("name", "third")],
        )
        .await,
    );
    let prefetched = read(
        browserless()
            .get(app.url("/panel/api-keys"))
            .header("Cookie", format!("{cookie}; {third}"))
            .header("Sec-Purpose", "prefetch")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(!prefetched.body.contains("new-secret"));
    assert!(!drops_flash(&prefetched));
    let loaded = get(&app, "/panel/api-keys", &format!("{cookie}; {third}")).await;
    assert!(
        loaded.body.contains("<code id=\"new-secret\">rss_"),
        "{}",
        loaded.body
    );
    // A page that failed after claiming the secret gives it back for the reload, unless a newer
    // secret replaced it (the core's steps, as the page runs them).
    let token = partner_billing::domain::Secret::from_presented(
        cookie.trim_start_matches("pb_session=").to_owned(),
    );
    let expect = |nonce: &'static str| {
        let (store, token) = (&app.store, &token);
        async move {
            accounts::expect_secret_message(store, token, nonce)
                .await
                .unwrap()
        }
    };
    let shows = |nonce: &'static str| {
        let (store, token) = (&app.store, &token);
        async move {
            accounts::show_secret_message_once(store, token, nonce)
                .await
                .unwrap()
        }
    };
    let give_back = |nonce: &'static str| {
        let (store, token) = (&app.store, &token);
        async move {
            accounts::give_back_secret_message(store, token, nonce)
                .await
                .unwrap()
        }
    };
    expect("n1").await;
    assert!(shows("n1").await);
    give_back("n1").await;
    assert!(shows("n1").await, "given back: shown on the reload");
    expect("n2").await;
    give_back("n1").await;
    assert!(
        !shows("n1").await,
        "a newer secret is not replaced by one given back"
    );
    assert!(shows("n2").await);
    // The same cookie kept and sent again past its minute: nothing.
    app.store.clock().advance(61);
    let replayed = get(&app, "/panel/api-keys", &format!("{cookie}; {flash}")).await;
    assert_eq!(replayed.status, 200);
    assert!(!replayed.body.contains("new-secret"), "{}", replayed.body);
    assert!(drops_flash(&replayed));
    app.stop().await;
}

/// The overview's usage: units spent per day (UTC) and product, licenses and promo batches
/// alike, as a chart (`svg#usage-chart`) and as `table#usage` (Day, Product, Units), newest day
/// first. A day is a date, shown as text: every `<time>` of the page reads as a time.
async fn the_overview_shows_units_spent_per_day_and_product(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("basic", Some(30)).await;
    app.credit(&r, "pro", 10).await;
    app.credit(&r, "basic", 10).await;
    app.user("alice").await;
    let client = sdk(&app, &r.client_id, &r.secret);
    for _ in 0..2 {
        client.issue_license("pro", "alice", None).await.unwrap();
    }
    client.generate_promo_batch("basic", 3, None).await.unwrap();
    let first_day = partner_billing::utc::rfc3339(app.store.now_utc()).unwrap()[..10].to_owned();
    app.store.clock().advance(86_400);
    client.issue_license("pro", "alice", None).await.unwrap();
    let second_day = partner_billing::utc::rfc3339(app.store.now_utc()).unwrap()[..10].to_owned();

    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let overview = get(&app, "/panel", &cookie).await;
    assert_eq!(overview.status, 200);
    assert!(
        overview.body.contains("<svg id=\"usage-chart\""),
        "{}",
        overview.body
    );
    assert_eq!(
        column_headers(&overview, "usage"),
        ["Day", "Product", "Units"]
    );
    let table = between(&overview.body, "<table id=\"usage\">", "</table>").unwrap();
    assert!(!table.contains("<time"), "a day is no time: {table}");
    let rows: Vec<Vec<String>> = table
        .split("<tr>")
        .skip(2)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let text = cell.split_once('>').map_or("", |(_, rest)| rest);
                    text.split("</td>").next().unwrap_or_default().to_owned()
                })
                .collect()
        })
        .collect();
    let row = |day: &str, product: &str, units: &str| {
        vec![day.to_owned(), product.to_owned(), units.to_owned()]
    };
    assert_eq!(
        rows[0],
        row(&second_day, "pro", "1"),
        "newest day first: {rows:?}"
    );
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.contains(&row(&first_day, "pro", "2")), "{rows:?}");
    assert!(rows.contains(&row(&first_day, "basic", "3")), "{rows:?}");
    for time in overview.body.split("<time ").skip(1) {
        let text = between(time, ">", "</time>").unwrap();
        assert!(
            text.len() == 20 && text.ends_with(" UTC") && text.as_bytes()[10] == b' ',
            "a <time> reads as a time: {text}"
        );
    }
    app.stop().await;
}

/// "Revoke" on a later page of the licenses, and "Void" on a later page of the batches, lead
/// back to that page (its cursor carried through the confirmation), "Cancel" too; a cursor
/// that could change the address is not carried.
async fn a_revoke_or_void_leads_back_to_the_page_it_came_from(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 200).await;
    let client = sdk(&app, &r.client_id, &r.secret);
    for _ in 0..101 {
        client.issue_license("pro", "alice", None).await.unwrap();
    }
    for _ in 0..51 {
        client.generate_promo_batch("pro", 1, None).await.unwrap();
    }
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    // The second page of each list, by its "Older" link.
    let licenses = get(&app, "/panel/licenses", &cookie).await;
    let cursor = between(
        &licenses.body,
        "<a href=\"/panel/licenses?cursor=",
        "\" rel=\"next\"",
    )
    .expect("an Older link")
    .to_owned();
    let second = get(&app, &format!("/panel/licenses?cursor={cursor}"), &cookie).await;
    let carried = format!("<input type=\"hidden\" name=\"cursor\" value=\"{cursor}\">");
    assert!(second.body.contains(&carried), "{}", second.body);
    let license_id = between(&second.body, "<code id=\"license-", "\"")
        .unwrap()
        .to_owned();
    let path = format!("/panel/licenses/{license_id}/revoke");
    let token = csrf(&second);
    let confirm = post(
        &app,
        &path,
        &cookie,
        &[("csrf", &token), ("cursor", &cursor)],
    )
    .await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains(&carried), "{}", confirm.body);
    let back = format!("/panel/licenses?cursor={cursor}");
    assert!(
        confirm
            .body
            .contains(&format!("<a href=\"{back}\">Cancel</a>"))
    );
    let done = post(
        &app,
        &path,
        &cookie,
        &[("csrf", &token), ("confirm", "yes"), ("cursor", &cursor)],
    )
    .await;
    assert_eq!(done.headers[LOCATION], back.as_str());
    let after = follow(&app, &done, &cookie).await;
    assert!(after.body.contains("revoked"), "{}", after.body);

    let batches = get(&app, "/panel/promo-batches", &cookie).await;
    let cursor = between(
        &batches.body,
        "<a href=\"/panel/promo-batches?cursor=",
        "\" rel=\"next\"",
    )
    .expect("an Older link")
    .to_owned();
    let second = get(
        &app,
        &format!("/panel/promo-batches?cursor={cursor}"),
        &cookie,
    )
    .await;
    let carried = format!("<input type=\"hidden\" name=\"cursor\" value=\"{cursor}\">");
    assert!(second.body.contains(&carried), "{}", second.body);
    let batch_id = between(&second.body, "<code id=\"batch-", "\"")
        .unwrap()
        .to_owned();
    let path = format!("/panel/promo-batches/{batch_id}/void");
    let confirm = get(&app, &format!("{path}?cursor={cursor}"), &cookie).await;
    assert_eq!(confirm.status, 200);
    let back = format!("/panel/promo-batches?cursor={cursor}");
    assert!(confirm.body.contains(&carried), "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains(&format!("<a href=\"{back}\">Cancel</a>"))
    );
    let done = post(
        &app,
        &path,
        &cookie,
        &[("csrf", &csrf(&confirm)), ("cursor", &cursor)],
    )
    .await;
    assert_eq!(done.headers[LOCATION], back.as_str());

    // A cursor that is no cursor is not carried: back to the first page (voiding again
    // changes nothing).
    let forged = post(
        &app,
        &path,
        &cookie,
        &[("csrf", &csrf(&confirm)), ("cursor", "x&login=y")],
    )
    .await;
    assert_eq!(forged.headers[LOCATION], "/panel/promo-batches");
}
