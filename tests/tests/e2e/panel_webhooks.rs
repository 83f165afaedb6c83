//! The HTML panel's webhooks page and low-balance alerts (docs/design.md, docs/webhooks.md) over plain HTTP:
//! add an endpoint with its secret shown once, send a test event that arrives signed, delete;
//! form errors that keep the inputs and change nothing; thresholds set on settings shown on the
//! overview.

use partner_billing::wire::WEBHOOK_EVENT_TYPES;
use partner_billing_client::verify_webhook;
use partner_billing_tests::receiver::{Receiver, eventually};
use partner_billing_tests::{Db, TestApp, both_databases};
use reqwest::header::LOCATION;

use super::panel::{
    Page, assert_security_headers, between, browserless, csrf, follow, get, post, sign_in,
};

both_databases!(
    webhook_endpoint_life_cycle_with_the_secret_shown_once,
    webhook_form_errors_keep_the_inputs_and_change_nothing,
    low_balance_thresholds_set_on_settings_show_on_the_overview
);

async fn live_endpoints(app: &TestApp) -> i64 {
    app.count_rows("SELECT COUNT(*) FROM webhook_endpoints WHERE status <> 'deleted'")
        .await
}

async fn events(app: &TestApp) -> i64 {
    app.count_rows("SELECT COUNT(*) FROM webhook_events").await
}

/// The `Add endpoint` form as a browser sends it: one `event_types` pair per checked box.
async fn add_endpoint(
    app: &TestApp,
    cookie: &str,
    token: &str,
    url: &str,
    event_types: &[&str],
) -> Page {
    let mut form = vec![("csrf", token), ("url", url), ("description", "ops")];
    form.extend(event_types.iter().map(|t| ("event_types", *t)));
    post(app, "/panel/webhooks", cookie, &form).await
}

