//! Reading back (docs/design.md, "Reading back and voiding"): licenses, promo batches and the
//! ledger by keyset pages, under concurrent writes; the ledger as a change feed; the request
//! lookup; isolation between resellers; and every malformed parameter answered with its 400
//! while nothing changes. Reads never write.
//!
//! Over 450 lines on purpose: one scenario per list and rule of the read API, each spelling out the
//! pages and cursors it walks.

use std::collections::HashSet;

use partner_billing_client::{
    Credentials, Error, LedgerQuery, LicenseQuery, PageQuery, PartnerClient,
};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    a_cursor_signed_by_an_earlier_release_is_still_read,
    license_pages_never_repeat_or_skip_under_concurrent_inserts,
    license_filters_and_one_license,
    promo_batches_show_counts_and_never_a_code,
    the_ledger_is_a_change_feed,
    the_change_feed_misses_nothing_under_concurrent_writers,
    a_request_is_looked_up_by_its_key,
    resellers_see_only_their_own_records,
    malformed_parameters_are_refused_and_change_nothing,
);

pub(crate) fn partner(app: &TestApp, r: &Reseller) -> PartnerClient {
    PartnerClient::new(&app.base_url, Credentials::new(&r.client_id, &r.secret)).unwrap()
}

/// Everything a write could change, straight from the database: rows of each table a
/// partner write or a void touches, the balances' sum and the voided marks.
pub(crate) async fn state(app: &TestApp) -> Vec<i64> {
    let mut out = Vec::new();
    for sql in [
        "SELECT COUNT(*) FROM ledger_entries",
        "SELECT COUNT(*) FROM licenses",
        "SELECT COUNT(*) FROM idempotency_records",
        "SELECT COUNT(*) FROM promo_batches WHERE voided_utc IS NOT NULL",
        "SELECT COUNT(*) FROM promo_codes WHERE voided_utc IS NOT NULL",
        "SELECT COUNT(*) FROM promo_redemptions",
        "SELECT COUNT(*) FROM webhook_events",
        "SELECT CAST(COALESCE(SUM(remaining), 0) AS BIGINT) FROM balances",
    ] {
        out.push(app.count_rows(sql).await);
    }
    out
}

