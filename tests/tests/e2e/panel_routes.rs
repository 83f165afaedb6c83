//! Every panel route, walked from the server's own route table (the router is built from it):
//! each one for a signed-in reseller sends a request without a live session to the sign-in page
//! (303), and each such POST is refused (403, nothing changed) without the session's CSRF
//! token, with a wrong one, or from another site. The public routes open without a session.

use partner_billing_server::{PanelAccess, panel_routes};
use partner_billing_tests::receiver::Receiver;
use partner_billing_tests::{Db, TestApp, both_databases};
use poem::http::Method;
use reqwest::header::{LOCATION, SET_COOKIE};

use super::panel::{assert_security_headers, between, browserless, csrf, get, post, sign_in};

both_databases!(every_signed_in_route_redirects_without_a_session_and_refuses_forged_forms);

/// A route's path under `/panel` with its parameters filled in.
fn concrete(
    path: &str,
    api_key_id: &str,
    endpoint_id: &str,
    batch_id: &str,
    license_id: &str,
) -> String {
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| match segment {
            ":api_key_id" => api_key_id,
            ":webhook_endpoint_id" => endpoint_id,
            ":batch_id" => batch_id,
            ":license_id" => license_id,
            ":file" => "panel.css",
            s if s.starts_with(':') => panic!("give this test a value for {s} ({path})"),
            s => s,
        })
        .collect();
    format!("/panel{}", segments.join("/"))
        .trim_end_matches('/')
        .to_owned()
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count_rows(sql).await
}

