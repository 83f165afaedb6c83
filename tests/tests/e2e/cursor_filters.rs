//! A cursor pages through the list it was taken from, filter included: used with another
//! filter (or none) it is a cursor the service cannot read, `400 Request.ValidationFailed` on
//! `cursor`, in the partner API and in the panel; and the pages' own links, which carry their
//! filter, keep working.

use partner_billing_client::{LedgerQuery, LicenseQuery};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

use crate::panel::{Page, get as panel_get, sign_in};
use crate::reads::partner;

both_databases!(
    a_partner_cursor_reads_only_under_its_own_filter,
    a_panel_cursor_reads_only_under_its_own_filter
);

async fn get(app: &TestApp, r: &Reseller, path: &str) -> (u16, Value) {
    let response = app.partner(Method::GET, path, r).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn assert_cursor_refused(what: &str, (status, body): &(u16, Value)) {
    assert_eq!(*status, 400, "{what}: {body}");
    assert_eq!(body["code"], "Request.ValidationFailed", "{what}: {body}");
    assert_eq!(body["field"], "cursor", "{what}: {body}");
}

/// Issues `n` licenses of `plan` to `login`, twenty at a time.
async fn issue(app: &TestApp, r: &Reseller, plan: &str, login: &str, n: usize) {
    let mut left = n;
    while left > 0 {
        let wave = left.min(20);
        let sent: Vec<_> = (0..wave)
            .map(|_| {
                let body = json!({"planSlug": plan, "login": login, "idempotencyKey": uuid::Uuid::new_v4().to_string()});
                let request = app
                    .partner(Method::POST, "/v1/billing/partner/licenses", r)
                    .json(&body);
                tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
            })
            .collect();
        for request in sent {
            assert_eq!(request.await.unwrap(), 200);
        }
        left -= wave;
    }
}

async fn set_up(app: &TestApp, units: i64) -> Reseller {
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("max", Some(30)).await;
    app.user("dave").await;
    app.user("carol").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", units).await;
    app.credit(&r, "max", units).await;
    r
}

async fn a_partner_cursor_reads_only_under_its_own_filter(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = set_up(&app, 20).await;
    issue(&app, &r, "pro", "dave", 3).await;
    issue(&app, &r, "pro", "carol", 3).await;
    issue(&app, &r, "max", "dave", 2).await;
    const LIST: &str = "/v1/billing/partner/licenses";
    let cursor_of = |(status, body): (u16, Value)| {
        assert_eq!(status, 200, "{body}");
        body["nextCursor"].as_str().expect("a next page").to_owned()
    };

    let dave = cursor_of(get(&app, &r, &format!("{LIST}?login=dave&limit=1")).await);
    let (status, page) = get(
        &app,
        &r,
        &format!("{LIST}?login=dave&limit=10&cursor={dave}"),
    )
    .await;
    assert_eq!(status, 200, "the cursor under its own filter: {page}");
    let logins: Vec<&str> = page["licenses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["login"].as_str().unwrap())
        .collect();
    assert_eq!(logins, ["dave"; 4], "the rest of dave's licenses");
    for other in [
        "login=carol",
        "",
        "planSlug=pro",
        "login=dave&planSlug=pro",
        "login=Dave",
    ] {
        assert_cursor_refused(
            &format!("dave's cursor with {other:?}"),
            &get(&app, &r, &format!("{LIST}?{other}&cursor={dave}")).await,
        );
    }
    let pro = cursor_of(get(&app, &r, &format!("{LIST}?planSlug=pro&limit=1")).await);
    assert_eq!(
        get(&app, &r, &format!("{LIST}?planSlug=pro&cursor={pro}"))
            .await
            .0,
        200
    );
    for other in ["planSlug=max", "", "login=dave&planSlug=pro"] {
        assert_cursor_refused(
            &format!("pro's cursor with {other:?}"),
            &get(&app, &r, &format!("{LIST}?{other}&cursor={pro}")).await,
        );
    }
    let unfiltered = cursor_of(get(&app, &r, &format!("{LIST}?limit=1")).await);
    assert_eq!(
        get(&app, &r, &format!("{LIST}?cursor={unfiltered}"))
            .await
            .0,
        200
    );
    assert_cursor_refused(
        "an unfiltered cursor with a login",
        &get(&app, &r, &format!("{LIST}?login=dave&cursor={unfiltered}")).await,
    );

    // The ledger: a cursor taken under one product reads under that product only.
    const LEDGER: &str = "/v1/billing/partner/ledger";
    let (status, first) = get(&app, &r, &format!("{LEDGER}?productSlug=pro&limit=1")).await;
    assert_eq!(status, 200, "{first}");
    let cursor = first["nextCursor"].as_str().unwrap();
    let (status, rest) = get(
        &app,
        &r,
        &format!("{LEDGER}?productSlug=pro&cursor={cursor}"),
    )
    .await;
    assert_eq!(status, 200, "{rest}");
    assert!(
        rest["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["productSlug"] == "pro"),
        "{rest}"
    );
    for other in ["productSlug=max", ""] {
        assert_cursor_refused(
            &format!("pro's ledger cursor with {other:?}"),
            &get(&app, &r, &format!("{LEDGER}?{other}&cursor={cursor}")).await,
        );
    }
    let (_, all) = get(&app, &r, &format!("{LEDGER}?limit=1")).await;
    let all = all["nextCursor"].as_str().unwrap();
    assert_cursor_refused(
        "an unfiltered ledger cursor with a product",
        &get(&app, &r, &format!("{LEDGER}?productSlug=pro&cursor={all}")).await,
    );

    // The SDK's streams carry their filter from page to page.
    let client = partner(&app, &r);
    let daves: Vec<_> =
        futures_util::TryStreamExt::try_collect::<Vec<_>>(client.licenses_stream(LicenseQuery {
            login: Some("dave".to_owned()),
            limit: Some(1),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(daves.len(), 5);
    let mut entries = 0;
    app.ledger_feed_settled().await;
    let mut query = LedgerQuery {
        product_slug: Some("max".to_owned()),
        limit: Some(1),
        ..Default::default()
    };
    loop {
        let page = client.ledger_page(&query).await.unwrap();
        entries += page.entries.len();
        if !page.has_more {
            break;
        }
        query.cursor = Some(page.next_cursor);
    }
    assert_eq!(entries, 3, "max: one credit and two licenses");
    app.stop().await;
}

/// The `href` of the page's link with `rel`, its HTML character references decoded.
fn link(page: &Page, rel: &str) -> Option<String> {
    let end = page.body.find(&format!("\" rel=\"{rel}\""))?;
    let start = page.body[..end].rfind("href=\"")? + "href=\"".len();
    Some(unescape(&page.body[start..end]))
}

/// Decodes `&amp;` and numeric character references (`&#38;`, `&#x2F;`).
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').expect("a character reference ends with ';'");
        let reference = &rest[1..end];
        let code = match reference.strip_prefix('#') {
            Some(hex) if hex.starts_with(['x', 'X']) => u32::from_str_radix(&hex[1..], 16).ok(),
            Some(decimal) => decimal.parse().ok(),
            None if reference == "amp" => Some(u32::from('&')),
            None => None,
        };
        out.push(code.and_then(char::from_u32).expect("a known reference"));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn cursor_in(href: &str) -> String {
    let start = href.find("cursor=").unwrap() + "cursor=".len();
    href[start..].split('&').next().unwrap().to_owned()
}

async fn a_panel_cursor_reads_only_under_its_own_filter(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = set_up(&app, 120).await;
    // One more license for dave than a page holds, and one for carol.
    issue(&app, &r, "pro", "dave", 101).await;
    issue(&app, &r, "pro", "carol", 1).await;
    let cookie = sign_in(&app, &r.client_id, &r.password).await;

    let first = panel_get(&app, "/panel/licenses?login=dave", &cookie).await;
    assert_eq!(first.status, 200);
    let older = link(&first, "next").expect("an Older link");
    assert!(older.contains("login=dave"), "{older}");
    let second = panel_get(&app, &older, &cookie).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        second.body.matches("<td>dave</td>").count(),
        1,
        "{}",
        second.body
    );
    assert!(!second.body.contains("<td>carol</td>"));
    let newer = link(&second, "prev").expect("a Newer link");
    assert!(newer.contains("login=dave"), "{newer}");
    assert_eq!(panel_get(&app, &newer, &cookie).await.status, 200);
    let cursor = cursor_in(&older);
    for other in ["login=carol&", ""] {
        let page = panel_get(
            &app,
            &format!("/panel/licenses?{other}cursor={cursor}"),
            &cookie,
        )
        .await;
        assert_eq!(
            page.status, 400,
            "dave's cursor with {other:?}: {}",
            page.body
        );
    }

    // The ledger: 50 entries a page; pro has more, with its licenses.
    let first = panel_get(&app, "/panel/ledger?product=pro", &cookie).await;
    assert_eq!(first.status, 200);
    let older = link(&first, "next").expect("an Older link");
    assert!(older.contains("product=pro"), "{older}");
    let second = panel_get(&app, &older, &cookie).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert!(second.body.contains("<td>pro</td>"));
    assert!(!second.body.contains("<td>max</td>"), "only pro's entries");
    let cursor = cursor_in(&older);
    for other in ["product=max&", ""] {
        let page = panel_get(
            &app,
            &format!("/panel/ledger?{other}cursor={cursor}"),
            &cookie,
        )
        .await;
        assert_eq!(
            page.status, 400,
            "pro's cursor with {other:?}: {}",
            page.body
        );
    }
    app.stop().await;
}