/// A POST without the `Sec-Fetch-Site` a browser sends on a same-origin form, and no token.
async fn post_without_csrf(app: &TestApp, path: &str, cookie: &str) -> u16 {
    browserless()
        .post(app.url(path))
        .header("Cookie", cookie)
        .form(&[
            ("url", "http://127.0.0.1:9/hook"),
            ("event_types", "webhook.test"),
        ])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn webhook_endpoint_life_cycle_with_the_secret_shown_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;

    let page = get(&app, "/panel/webhooks", &cookie).await;
    assert_eq!(page.status, 200);
    assert_security_headers(&page);
    for text in [
        "No webhook endpoints yet",
        "<table id=\"webhook-endpoints\">",
        "<label for=\"url\">URL</label>",
        ">Add endpoint</button>",
        "<a href=\"/panel/webhooks\" aria-current=\"page\">Webhooks</a>",
    ] {
        assert!(page.body.contains(text), "{text}");
    }
    for event_type in WEBHOOK_EVENT_TYPES {
        let label = format!("<label for=\"event-{event_type}\">{event_type}</label>");
        assert!(page.body.contains(&label), "{label}");
    }
    let token = csrf(&page);

    // Add: the signing secret once, in this answer only.
    let receiver = Receiver::start().await;
    let added = add_endpoint(
        &app,
        &cookie,
        &token,
        &receiver.url,
        &["webhook.test", "license.issued"],
    )
    .await;
    assert_security_headers(&added);
    let added = follow(&app, &added, &cookie).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let secret = between(&added.body, "<code id=\"new-secret\">", "</code>")
        .expect("the secret is shown")
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(added.body.contains("it will not be shown again"));
    let endpoint_id = between(&added.body, "<code id=\"new-endpoint-id\">", "</code>")
        .unwrap()
        .to_owned();
    assert!(endpoint_id.starts_with("rwe_"));
    assert_eq!(live_endpoints(&app).await, 1);

    // A reload lists it and never shows the secret.
    let listed = get(&app, "/panel/webhooks", &cookie).await;
    assert_eq!(listed.status, 200);
    assert!(!listed.body.contains(&secret));
    assert!(!listed.body.contains("new-secret"));
    assert!(!listed.body.contains("No webhook endpoints yet"));
    let table = between(&listed.body, "<table id=\"webhook-endpoints\">", "</table>").unwrap();
    assert!(table.contains(&receiver.url), "{table}");
    assert!(table.contains("webhook.test, license.issued"), "{table}");
    assert!(table.contains("enabled"));
    assert!(table.contains(&format!("data-endpoint-id=\"{endpoint_id}\"")));

    // Without the token or from another site: refused, nothing queued, nothing deleted.
    let events_before = events(&app).await;
    let test_path = format!("/panel/webhooks/{endpoint_id}/test");
    let delete_path = format!("/panel/webhooks/{endpoint_id}/delete");
    for path in ["/panel/webhooks", test_path.as_str(), delete_path.as_str()] {
        assert_eq!(post_without_csrf(&app, path, &cookie).await, 403, "{path}");
        let wrong = post(&app, path, &cookie, &[("csrf", "wrong")]).await;
        assert_eq!(wrong.status, 403, "{path}");
    }
    assert_eq!(events(&app).await, events_before);
    assert_eq!(live_endpoints(&app).await, 1);

    // "Send test event": the receiver gets a webhook.test signed with the secret shown once.
    let tested = post(&app, &test_path, &cookie, &[("csrf", token.as_str())]).await;
    let tested = follow(&app, &tested, &cookie).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    assert!(tested.body.contains("A webhook.test event is on its way."));
    // What a reload fetches again (the page, not the form): no notice, no second event.
    let events_sent = events(&app).await;
    let reloaded = get(&app, "/panel/webhooks", &cookie).await;
    assert!(!reloaded.body.contains("on its way"));
    assert_eq!(events(&app).await, events_sent);
    let received = receiver.wait_for(1).await;
    let event = verify_webhook(&secret, &received[0].headers, &received[0].body)
        .expect("signed with the secret the page showed");
    assert_eq!(received[0].json()["type"], "webhook.test");

    // The attempt shows among the recent deliveries, with its status.
    let deliveries = eventually("the delivery on the page", || async {
        let page = get(&app, "/panel/webhooks", &cookie).await;
        let table = between(&page.body, "<table id=\"webhook-deliveries\">", "</table>")?;
        table.contains(&event.event_id).then(|| table.to_owned())
    })
    .await;
    assert!(deliveries.contains("webhook.test"), "{deliveries}");
    assert!(deliveries.contains("delivered (HTTP 204)"), "{deliveries}");

    // A failed attempt that will be retried says when.
    receiver.respond_with(500);
    let tested = post(&app, &test_path, &cookie, &[("csrf", token.as_str())]).await;
    assert_eq!(tested.status, 303);
    let attempt_row = |n: u8| {
        let app = &app;
        let cookie = &cookie;
        async move {
            let page = get(app, "/panel/webhooks", cookie).await;
            let table = between(&page.body, "<table id=\"webhook-deliveries\">", "</table>")?;
            let nth = format!("<td class=\"num\">{n}</td>");
            let row = |row: &&str| row.contains("failed (HTTP 500)") && row.contains(&nth);
            table.split("<tr>").find(row).map(str::to_owned)
        }
    };
    eventually("the failed first attempt on the page", || attempt_row(1)).await;
    // While its retry is due (the clock set back a minute: still to come, whenever it runs).
    app.store.clock().advance(-60);
    let failed = attempt_row(1).await.unwrap();
    app.store.clock().advance(60);
    assert!(
        failed.contains("failed (HTTP 500); next attempt <time datetime=\""),
        "{failed}"
    );
    // Once the retries are made (one after each delay: three attempts), it says so no more.
    eventually("the last attempt on the page", || attempt_row(3)).await;
    let first = attempt_row(1).await.unwrap();
    assert!(!first.contains("next attempt"), "{first}");

    // Disabled by a `410 Gone`: no "Send test event" (nothing would be sent); the row says why.
    receiver.respond_with(410);
    let tested = post(&app, &test_path, &cookie, &[("csrf", token.as_str())]).await;
    assert_eq!(tested.status, 303);
    let row = eventually("the endpoint disabled", || async {
        let page = get(&app, "/panel/webhooks", &cookie).await;
        let row = between(
            &page.body,
            &format!("data-endpoint-id=\"{endpoint_id}\""),
            "</tr>",
        )?;
        row.contains("<td>disabled</td>").then(|| row.to_owned())
    })
    .await;
    assert!(!row.contains("Send test event"), "{row}");
    assert!(row.contains("delete it and add it again"), "{row}");

    // An unknown endpoint: 404 on the page, nothing queued.
    let events_before = events(&app).await;
    let unknown = post(
        &app,
        "/panel/webhooks/rwe_000000000000000000000000/test",
        &cookie,
        &[("csrf", token.as_str())],
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.body.contains("That endpoint does not exist."));
    assert_eq!(events(&app).await, events_before);

    // Delete: back to the page, which no longer lists it; nothing more is sent to it.
    let deleted = post(&app, &delete_path, &cookie, &[("csrf", token.as_str())]).await;
    assert_eq!(deleted.status, 303);
    assert_eq!(deleted.headers[LOCATION], "/panel/webhooks");
    assert_eq!(live_endpoints(&app).await, 0);
    let page = get(&app, "/panel/webhooks", &cookie).await;
    assert!(page.body.contains("No webhook endpoints yet"));
    assert!(
        !page
            .body
            .contains(&format!("data-endpoint-id=\"{endpoint_id}\""))
    );
    let again = post(&app, &test_path, &cookie, &[("csrf", token.as_str())]).await;
    assert_eq!(again.status, 404);
}