async fn every_signed_in_route_redirects_without_a_session_and_refuses_forged_forms(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.credit(&r, "pro", 7).await;
    app.user("alice").await;
    let license = partner_billing_client::PartnerClient::new(
        &app.base_url,
        partner_billing_client::Credentials::new(&r.client_id, &r.secret),
    )
    .unwrap()
    .issue_license("pro", "alice", None)
    .await
    .unwrap()
    .value;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let token = csrf(&get(&app, "/panel/webhooks", &cookie).await);
    let receiver = Receiver::start().await;
    let added = post(
        &app,
        "/panel/webhooks",
        &cookie,
        &[
            ("csrf", &token),
            ("url", &receiver.url),
            ("event_types", "webhook.test"),
        ],
    )
    .await;
    let added = crate::panel::follow(&app, &added, &cookie).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let endpoint_id = between(&added.body, "<code id=\"new-endpoint-id\">", "</code>")
        .unwrap()
        .to_owned();
    // A form every POST would act on were it let through: a key named, rolled at once or
    // revoked, the password changed, an alert set, an endpoint added, tested or deleted, a
    // license revoked.
    let new_password = "a forged new password";
    let fields = |csrf: &str| -> Vec<(String, String)> {
        [
            ("csrf", csrf),
            ("name", "forged"),
            ("expires_in", "0"),
            ("current_password", r.password.as_str()),
            ("new_password", new_password),
            ("alert:pro", "5"),
            ("url", receiver.url.as_str()),
            ("event_types", "webhook.test"),
            ("confirm", "yes"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    };
    let (batch_id, _codes) = app.promo_batch(&r, "pro", 1).await;
    let events_before = count(&app, "SELECT COUNT(*) FROM webhook_events").await;

    let routes = panel_routes();
    let signed_in = routes
        .iter()
        .filter(|route| route.access == PanelAccess::SignedIn)
        .count();
    assert!(signed_in >= 17, "only {signed_in} signed-in routes");
    for route in &routes {
        let path = concrete(
            route.path,
            &r.api_key_id,
            &endpoint_id,
            &batch_id,
            &license.license_id,
        );
        let what = format!("{} {path}", route.method);
        let send = |cookie: &str, site: &str, form: Vec<(String, String)>| {
            let request = browserless()
                .request(
                    reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap(),
                    app.url(&path),
                )
                .header("Sec-Fetch-Site", site)
                .header("Cookie", cookie);
            async move {
                let response = if route.method == Method::POST {
                    request.form(&form)
                } else {
                    request
                }
                .send()
                .await
                .unwrap();
                let status = response.status().as_u16();
                let location = response.headers().get(LOCATION).cloned();
                let cleared = response
                    .headers()
                    .get(SET_COOKIE)
                    .is_some_and(|c| c.to_str().unwrap().contains("Max-Age=0"));
                (status, location, cleared)
            }
        };
        match route.access {
            PanelAccess::Public => {
                let (status, location, _) = send("", "same-origin", vec![]).await;
                assert!(location.is_none(), "{what} opens without a session");
                let expected = if route.method == Method::POST {
                    401 // the sign-in form, empty
                } else {
                    200
                };
                assert_eq!(status, expected, "{what}");
            }
            PanelAccess::SignedIn => {
                for (without, cookie) in [
                    ("no cookie", ""),
                    ("an unknown session", "pb_session=rps_unknown"),
                ] {
                    let (status, location, cleared) =
                        send(cookie, "same-origin", fields(&token)).await;
                    assert_eq!(status, 303, "{what} with {without}");
                    assert_eq!(location.unwrap(), "/panel/login", "{what} with {without}");
                    assert_eq!(cleared, !cookie.is_empty(), "{what} with {without}");
                }
                if route.method == Method::POST {
                    let forged = [
                        (
                            "no token",
                            "same-origin",
                            fields("").into_iter().skip(1).collect(),
                        ),
                        ("an empty token", "same-origin", fields("")),
                        ("a wrong token", "same-origin", fields(&"0".repeat(64))),
                        ("another site", "cross-site", fields(&token)),
                    ];
                    for (why, site, form) in forged {
                        let (status, _, _) = send(&cookie, site, form).await;
                        assert_eq!(status, 403, "{what} with {why}");
                    }
                } else {
                    let page = get(&app, &path, &cookie).await;
                    assert_eq!(page.status, 200, "{what} signed in");
                    assert_security_headers(&page);
                }
            }
        }
    }

    // Nothing changed: the session is open, the one key works, the password is the old one,
    // no alert is set, the one endpoint is live and no test event was queued.
    assert_eq!(get(&app, "/panel", &cookie).await.status, 200);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM api_keys").await, 1);
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM api_keys WHERE status = 'active' AND expires_utc IS NULL"
        )
        .await,
        1
    );
    assert_eq!(count(&app, "SELECT COUNT(*) FROM balance_alerts").await, 0);
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM promo_batches WHERE voided_utc IS NOT NULL"
        )
        .await,
        0,
        "no batch voided"
    );
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM licenses WHERE revoked_utc IS NOT NULL"
        )
        .await,
        0,
        "no license revoked"
    );
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM webhook_endpoints WHERE status <> 'deleted'"
        )
        .await,
        1
    );
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM webhook_events").await,
        events_before
    );
    sign_in(&app, &r.client_id, &r.password).await;

    // Every route was requested above: each is counted under its own template (the access log
    // takes the same label), none as "unmatched".
    let scrape = app
        .http
        .get(&app.metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for route in &routes {
        let label = format!("route=\"{}\"", template(route.path));
        assert!(
            scrape.contains(&label),
            "{} {}: no {label} in the metrics",
            route.method,
            route.path
        );
    }
    assert!(
        !scrape.contains("route=\"unmatched\""),
        "a panel route counted as unmatched"
    );
}

/// The label a route's requests are counted under: its path under `/panel`, each parameter
/// named as in the API (`{apiKeyId}`).
fn template(path: &str) -> String {
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| match segment {
            ":api_key_id" => "{apiKeyId}",
            ":webhook_endpoint_id" => "{webhookEndpointId}",
            ":batch_id" => "{batchId}",
            ":license_id" => "{licenseId}",
            ":file" => "{file}",
            s if s.starts_with(':') => panic!("give this test a label for {s} ({path})"),
            s => s,
        })
        .collect();
    format!("/panel{}", segments.join("/"))
        .trim_end_matches('/')
        .to_owned()
}