async fn get(app: &TestApp, r: &Reseller, path: &str) -> (u16, Value) {
    let response = app.partner(Method::GET, path, r).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Asserts a `400 Request.ValidationFailed` naming `field`.
fn assert_invalid(what: &str, (status, body): &(u16, Value), field: &str) {
    assert_eq!(*status, 400, "{what}: {body}");
    assert_eq!(body["code"], "Request.ValidationFailed", "{what}: {body}");
    assert_eq!(body["field"], field, "{what}: {body}");
}

async fn setup(app: &TestApp, units: i64) -> Reseller {
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("max", Some(30)).await;
    for login in ["alice", "bob"] {
        app.user(login).await;
    }
    let r = app.reseller().await;
    app.credit(&r, "pro", units).await;
    app.credit(&r, "max", units).await;
    r
}

async fn license_pages_never_repeat_or_skip_under_concurrent_inserts(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 100).await;
    let client = partner(&app, &r);
    let mut before = HashSet::new();
    for _ in 0..25 {
        let issued = client.issue_license("pro", "alice", None).await.unwrap();
        before.insert(issued.value.license_id);
    }
    // Pages of 7 are read while 20 more licenses are issued by concurrent requests.
    let writers: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.issue_license("pro", "bob", None).await.unwrap() })
        })
        .collect();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = client
            .list_licenses(&LicenseQuery {
                limit: Some(7),
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.licenses.len() <= 7);
        seen.extend(page.licenses.into_iter().map(|l| l.license_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a license was listed twice");
    assert!(
        before.is_subset(&unique),
        "a license issued before the first page was skipped"
    );
    // Afterwards, the stream lists every license once, newest first.
    let all: Vec<_> =
        futures_util::TryStreamExt::try_collect::<Vec<_>>(client.licenses_stream(LicenseQuery {
            limit: Some(9),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(all.len(), 45);
    let ids: HashSet<_> = all.iter().map(|l| l.license_id.clone()).collect();
    assert_eq!(ids.len(), 45);
    assert!(
        all.windows(2).all(|w| w[0].created_utc >= w[1].created_utc),
        "newest first"
    );
    app.assert_audit_clean().await;
}

async fn license_filters_and_one_license(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 10).await;
    let client = partner(&app, &r);
    let a = client
        .issue_license("pro", "alice", None)
        .await
        .unwrap()
        .value;
    client.issue_license("max", "alice", None).await.unwrap();
    client.issue_license("pro", "bob", None).await.unwrap();
    let (_, codes) = app.promo_batch(&r, "max", 1).await;
    let token = app.operator_token("backend").await;
    assert_eq!(
        app.redeem(&token, &codes[0], "bob", "redeem-key-1")
            .await
            .status(),
        200
    );

    let list = |login: Option<&str>, plan: Option<&str>| LicenseQuery {
        login: login.map(str::to_owned),
        plan_slug: plan.map(str::to_owned),
        ..Default::default()
    };
    assert_eq!(
        client
            .list_licenses(&list(None, None))
            .await
            .unwrap()
            .licenses
            .len(),
        4
    );
    let alice = client
        .list_licenses(&list(Some("alice"), None))
        .await
        .unwrap();
    assert_eq!(alice.licenses.len(), 2);
    assert!(alice.licenses.iter().all(|l| l.login == "alice"));
    let pro_alice = client
        .list_licenses(&list(Some("alice"), Some("pro")))
        .await
        .unwrap();
    assert_eq!(pro_alice.licenses.len(), 1);
    assert_eq!(pro_alice.licenses[0].license_id, a.license_id);
    let max = client
        .list_licenses(&list(None, Some("max")))
        .await
        .unwrap();
    assert_eq!(max.licenses.len(), 2);
    let promo: Vec<_> = max
        .licenses
        .iter()
        .filter(|l| l.source == "promo")
        .collect();
    assert_eq!(
        promo.len(),
        1,
        "a redeemed code's license is the reseller's"
    );
    assert!(promo[0].batch_id.is_some());
    // A login or plan that does not exist lists nothing.
    assert!(
        client
            .list_licenses(&list(Some("nobody"), None))
            .await
            .unwrap()
            .licenses
            .is_empty()
    );
    assert!(
        client
            .list_licenses(&list(None, Some("gold")))
            .await
            .unwrap()
            .licenses
            .is_empty()
    );

    let one = client.license(&a.license_id).await.unwrap();
    assert_eq!(one.license_id, a.license_id);
    assert_eq!(one.plan_slug, "pro");
    assert_eq!(one.source, "direct");
    assert_eq!(one.batch_id, None);
    assert_eq!(one.created_utc, a.created_utc);
    let before = state(&app).await;
    for id in [
        "00000000-0000-4000-8000-000000000000",
        "not-a-uuid",
        "%2F..%2F",
    ] {
        let (status, body) = get(&app, &r, &format!("/v1/billing/partner/licenses/{id}")).await;
        assert_eq!(status, 404, "{id}");
        assert_eq!(body["code"], "License.NotFound", "{id}");
    }
    assert!(matches!(
        client.license("00000000-0000-4000-8000-000000000000").await,
        Err(Error::LicenseNotFound { .. })
    ));
    assert_eq!(state(&app).await, before);
}

async fn promo_batches_show_counts_and_never_a_code(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 20).await;
    let client = partner(&app, &r);
    let (first, codes) = app.promo_batch(&r, "pro", 3).await;
    let (second, _) = app.promo_batch(&r, "max", 2).await;
    let token = app.operator_token("backend").await;
    assert_eq!(
        app.redeem(&token, &codes[1], "alice", "redeem-key-1")
            .await
            .status(),
        200
    );

    let (status, body) = get(&app, &r, "/v1/billing/partner/promo-batches").await;
    assert_eq!(status, 200);
    let text = body.to_string();
    for code in &codes {
        assert!(!text.contains(code.as_str()), "a code in the list");
        assert!(!text.contains(&code.replace('-', "")), "a code in the list");
    }
    assert_eq!(body["nextCursor"], Value::Null);
    let batches = body["promoBatches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0]["batchId"], second.as_str(), "newest first");
    assert_eq!(batches[1]["batchId"], first.as_str());
    assert_eq!(batches[1]["count"], 3);
    assert_eq!(batches[1]["redeemed"], 1);
    assert_eq!(batches[1]["voidedUtc"], Value::Null);
    assert_eq!(batches[1]["planSlug"], "pro");
    let created = batches[1]["createdUtc"].as_i64().unwrap();
    assert_eq!(
        batches[1]["recoverableUntilUtc"].as_i64().unwrap(),
        created + 72 * 3600
    );
    assert!(batches[1]["orderPublicId"].is_string());
    // Pages of one, through the SDK's stream.
    let all: Vec<_> =
        futures_util::TryStreamExt::try_collect::<Vec<_>>(client.promo_batches_stream(PageQuery {
            limit: Some(1),
            cursor: None,
        }))
        .await
        .unwrap();
    let ids: Vec<_> = all.iter().map(|b| b.batch_id.as_str()).collect();
    assert_eq!(ids, [second.as_str(), first.as_str()]);
}

async fn ledger_page(
    client: &PartnerClient,
    cursor: Option<String>,
    limit: u32,
) -> partner_billing_client::LedgerPage {
    client
        .ledger_page(&LedgerQuery {
            limit: Some(limit),
            cursor,
            ..Default::default()
        })
        .await
        .unwrap()
}

async fn the_ledger_is_a_change_feed(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("max", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    let client = partner(&app, &r);
    // An empty ledger: no entries, and a cursor that points at the start.
    let empty = ledger_page(&client, None, 10).await;
    assert!(empty.entries.is_empty());
    assert!(!empty.has_more);
    let start = empty.next_cursor.clone();
    assert!(!start.is_empty());

    app.credit(&r, "pro", 10).await;
    app.credit(&r, "max", 5).await;
    for _ in 0..3 {
        client.issue_license("pro", "alice", None).await.unwrap();
    }
    let (_, _) = app.promo_batch(&r, "max", 2).await;
    app.ledger_feed_settled().await;
    // From the start: six entries, oldest first, in pages of four.
    let first = ledger_page(&client, Some(start.clone()), 4).await;
    assert_eq!(first.entries.len(), 4);
    assert!(first.has_more);
    let second = ledger_page(&client, Some(first.next_cursor.clone()), 4).await;
    assert_eq!(second.entries.len(), 2);
    assert!(!second.has_more);
    let entries: Vec<_> = first.entries.iter().chain(&second.entries).collect();
    let kinds: Vec<_> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "credit",
            "credit",
            "license",
            "license",
            "license",
            "promo_batch"
        ]
    );
    assert_eq!(entries[0].units, 10);
    assert_eq!(entries[0].balance_after, 10);
    assert_eq!(entries[4].units, -1);
    assert_eq!(entries[4].balance_after, 7);
    assert_eq!(entries[5].units, -2);
    assert_eq!(entries[5].product_slug, "max");
    // The same from no cursor at all.
    assert_eq!(ledger_page(&client, None, 100).await.entries.len(), 6);
    // Kept and sent later: nothing new yet, then only what was added since.
    let kept = second.next_cursor.clone();
    let nothing = ledger_page(&client, Some(kept.clone()), 100).await;
    assert!(nothing.entries.is_empty());
    assert!(!nothing.has_more);
    assert!(!nothing.next_cursor.is_empty());
    client.issue_license("pro", "alice", None).await.unwrap();
    app.ledger_feed_settled().await;
    let news = ledger_page(&client, Some(kept.clone()), 100).await;
    assert_eq!(news.entries.len(), 1);
    assert_eq!(news.entries[0].kind, "license");
    assert_eq!(news.entries[0].balance_after, 6);
    // The empty ledger's cursor now reads everything.
    assert_eq!(
        ledger_page(&client, Some(start), 100).await.entries.len(),
        7
    );
    // One product only.
    let max = client
        .ledger_page(&LedgerQuery {
            product_slug: Some("max".to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(max.entries.len(), 2);
    assert!(max.entries.iter().all(|e| e.product_slug == "max"));
    // The stream reads to the end.
    let streamed: Vec<_> =
        futures_util::TryStreamExt::try_collect::<Vec<_>>(client.ledger_stream(LedgerQuery {
            limit: Some(3),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(streamed.len(), 7);
}

async fn the_change_feed_misses_nothing_under_concurrent_writers(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 1000).await;
    let replica = app.replica().await;
    let clients = [partner(&app, &r), partner(&replica, &r)];
    // Writers on two servers commit side by side while a reader follows the feed.
    let writers: Vec<_> = (0..60)
        .map(|i| {
            let client = clients[i % 2].clone();
            let plan = if i % 3 == 0 { "max" } else { "pro" };
            tokio::spawn(async move { client.issue_license(plan, "alice", None).await.unwrap() })
        })
        .collect();
    let reader = &clients[0];
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut rounds = 0;
    loop {
        let page = ledger_page(reader, cursor.clone(), 5).await;
        seen.extend(page.entries.iter().map(|e| e.entry_id));
        cursor = Some(page.next_cursor);
        let done = writers.iter().all(|w| w.is_finished());
        if done && !page.has_more && seen.len() >= 62 {
            break;
        }
        rounds += 1;
        assert!(rounds < 100_000, "the feed never caught up");
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "an entry was handed out twice");
    let total = app.count_rows("SELECT COUNT(*) FROM ledger_entries").await;
    assert_eq!(seen.len() as i64, total, "the feed skipped an entry");
    replica.stop().await;
}

async fn a_request_is_looked_up_by_its_key(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 3).await;
    let client = partner(&app, &r);
    let key = "order/42%done?yes#1";
    let issued = client
        .issue_license("pro", "alice", Some(key))
        .await
        .unwrap();
    let before = state(&app).await;
    let found = client.request_status(key).await.unwrap();
    assert_eq!(found.idempotency_key, key);
    assert_eq!(found.status, "succeeded");
    assert_eq!(found.operation.as_deref(), Some("license"));
    assert_eq!(
        found.license_id.as_deref(),
        Some(issued.value.license_id.as_str())
    );
    assert_eq!(found.batch_id, None);
    assert_eq!(found.created_utc, issued.value.created_utc);
    // By hand, percent-encoded in the path.
    let (status, body) = get(
        &app,
        &r,
        "/v1/billing/partner/requests/order%2F42%25done%3Fyes%231",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["idempotencyKey"], key);

    // A promo batch: its ids, never a code.
    let batch = client
        .generate_promo_batch("max", 2, Some("batch-key-0001"))
        .await
        .unwrap();
    let (status, body) = get(&app, &r, "/v1/billing/partner/requests/batch-key-0001").await;
    assert_eq!(status, 200);
    assert_eq!(body["operation"], "promo_batch");
    assert_eq!(body["batchId"], batch.value.batch_id.as_str());
    assert_eq!(body["orderPublicId"], batch.value.order_public_id.as_str());
    assert_eq!(body["licenseId"], Value::Null);
    for code in &batch.value.codes {
        assert!(!body.to_string().contains(&code.code));
    }

    // A refused request left no record: 402 first, then the lookup finds nothing.
    let refused = client
        .generate_promo_batch("pro", 3, Some("too-big-0001"))
        .await;
    assert!(matches!(refused, Err(Error::InsufficientQuota { .. })));
    let after_writes = state(&app).await;
    // A key no write could carry (too short, too long) has no record either: the same 404,
    // not a validation error, so the lookup answers one question whatever it is asked.
    let too_long = "k".repeat(129);
    for missing in [
        "too-big-0001",
        "never-sent-0001",
        "short",
        too_long.as_str(),
    ] {
        let (status, body) =
            get(&app, &r, &format!("/v1/billing/partner/requests/{missing}")).await;
        assert_eq!(status, 404, "{missing}");
        assert_eq!(body["code"], "Reseller.RequestNotFound");
    }
    assert!(matches!(
        client.request_status("never-sent-0001").await,
        Err(Error::RequestNotFound { .. })
    ));
    assert_eq!(state(&app).await, after_writes);
    assert_ne!(before, after_writes);
}

async fn resellers_see_only_their_own_records(db: Db) {
    let app = TestApp::spawn(&db).await;
    let a = setup(&app, 10).await;
    let b = app.reseller().await;
    let ca = partner(&app, &a);
    let cb = partner(&app, &b);
    let license = ca
        .issue_license("pro", "alice", Some("shared-key-0001"))
        .await
        .unwrap()
        .value;
    let (batch_id, _) = app.promo_batch(&a, "pro", 2).await;
    ca.issue_license("pro", "bob", None).await.unwrap();

    assert!(
        cb.list_licenses(&LicenseQuery::default())
            .await
            .unwrap()
            .licenses
            .is_empty()
    );
    assert!(
        cb.list_promo_batches(&PageQuery::default())
            .await
            .unwrap()
            .promo_batches
            .is_empty()
    );
    assert!(
        cb.ledger_page(&LedgerQuery::default())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    assert!(matches!(
        cb.license(&license.license_id).await,
        Err(Error::LicenseNotFound { .. })
    ));
    assert!(matches!(
        cb.request_status("shared-key-0001").await,
        Err(Error::RequestNotFound { .. })
    ));
    // A's cursors are no use to B: refused, never a page of A's data.
    let page = ca
        .list_licenses(&LicenseQuery {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let a_cursor = page.next_cursor.unwrap();
    let ledger_cursor = ca
        .ledger_page(&LedgerQuery::default())
        .await
        .unwrap()
        .next_cursor;
    for (path, cursor) in [
        ("/v1/billing/partner/licenses", &a_cursor),
        ("/v1/billing/partner/ledger", &ledger_cursor),
    ] {
        assert_invalid(
            "foreign cursor",
            &get(&app, &b, &format!("{path}?cursor={cursor}")).await,
            "cursor",
        );
    }
    // A cursor tells nothing: its position (row and transaction ids, numbered across every
    // account) is encrypted, and the same position gives the same cursor.
    let again = ca
        .list_licenses(&LicenseQuery {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.next_cursor.as_ref(), Some(&a_cursor));
    for cursor in [&a_cursor, &ledger_cursor] {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor)
            .expect("base64url");
        let text = String::from_utf8_lossy(&bytes);
        for tag in ["lic.", "led."] {
            assert!(!text.contains(tag), "{cursor}: {text}");
        }
    }
    // Nor does an entry's id: ids are numbered across every account, so B's first entry
    // would tell how many A made before it; its public id tells nothing.
    app.credit(&b, "pro", 1).await;
    app.ledger_feed_settled().await;
    let entries = cb
        .ledger_page(&LedgerQuery::default())
        .await
        .unwrap()
        .entries;
    let row_id = app.count_rows("SELECT MAX(id) FROM ledger_entries").await;
    assert_eq!(entries.len(), 1);
    assert_ne!(entries[0].entry_id, row_id);
    assert!(
        entries[0].entry_id < 1 << 53,
        "a JSON integer every client reads exactly"
    );
    let _ = batch_id;
}

/// A cursor handed out before cursors were encrypted (the position in clear, signed) is
/// still read, so that a reader keeps its place across the upgrade; altered, it is refused.
async fn a_cursor_signed_by_an_earlier_release_is_still_read(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 10).await;
    let client = partner(&app, &r);
    for login in ["alice", "bob", "alice"] {
        client.issue_license("pro", login, None).await.unwrap();
    }
    let first = client
        .list_licenses(&LicenseQuery {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    // The earlier release's cursor after the newest license: `lic.<row id>.` and 20 hex
    // characters of the lookup HMAC over the account, the position and the (empty) filters.
    let account_id = app
        .count_rows(&format!(
            "SELECT id FROM accounts WHERE client_id = '{}'",
            r.client_id
        ))
        .await;
    let row_id = app.count_rows("SELECT MAX(id) FROM licenses").await;
    let payload = format!("lic.{row_id}");
    let mac = partner_billing::crypto::MasterKey::from_file_contents(&app.master_key())
        .unwrap()
        .code_hash(&format!("cursor|{account_id}|{payload}|0:0:"));
    let signed = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{payload}.{}", &mac[..20]))
    };
    let by_new = get(
        &app,
        &r,
        &format!(
            "/v1/billing/partner/licenses?limit=2&cursor={}",
            first.next_cursor.unwrap()
        ),
    )
    .await;
    let by_old = get(
        &app,
        &r,
        &format!("/v1/billing/partner/licenses?limit=2&cursor={signed}"),
    )
    .await;
    assert_eq!(by_old.0, 200, "{}", by_old.1);
    assert_eq!(by_old.1["licenses"], by_new.1["licenses"]);
    assert_eq!(by_old.1["licenses"].as_array().map(Vec::len), Some(2));
    // Altered, or under another filter, it is refused as before.
    let mut altered = signed.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for path in [
        format!("/v1/billing/partner/licenses?cursor={altered}"),
        format!("/v1/billing/partner/licenses?login=alice&cursor={signed}"),
    ] {
        assert_invalid(
            "an altered signed cursor",
            &get(&app, &r, &path).await,
            "cursor",
        );
    }
    // Nor does another account read it: the account is under its MAC.
    let other = app.reseller().await;
    let foreign = format!("/v1/billing/partner/licenses?cursor={signed}");
    assert_invalid(
        "another account's signed cursor",
        &get(&app, &other, &foreign).await,
        "cursor",
    );
}

async fn malformed_parameters_are_refused_and_change_nothing(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = setup(&app, 10).await;
    let client = partner(&app, &r);
    for _ in 0..3 {
        client.issue_license("pro", "alice", None).await.unwrap();
    }
    app.promo_batch(&r, "pro", 1).await;
    let licenses_cursor = client
        .list_licenses(&LicenseQuery {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .next_cursor
        .unwrap();
    let ledger_cursor = client
        .ledger_page(&LedgerQuery::default())
        .await
        .unwrap()
        .next_cursor;
    // One character changed: the cursor is refused, not read as another position.
    let mut altered = licenses_cursor.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let before = state(&app).await;
    let lists = [
        "/v1/billing/partner/licenses",
        "/v1/billing/partner/promo-batches",
        "/v1/billing/partner/ledger",
    ];
    for list in lists {
        for limit in ["0", "501", "-1", "abc", "1.5", "99999999999999999999"] {
            assert_invalid(
                &format!("{list} limit={limit}"),
                &get(&app, &r, &format!("{list}?limit={limit}")).await,
                "limit",
            );
        }
        for cursor in ["garbage", "", "%00", &altered] {
            assert_invalid(
                &format!("{list} cursor={cursor}"),
                &get(&app, &r, &format!("{list}?cursor={cursor}")).await,
                "cursor",
            );
        }
        assert_eq!(get(&app, &r, &format!("{list}?limit=500")).await.0, 200);
        assert_eq!(get(&app, &r, &format!("{list}?limit=1")).await.0, 200);
    }
    // A cursor of one list is no cursor of another.
    assert_invalid(
        "ledger cursor on licenses",
        &get(
            &app,
            &r,
            &format!("/v1/billing/partner/licenses?cursor={ledger_cursor}"),
        )
        .await,
        "cursor",
    );
    assert_invalid(
        "licenses cursor on ledger",
        &get(
            &app,
            &r,
            &format!("/v1/billing/partner/ledger?cursor={licenses_cursor}"),
        )
        .await,
        "cursor",
    );
    assert_invalid(
        "plan",
        &get(
            &app,
            &r,
            "/v1/billing/partner/licenses?planSlug=Not%20A%20Slug",
        )
        .await,
        "planSlug",
    );
    assert_invalid(
        "login",
        &get(&app, &r, "/v1/billing/partner/licenses?login=a%01b").await,
        "login",
    );
    assert_invalid(
        "product",
        &get(&app, &r, "/v1/billing/partner/ledger?productSlug=BAD").await,
        "productSlug",
    );
    // The SDK refuses a limit out of range before sending.
    assert!(matches!(
        client
            .list_licenses(&LicenseQuery {
                limit: Some(501),
                ..Default::default()
            })
            .await,
        Err(Error::InvalidInput { field: "limit", .. })
    ));
    assert_eq!(state(&app).await, before, "a read changed something");
    let _ = json!(null);
}