async fn webhook_form_errors_keep_the_inputs_and_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let token = csrf(&get(&app, "/panel/webhooks", &cookie).await);

    // Refused URLs (a private address even with --webhook-allow-insecure, a malformed one)
    // and no event type: 400 beside the form, the inputs kept, nothing created.
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "https://10.0.0.1/hook",
            &["balance.low"],
            "The URL is refused",
        ),
        ("not a url", &["balance.low"], "The URL is refused"),
        (
            "https://example.com/hook",
            &[],
            "Choose at least one event type.",
        ),
    ];
    for (url, types, message) in cases {
        let page = add_endpoint(&app, &cookie, &token, url, types).await;
        assert_eq!(page.status, 400, "{url}");
        let error = between(&page.body, "id=\"add-endpoint-error\">", "</p>").expect(url);
        assert!(error.contains(message), "{url}: {error}");
        assert!(
            page.body.contains(&format!("value=\"{url}\"")),
            "{url} kept"
        );
        assert!(page.body.contains("value=\"ops\""), "description kept");
        for t in types {
            assert!(
                page.body.contains(&format!("value=\"{t}\" checked")),
                "{t} kept checked"
            );
        }
        assert!(!page.body.contains("new-secret"));
        assert_eq!(live_endpoints(&app).await, 0, "{url}");
    }

    // The five-endpoint cap: the sixth is refused and changes nothing.
    let receiver = Receiver::start().await;
    for _ in 0..5 {
        let page = add_endpoint(&app, &cookie, &token, &receiver.url, &["webhook.test"]).await;
        assert_eq!(page.status, 303, "{}", page.body);
    }
    let sixth = add_endpoint(&app, &cookie, &token, &receiver.url, &["balance.low"]).await;
    assert_eq!(sixth.status, 409);
    let error = between(&sixth.body, "id=\"add-endpoint-error\">", "</p>").unwrap();
    assert!(error.contains("already has 5 endpoints"), "{error}");
    assert!(sixth.body.contains(&format!("value=\"{}\"", receiver.url)));
    assert!(!sixth.body.contains("new-secret"));
    assert_eq!(live_endpoints(&app).await, 5);
}

async fn low_balance_thresholds_set_on_settings_show_on_the_overview(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("basic", Some(30)).await;
    app.credit(&r, "pro", 20).await;
    app.credit(&r, "basic", 3).await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;

    let alert_cell = |body: &str, slug: &str| -> String {
        let table = between(body, "<table id=\"balances\">", "</table>").unwrap();
        let row = between(table, &format!("<tr><td>{slug}</td>"), "</tr>").unwrap();
        row.rsplit("<td").next().unwrap().to_owned()
    };
    let overview = get(&app, "/panel", &cookie).await;
    for slug in ["pro", "basic"] {
        assert!(alert_cell(&overview.body, slug).contains("off"), "{slug}");
    }

    let settings = get(&app, "/panel/settings", &cookie).await;
    assert_eq!(settings.status, 200);
    for slug in ["pro", "basic"] {
        let label = format!("<label for=\"alert-{slug}\">Alert below ({slug})</label>");
        assert!(settings.body.contains(&label), "{label}");
    }
    assert!(settings.body.contains(">Save alerts</button>"));
    let token = csrf(&settings);
    // "Save alerts" with both products' thresholds.
    let save = |pro: &'static str, basic: &'static str| {
        let (app, cookie, token) = (&app, &cookie, &token);
        async move {
            let fields = [
                ("csrf", token.as_str()),
                ("alert:pro", pro),
                ("alert:basic", basic),
            ];
            post(app, "/panel/settings/alerts", cookie, &fields).await
        }
    };

    let saved = save("5", "0").await;
    assert_eq!(saved.headers[LOCATION], "/panel/settings", "{}", saved.body);
    let shown = follow(&app, &saved, &cookie).await;
    assert_eq!(shown.status, 200);
    assert!(shown.body.contains("Low-balance alerts saved."));
    assert!(shown.body.contains("name=\"alert:pro\""));
    let overview = get(&app, "/panel", &cookie).await;
    assert!(
        alert_cell(&overview.body, "pro").contains(">5<"),
        "{}",
        overview.body
    );
    assert!(alert_cell(&overview.body, "basic").contains("off"));
    assert!(
        !overview.body.contains("id=\"below-alert\""),
        "20 is not under 5"
    );

    // A balance under its alert is pointed out above the table, its number marked.
    let under = save("5", "4").await;
    assert_eq!(under.status, 303, "{}", under.body);
    let overview = get(&app, "/panel", &cookie).await;
    let said = between(&overview.body, "id=\"below-alert\">", "</p>").expect("a notice");
    assert!(said.contains("basic (3 left, alert below 4)"), "{said}");
    assert!(!said.contains("pro"), "{said}");
    assert!(
        overview
            .body
            .contains("<tr><td>basic</td><td class=\"num low\">3</td>")
    );
    assert!(
        overview
            .body
            .contains("<tr><td>pro</td><td class=\"num\">20</td>")
    );
    // At its alert is not under it (as `balance.low` is sent when a debit takes the balance
    // under the threshold): nothing pointed out, nothing marked.
    let at = save("5", "3").await;
    assert_eq!(at.status, 303, "{}", at.body);
    let overview = get(&app, "/panel", &cookie).await;
    assert!(alert_cell(&overview.body, "basic").contains(">3<"));
    assert!(
        !overview.body.contains("id=\"below-alert\""),
        "3 is not under 3"
    );
    assert!(!overview.body.contains("class=\"num low\""));
    let back = save("5", "0").await;
    assert_eq!(back.status, 303, "{}", back.body);
    let settings = get(&app, "/panel/settings", &cookie).await;
    assert!(settings.body.contains("name=\"alert:pro\" type=\"number\" min=\"0\" max=\"1000000000\" step=\"1\" inputmode=\"numeric\" value=\"5\""));

    // A bad value: 400 beside the form, the input kept, no threshold changed.
    for bad in ["-1", "many", "1000000001"] {
        let refused = save("9", bad).await;
        assert_eq!(refused.status, 400, "{bad}");
        let error = between(&refused.body, "id=\"alerts-error\">", "</p>").unwrap();
        assert!(error.contains("basic"), "{error}");
        assert!(
            refused.body.contains(&format!("value=\"{bad}\"")),
            "{bad} kept"
        );
        let overview = get(&app, "/panel", &cookie).await;
        assert!(alert_cell(&overview.body, "pro").contains(">5<"), "{bad}");
        assert!(alert_cell(&overview.body, "basic").contains("off"), "{bad}");
    }

    // Without the token: 403, nothing changed.
    let forged = post(
        &app,
        "/panel/settings/alerts",
        &cookie,
        &[("csrf", "wrong"), ("alert:pro", "0")],
    )
    .await;
    assert_eq!(forged.status, 403);
    assert_eq!(
        post_without_csrf(&app, "/panel/settings/alerts", &cookie).await,
        403
    );
    let overview = get(&app, "/panel", &cookie).await;
    assert!(alert_cell(&overview.body, "pro").contains(">5<"));

    // Turned off again: "off" on the overview.
    let off = post(
        &app,
        "/panel/settings/alerts",
        &cookie,
        &[("csrf", token.as_str()), ("alert:pro", "0")],
    )
    .await;
    assert_eq!(off.status, 303);
    let overview = get(&app, "/panel", &cookie).await;
    assert!(alert_cell(&overview.body, "pro").contains("off"));
}
