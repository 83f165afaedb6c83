//! Every request reaches the rows it needs by index, whatever the planner's statistics say.
//!
//! A billing database grows by millions of rows, and PostgreSQL plans each statement from its
//! statistics; where autovacuum is off (this machine and CI) or behind, a table's statistics are
//! missing or stale, and a statement planned as a whole-table scan gets slower with every row.
//! So on a PostgreSQL database that was never analyzed (autovacuum off on every table), with
//! thousands of rows in the tables that grow with history, the scenario runs every kind of
//! request a reseller, the product's backend and the panel make (writes, replays, refusals,
//! reads, lists and their second pages, revocation, voids, the CSV), each often enough to be
//! planned generically too, and then reads PostgreSQL's own count of sequential scans: none on
//! a table that grows.
//!
//! PostgreSQL only: SQLite has no statistics unless `ANALYZE` runs (the service never runs it)
//! and plans by rules that take a matching index; PostgreSQL is where a plan can turn.

use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Connection;

use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::limits::{
    PANEL_LEDGER_PAGE_SIZE, PANEL_LICENSES_PAGE_SIZE, WEBHOOK_DELIVERIES_LISTED,
};
use partner_billing::quota;
use partner_billing_tests::product::REDEMPTIONS;
use partner_billing_tests::{Db, Reseller, TestApp};

/// The tables that grow with every license, code, request and change.
/// (`abuse_attempts` is not one: its counters are purged as their windows pass.)
const GROWING_TABLES: [&str; 14] = [
    "licenses",
    "ledger_entries",
    "idempotency_records",
    "operator_idempotency_records",
    "subscriptions",
    "users",
    "promo_batches",
    "promo_codes",
    "promo_recovery_payloads",
    "promo_redemptions",
    "redemption_attempts",
    "audit_entries",
    "webhook_events",
    "webhook_messages",
];

/// Licenses issued before the measured requests (each with its ledger entry, idempotency
/// record and subscription period).
const HISTORY_LICENSES: usize = 3000;

/// Registered logins.
const LOGINS: usize = 2000;

const LICENSES: &str = "/v1/billing/partner/licenses";
const ACTIVITY: &str = "/v1/billing/resellers/me/activity";
const LEDGER: &str = "/v1/billing/partner/ledger";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_request_scans_a_growing_table_on_a_database_never_analyzed() {
    let Some(db) = Db::postgres() else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    let mut admin = sqlx::PgConnection::connect(&app.database_url)
        .await
        .expect("admin connection");
    never_analyze(&mut admin).await;
    let (r, token) = grow_history(&app).await;

    let app = counts_from_zero(app, &mut admin).await;
    every_kind_of_request(&app, &r, &token).await;
    // Kept to the end: the database goes when it is dropped.
    let _closed = app.close().await;
    wait_for_no_other_connection(&mut admin).await;

    let scanned: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname::text, seq_scan FROM pg_stat_user_tables \
         WHERE relname = ANY($1) AND seq_scan > 0 ORDER BY relname",
    )
    .bind(&GROWING_TABLES[..])
    .fetch_all(&mut admin)
    .await
    .expect("scan counts");
    let analyzed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_user_tables WHERE relname = ANY($1) \
         AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)",
    )
    .bind(&GROWING_TABLES[..])
    .fetch_one(&mut admin)
    .await
    .expect("analyze times");
    assert_eq!(analyzed, 0, "the tables were never analyzed");
    assert!(
        scanned.is_empty(),
        "sequential scans of growing tables (table, scans): {scanned:?}"
    );
}

/// Autovacuum off on every table: the planner keeps the statistics the growth leaves (none).
async fn never_analyze(admin: &mut sqlx::PgConnection) {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
    )
    .fetch_all(&mut *admin)
    .await
    .expect("tables");
    for table in tables {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE \"{table}\" SET (autovacuum_enabled = off)"
        )))
        .execute(&mut *admin)
        .await
        .expect("autovacuum off");
    }
}

/// The app again, with PostgreSQL's counts from zero: its connections so far ended first, so
/// their counts were written before the reset.
async fn counts_from_zero(app: TestApp, admin: &mut sqlx::PgConnection) -> TestApp {
    let closed = app.close().await;
    wait_for_no_other_connection(admin).await;
    // This connection's own counts (the rows it wrote) reach the statistics at most once a
    // second: sent now, before the reset, not after it.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *admin)
        .await
        .expect("flush statistics");
    sqlx::query("SELECT pg_stat_reset()")
        .execute(&mut *admin)
        .await
        .expect("reset statistics");
    TestApp::reopen(closed).await
}

/// PostgreSQL writes a connection's counts when it ends: wait until every connection to the
/// database but this one has ended.
async fn wait_for_no_other_connection(admin: &mut sqlx::PgConnection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut *admin)
        .await
        .expect("connections");
        if others == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{others} connections stayed open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reseller with thousands of licenses over thousands of logins, promo batches with
/// redemptions, an operator token; returns the reseller and the token.
async fn grow_history(app: &TestApp) -> (Reseller, String) {
    app.plan_with_days("pro", Some(30)).await;
    app.plan("life").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 1_000_000).await;
    app.credit(&r, "life", 1_000).await;
    let token = app.operator_token("product").await;
    let mut users = tokio::task::JoinSet::new();
    for task in 0..8 {
        let http = app.http.clone();
        let url = app.url("/v1/billing/product/users");
        let token = token.clone();
        users.spawn(async move {
            for i in (task..LOGINS).step_by(8) {
                let response = http
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({ "login": format!("user-{i}") }))
                    .send()
                    .await
                    .expect("register");
                assert!(response.status().is_success(), "{}", response.status());
            }
        });
    }
    while let Some(done) = users.join_next().await {
        done.expect("registering task");
    }
    let mut issuers = tokio::task::JoinSet::new();
    for task in 0..16 {
        let request = partner_request(app, &r);
        issuers.spawn(async move {
            for i in (task..HISTORY_LICENSES).step_by(16) {
                let body = json!({
                    "planSlug": "pro",
                    "login": format!("user-{}", i % LOGINS),
                    "idempotencyKey": format!("history-{i}"),
                });
                let response = request(Method::POST, LICENSES)
                    .json(&body)
                    .send()
                    .await
                    .expect("issue");
                assert_eq!(response.status(), 200, "history license {i}");
            }
        });
    }
    while let Some(done) = issuers.join_next().await {
        done.expect("issuing task");
    }
    for _ in 0..3 {
        let (_, codes) = app.promo_batch(&r, "pro", 1000).await;
        for (i, code) in codes.iter().take(20).enumerate() {
            let key = format!("history-redeem-{}", uuid::Uuid::new_v4().simple());
            let response = app.redeem(&token, code, &format!("user-{i}"), &key).await;
            assert_eq!(response.status(), 200, "history redemption");
        }
    }
    (r, token)
}

/// A builder of requests with the reseller's key, for tasks of their own.
fn partner_request(
    app: &TestApp,
    r: &Reseller,
) -> impl Fn(Method, &str) -> reqwest::RequestBuilder + Send + 'static {
    let (http, base, r) = (app.http.clone(), app.base_url.clone(), r.clone());
    move |method, path| partner_billing_tests::partner_request(&http, &base, method, path, &r)
}

async fn json_of(request: reqwest::RequestBuilder, status: u16) -> Value {
    let response = request.send().await.expect("request");
    let (url, answered) = (response.url().to_string(), response.status());
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(answered, status, "{url}: {body}");
    body
}

/// Each kind of request, ten times where a plan could turn generic (PostgreSQL plans a
/// prepared statement generically after five runs).
async fn every_kind_of_request(app: &TestApp, r: &Reseller, token: &str) {
    let partner = partner_request(app, r);
    // Licenses: fresh ones concurrently (groups), on logins with periods to stack on; replays;
    // a key reused for another request; an unknown login; a perpetual plan held twice.
    let mut fresh = tokio::task::JoinSet::new();
    for i in 0..40 {
        let request = partner(Method::POST, LICENSES).json(&json!({
            "planSlug": "pro",
            "login": format!("user-{}", i * 7 % LOGINS),
            "idempotencyKey": format!("measured-{i}"),
        }));
        fresh.spawn(async move { json_of(request, 200).await });
    }
    let mut license_ids = Vec::new();
    while let Some(license) = fresh.join_next().await {
        license_ids.push(
            license.expect("license")["licenseId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    for i in 0..10 {
        let replay = json!({"planSlug": "pro", "login": format!("user-{}", i * 7 % LOGINS),
            "idempotencyKey": format!("measured-{i}")});
        json_of(partner(Method::POST, LICENSES).json(&replay), 200).await;
        let reused = json!({"planSlug": "pro", "login": "user-1999",
            "idempotencyKey": format!("measured-{i}")});
        json_of(partner(Method::POST, LICENSES).json(&reused), 422).await;
        let unknown = json!({"planSlug": "pro", "login": format!("nobody-{i}"),
            "idempotencyKey": format!("unknown-{i}")});
        json_of(partner(Method::POST, LICENSES).json(&unknown), 422).await;
        let life = json!({"planSlug": "life", "login": "user-5",
            "idempotencyKey": format!("life-key-{i}")});
        let status = if i == 0 { 200 } else { 409 };
        json_of(partner(Method::POST, LICENSES).json(&life), status).await;
        json_of(partner(Method::GET, "/v1/billing/partner/balances"), 200).await;
    }

    // Promo batches, their replay, redemptions and their replays, an unknown code.
    let mut codes = Vec::new();
    let mut batch_ids = Vec::new();
    for i in 0..6 {
        let body =
            json!({"planSlug": "pro", "count": 10, "idempotencyKey": format!("batch-key-{i}")});
        let batch = json_of(
            partner(Method::POST, "/v1/billing/partner/promo-batches").json(&body),
            200,
        )
        .await;
        json_of(
            partner(Method::POST, "/v1/billing/partner/promo-batches").json(&body),
            200,
        )
        .await;
        batch_ids.push(batch["batchId"].as_str().unwrap().to_owned());
        codes.extend(
            batch["codes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["code"].as_str().unwrap().to_owned()),
        );
    }
    for (i, code) in codes.iter().take(10).enumerate() {
        let key = format!("measured-redeem-{i}");
        let login = format!("user-{}", 100 + i);
        assert_eq!(app.redeem(token, code, &login, &key).await.status(), 200);
        assert_eq!(app.redeem(token, code, &login, &key).await.status(), 200);
        let unknown = app
            .redeem(
                token,
                "AAAA-BBBB-CCCC-DDDD",
                &login,
                &format!("nope-key-{i}"),
            )
            .await;
        assert_eq!(unknown.status(), 404);
    }

    // Reads: lists and their second pages, filters, one license, the ledger feed, request
    // lookups, entitlements and a login's licenses.
    for (i, license_id) in license_ids.iter().enumerate().take(10) {
        let page = json_of(
            partner(Method::GET, "/v1/billing/partner/licenses?limit=50"),
            200,
        )
        .await;
        let cursor = page["nextCursor"].as_str().unwrap().to_owned();
        json_of(
            partner(Method::GET, &format!("{LICENSES}?limit=50&cursor={cursor}")),
            200,
        )
        .await;
        let login = format!("user-{}", i * 7 % LOGINS);
        json_of(
            partner(
                Method::GET,
                &format!("{LICENSES}?login={login}&planSlug=pro"),
            ),
            200,
        )
        .await;
        json_of(
            partner(Method::GET, &format!("{LICENSES}/{license_id}")),
            200,
        )
        .await;
        let feed = json_of(
            partner(Method::GET, "/v1/billing/partner/ledger?limit=100"),
            200,
        )
        .await;
        let cursor = feed["nextCursor"].as_str().unwrap().to_owned();
        json_of(
            partner(
                Method::GET,
                &format!("/v1/billing/partner/ledger?limit=100&cursor={cursor}"),
            ),
            200,
        )
        .await;
        json_of(
            partner(Method::GET, "/v1/billing/partner/promo-batches"),
            200,
        )
        .await;
        json_of(
            partner(
                Method::GET,
                &format!("/v1/billing/partner/requests/measured-{i}"),
            ),
            200,
        )
        .await;
        json_of(
            app.product(
                Method::GET,
                &format!("/v1/billing/product/users/{login}/entitlements"),
                token,
            ),
            200,
        )
        .await;
        json_of(
            app.product(
                Method::GET,
                &format!("/v1/billing/product/users/{login}/licenses"),
                token,
            ),
            200,
        )
        .await;
    }
    let response = app
        .product(Method::POST, REDEMPTIONS, token)
        .json(&json!({"code": codes[20], "login": "user-1", "idempotencyKey": "last-redeem"}))
        .send()
        .await
        .expect("redeem");
    assert_eq!(response.status(), 200);

    // Revocations, a void of a batch and of listed codes.
    for license_id in license_ids.iter().take(6) {
        json_of(
            partner(Method::DELETE, &format!("{LICENSES}/{license_id}")),
            200,
        )
        .await;
    }
    for batch_id in batch_ids.iter().take(3) {
        json_of(
            partner(
                Method::POST,
                &format!("/v1/billing/partner/promo-batches/{batch_id}/void"),
            ),
            200,
        )
        .await;
    }
    json_of(
        partner(Method::POST, "/v1/billing/partner/promo-codes/void")
            .json(&json!({"codes": codes[50..55]})),
        200,
    )
    .await;

    // The panel: overview (with the usage chart), ledger and licenses with their next pages,
    // batches, activity, the CSV.
    let cookie = panel_cookie(app, r).await;
    for _ in 0..6 {
        for path in [
            "/panel",
            "/panel/ledger",
            "/panel/licenses",
            "/panel/licenses?login=user-7",
            "/panel/promo-batches",
            "/panel/activity",
        ] {
            let page = panel_get(app, &cookie, path).await;
            if let Some(older) = older_link(&page) {
                panel_get(app, &cookie, &older).await;
            }
        }
    }
    let csv = panel_get(app, &cookie, "/panel/ledger.csv").await;
    assert!(
        csv.lines().count() > HISTORY_LICENSES,
        "the CSV has every entry"
    );
}

async fn panel_cookie(app: &TestApp, r: &Reseller) -> String {
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(app.url("/panel/login"))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[
            ("client_id", r.client_id.as_str()),
            ("password", &r.password),
        ])
        .send()
        .await
        .expect("sign in");
    assert_eq!(response.status(), 303);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn panel_get(app: &TestApp, cookie: &str, path: &str) -> String {
    let response = app
        .http
        .get(app.url(path))
        .header("Cookie", cookie)
        .send()
        .await
        .expect("panel page");
    assert_eq!(response.status(), 200, "{path}");
    response.text().await.expect("page")
}

/// The "Older" link of a panel page (`rel="next"`), unescaped.
fn older_link(body: &str) -> Option<String> {
    link(body, "next")
}

/// The link of a panel page to the page `rel` of it (`next`: older, `prev`: newer), unescaped.
fn link(body: &str, rel: &str) -> Option<String> {
    let end = body.find(&format!("rel=\"{rel}\""))?;
    let start = body[..end].rfind("href=\"")? + "href=\"".len();
    Some(
        body[start..end]
            .trim_end()
            .trim_end_matches('"')
            .replace("&amp;", "&")
            .replace("&#38;", "&"),
    )
}

/// Rows of one large account, written in bulk between older and newer rows of another
/// account: most rows are the large account's, as the planner's statistics then say.
const LARGE_ACCOUNT_ROWS: i64 = 20_000;
const OLDER_FOREIGN_ROWS: i64 = 5_000;
const NEWER_FOREIGN_ROWS: i64 = 10_000;

/// A large account's lists start at its own rows, whatever other accounts wrote before or
/// since, and each page at its cursor. Once statistics showed one account holding most rows,
/// PostgreSQL read "newest first" off the primary key, filtered by account, and stepped over
/// every newer row of the others before it reached the account's (oldest first, every older
/// one): a quiet large reseller's first page grew with everyone else's activity (22 ms for
/// 200 000 such rows). The lists are now ordered by the account first (an endpoint's
/// deliveries by the endpoint), an order only the account's own index gives
/// (`dialect::owned_by`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_accounts_first_pages_step_over_no_other_accounts_rows() {
    let Some(db) = Db::postgres() else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let large = app.reseller().await;
    let other = app.reseller().await;
    let mut admin = sqlx::PgConnection::connect(&app.database_url)
        .await
        .expect("admin connection");
    let layout = [
        (&other, OLDER_FOREIGN_ROWS, "older"),
        (&large, LARGE_ACCOUNT_ROWS, "large"),
        (&other, NEWER_FOREIGN_ROWS, "newer"),
    ];
    for (time, (reseller, rows, part)) in (1_i64..).zip(layout) {
        sqlx::query(
            "INSERT INTO audit_entries (account_id, action, actor, subjects, details, created_utc) \
             SELECT a.id, 'license.revoke', 'test', '{}', '{}', $3 * 1000000 + g \
             FROM accounts a, generate_series(1, $2) AS g WHERE a.client_id = $1",
        )
        .bind(&reseller.client_id)
        .bind(rows)
        .bind(time)
        .execute(&mut admin)
        .await
        .expect("audit rows");
        sqlx::query(
            "INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, \
             reason, reference, created_utc) \
             SELECT a.id, p.id, 'license', -1, 0, 'test', NULL, md5($3 || g), 0 \
             FROM accounts a, plans p, generate_series(1, $2) AS g \
             WHERE a.client_id = $1 AND p.slug = 'pro'",
        )
        .bind(&reseller.client_id)
        .bind(rows)
        .bind(part)
        .execute(&mut admin)
        .await
        .expect("ledger rows");
        sqlx::query(
            "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, \
             created_utc, starts_utc, expires_utc) \
             SELECT md5($3 || g), u.id, p.id, a.id, 'direct', 0, 0, NULL \
             FROM accounts a, plans p, users u, generate_series(1, $2) AS g \
             WHERE a.client_id = $1 AND p.slug = 'pro' AND u.login = 'alice'",
        )
        .bind(&reseller.client_id)
        .bind(rows)
        .bind(part)
        .execute(&mut admin)
        .await
        .expect("license rows");
    }
    let large_endpoint = webhook_attempts_of_two_endpoints(&app, &large, &other, &mut admin).await;
    sqlx::query("ANALYZE")
        .execute(&mut admin)
        .await
        .expect("analyze");

    let app = counts_from_zero(app, &mut admin).await;
    // Each first page several times, so that generic plans get their turn too.
    let cookie = panel_cookie(&app, &large).await;
    let session = app.session(&large.client_id, &large.password).await;
    let partner = partner_request(&app, &large);
    let deliveries =
        format!("/v1/billing/resellers/me/webhook-endpoints/{large_endpoint}/deliveries");
    let client_id = ClientId::parse("clientId", &large.client_id).unwrap();
    for _ in 0..8 {
        for path in [
            LICENSES,
            &format!("{LICENSES}?login=alice"),
            &format!("{LICENSES}?planSlug=pro"),
            "/v1/billing/partner/promo-batches",
        ] {
            json_of(partner(Method::GET, path), 200).await;
        }
        for path in [
            "/panel/ledger",
            "/panel/licenses",
            "/panel/promo-batches",
            "/panel/activity",
        ] {
            panel_get(&app, &cookie, path).await;
        }
        let listed = json_of(
            app.http.get(app.url(&deliveries)).bearer_auth(&session),
            200,
        )
        .await;
        let attempts: Vec<i64> = listed["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .map(|d| d["attempt"].as_i64().expect("attempt"))
            .collect();
        let newest: Vec<i64> = (0..WEBHOOK_DELIVERIES_LISTED as i64)
            .map(|n| LARGE_ACCOUNT_ROWS - n)
            .collect();
        assert_eq!(
            attempts, newest,
            "the endpoint's last attempts, newest first"
        );
    }
    // Every page of the API's licenses and of the account's trail, each page from where the
    // last one ended.
    let licenses = every_item(|path| partner(Method::GET, path), LICENSES, "licenses").await;
    let ids: std::collections::HashSet<_> =
        licenses.iter().map(|l| l["licenseId"].clone()).collect();
    assert_eq!(
        (licenses.len() as i64, ids.len() as i64),
        (LARGE_ACCOUNT_ROWS, LARGE_ACCOUNT_ROWS),
        "every license once"
    );
    let trail = every_item(
        |path| app.http.get(app.url(path)).bearer_auth(&session),
        ACTIVITY,
        "entries",
    )
    .await;
    // `quota ledger`, oldest first, in chunks: its first rows come after the other account's
    // older ones.
    let entries: Vec<_> = quota::ledger(&app.store, &client_id, None)
        .await
        .expect("quota ledger")
        .try_collect()
        .await
        .expect("ledger entries");
    assert_eq!(entries.len() as i64, LARGE_ACCOUNT_ROWS, "the whole ledger");
    let csv = panel_get(&app, &cookie, "/panel/ledger.csv").await;
    assert_eq!(
        csv.lines().count() as i64,
        1 + LARGE_ACCOUNT_ROWS,
        "a header and the whole ledger"
    );
    let _closed = app.close().await;
    wait_for_no_other_connection(&mut admin).await;

    let read: Vec<(String, i64)> = sqlx::query_as(
        "SELECT indexrelname::text, idx_tup_read FROM pg_stat_user_indexes \
         WHERE indexrelname IN ('licenses_pkey', 'ledger_entries_pkey', 'webhook_attempts_pkey', \
         'audit_entries_time') ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("index reads");
    assert_eq!(read.len(), 4, "{read:?}");
    // A stepping list reads the other account's rows at every request: eight first pages
    // read them eight times, a chunked read once per chunk. The bound allows one read of each
    // side's (a chunked read's last chunk, where few rows of the whole table are left beyond
    // its cursor, may be read off the primary key and sorted: the planner's choice, bounded by
    // its estimate), and fails on two of the eight first pages stepping over the newer ones.
    assert!(
        read.iter()
            .all(|(_, tuples)| *tuples < OLDER_FOREIGN_ROWS + NEWER_FOREIGN_ROWS + 3_000),
        "the large account's lists stepped over the other account's rows \
         (index, entries read): {read:?}"
    );
    // Each page starts reading at its cursor: walking a list reads each of the account's index
    // pages about once (the licenses and the trail once, the ledger twice: `quota ledger` and the
    // CSV), not again from the account's first entry at every page.
    let pages_read: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT indexrelname::text, idx_blks_hit + idx_blks_read, \
         pg_relation_size(indexrelid) / current_setting('block_size')::bigint \
         FROM pg_statio_user_indexes \
         WHERE indexrelname IN ('licenses_account_id', 'ledger_entries_account_id', \
         'audit_entries_account_time') ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("index pages read");
    assert_eq!(pages_read.len(), 3, "{pages_read:?}");
    let trail_entries: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_entries e JOIN accounts a ON a.id = e.account_id \
         WHERE a.client_id = $1",
    )
    .bind(&large.client_id)
    .fetch_one(&mut admin)
    .await
    .expect("trail entries");
    assert_eq!(
        trail.len() as i64,
        trail_entries,
        "every entry of the account's trail"
    );
    assert!(
        pages_read.iter().all(|(_, read, size)| read < &(5 * size)),
        "a page read the account's index from its first entry (index, pages read, pages): \
         {pages_read:?}"
    );
}

/// Every item of a list (`items`, the page's member), 500 a page, each page from the last
/// one's cursor.
async fn every_item(
    get: impl Fn(&str) -> reqwest::RequestBuilder,
    list: &str,
    items: &str,
) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = format!("{list}?limit=500");
    loop {
        let page = json_of(get(&path), 200).await;
        all.extend(
            page[items]
                .as_array()
                .expect("a page's items")
                .iter()
                .cloned(),
        );
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("{list}?limit=500&cursor={cursor}"),
            None => return all,
        }
    }
}

/// One webhook endpoint of each account and, written in bulk, as many attempts to the large
/// account's endpoint as it has ledger entries, then the other's newer ones; returns the large
/// account's endpoint id.
async fn webhook_attempts_of_two_endpoints(
    app: &TestApp,
    large: &Reseller,
    other: &Reseller,
    admin: &mut sqlx::PgConnection,
) -> String {
    let mut endpoint_ids = Vec::new();
    for reseller in [large, other] {
        let session = app.session(&reseller.client_id, &reseller.password).await;
        let created = json_of(
            app.http
                .post(app.url("/v1/billing/resellers/me/webhook-endpoints"))
                .bearer_auth(&session)
                .json(&json!({"url": "http://127.0.0.1:9/in", "eventTypes": ["webhook.test"]})),
            201,
        )
        .await;
        endpoint_ids.push(created["webhookEndpointId"].as_str().unwrap().to_owned());
    }
    for (endpoint_id, rows) in endpoint_ids
        .iter()
        .zip([LARGE_ACCOUNT_ROWS, NEWER_FOREIGN_ROWS])
    {
        sqlx::query(
            "WITH e AS (SELECT id, account_id FROM webhook_endpoints WHERE endpoint_id = $1), \
             ev AS (INSERT INTO webhook_events (event_id, account_id, event_type, body, created_utc) \
                    SELECT 'evt_' || $1, account_id, 'webhook.test', '{}', 0 FROM e RETURNING id), \
             m AS (INSERT INTO webhook_messages (event_row_id, endpoint_row_id, status, attempts) \
                   SELECT ev.id, e.id, 'failed', $2 FROM ev, e RETURNING id, endpoint_row_id) \
             INSERT INTO webhook_attempts (message_row_id, endpoint_row_id, attempt, status_code, \
                    error, attempted_utc, next_attempt_utc) \
             SELECT m.id, m.endpoint_row_id, g, 500, NULL, g, NULL \
             FROM m, generate_series(1, $2) AS g",
        )
        .bind(endpoint_id)
        .bind(rows)
        .execute(&mut *admin)
        .await
        .expect("attempt rows");
    }
    endpoint_ids.swap_remove(0)
}

/// A filtered list reads the filter's own index: a login (or a product) with a few licenses
/// (ledger entries), on an account where another login (product) holds every other one, is
/// found without stepping over the others, on custom and generic plans, first page and from a
/// cursor, in the API, in the panel (whose pages also ask whether a newer page exists) and in
/// the operator's ledger export.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rare_logins_and_products_rows_are_read_by_their_own_index() {
    let Some(db) = Db::postgres() else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan("basic").await;
    app.user("alice").await;
    app.user("bob").await;
    let large = app.reseller().await;
    for plan in ["pro", "basic"] {
        app.credit(&large, plan, 1).await;
    }
    let mut admin = sqlx::PgConnection::connect(&app.database_url)
        .await
        .expect("admin connection");
    never_analyze(&mut admin).await;
    // Bob's and the basic plan's licenses first (oldest), then alice's on pro; the basic
    // plan's ledger entries (after its credit) before and after pro's.
    for (login, plan, rows) in [
        ("bob", "pro", RARE_ROWS),
        ("alice", "basic", RARE_ROWS),
        ("alice", "pro", LARGE_ACCOUNT_ROWS),
    ] {
        sqlx::query(
            "INSERT INTO licenses (license_id, user_id, plan_id, account_id, source, \
             created_utc, starts_utc, expires_utc) \
             SELECT md5($2 || $3 || g), u.id, p.id, a.id, 'direct', 0, 0, NULL \
             FROM accounts a, plans p, users u, generate_series(1, $4) AS g \
             WHERE a.client_id = $1 AND p.slug = $3 AND u.login = $2",
        )
        .bind(&large.client_id)
        .bind(login)
        .bind(plan)
        .bind(rows)
        .execute(&mut admin)
        .await
        .expect("license rows");
    }
    for (plan, rows) in [
        ("basic", RARE_ROWS / 2),
        ("pro", LARGE_ACCOUNT_ROWS),
        ("basic", RARE_ROWS / 2),
    ] {
        sqlx::query(
            "INSERT INTO ledger_entries (account_id, plan_id, kind, delta, balance_after, actor, \
             reason, reference, created_utc) \
             SELECT a.id, p.id, 'license', -1, 0, 'test', NULL, md5($2 || g), 0 \
             FROM accounts a, plans p, generate_series(1, $3) AS g \
             WHERE a.client_id = $1 AND p.slug = $2",
        )
        .bind(&large.client_id)
        .bind(plan)
        .bind(rows)
        .execute(&mut admin)
        .await
        .expect("ledger rows");
    }
    let cookie = panel_cookie(&app, &large).await;
    // The feed hands out an entry once every transaction older than its writer's has ended
    // (other tests' too, on the same server): read before the statistics are reset. Not
    // `TestApp::ledger_feed_settled`, which counts the ledger's entries (by an index, when the
    // planner picks one) and could add 40 000 entries read per call to what this test measures.
    let last_writer: i64 = sqlx::query_scalar("SELECT max(commit_xact) FROM ledger_entries")
        .fetch_one(&mut admin)
        .await
        .expect("last writer");
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut admin)
        .await
        .expect("database name");
    let mut app = counts_from_zero(app, &mut admin).await;
    // On the database never analyzed, then analyzed; each time with each kind of plan: the
    // plans for the values a request binds (a connection's first five runs of a statement),
    // and the generic plan that may follow for good.
    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE")
                .execute(&mut admin)
                .await
                .expect("analyze");
        }
        for plans in ["force_custom_plan", "force_generic_plan"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER DATABASE \"{database}\" SET plan_cache_mode = {plans}"
            )))
            .execute(&mut admin)
            .await
            .expect("plan cache mode");
            app = TestApp::reopen(app.close().await).await;
            wait_for_transactions_before(&mut admin, last_writer).await;
            read_rare_and_large_lists(&app, &large, &cookie).await;
        }
    }
    let _closed = app.close().await;
    wait_for_no_other_connection(&mut admin).await;
    let read: Vec<(String, i64)> = sqlx::query_as(
        "SELECT indexrelname::text, idx_tup_read FROM pg_stat_user_indexes \
         WHERE relname IN ('licenses', 'ledger_entries') AND idx_tup_read > 0 ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("index reads");
    let total: i64 = read.iter().map(|(_, tuples)| tuples).sum();
    // 112 API pages of at most 5 rows, 32 panel pages of at most 101 (and a probe each) and 8
    // exports of 7 entries: a few thousand entries, not the account's 20 000 per page.
    assert!(
        total < 6_000,
        "a filtered list stepped over the other rows (index, entries read): {read:?}"
    );
}

/// Waits until every transaction that began before `xact` ended, so that the ledger feed
/// hands out what it wrote.
async fn wait_for_transactions_before(admin: &mut sqlx::PgConnection, xact: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let settled: bool =
            sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint > $1")
                .bind(xact)
                .fetch_one(&mut *admin)
                .await
                .expect("oldest transaction");
        if settled {
            return;
        }
        assert!(Instant::now() < deadline, "a transaction stayed open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first two pages of 4 of a list read with `filter`, the second from the first's cursor.
async fn first_two_pages(
    partner: &impl Fn(Method, &str) -> reqwest::RequestBuilder,
    list: &str,
    filter: &str,
) -> (Value, Value) {
    let first = json_of(
        partner(Method::GET, &format!("{list}?{filter}&limit=4")),
        200,
    )
    .await;
    let cursor = first["nextCursor"].as_str().expect("a second page");
    let second = json_of(
        partner(
            Method::GET,
            &format!("{list}?{filter}&limit=4&cursor={cursor}"),
        ),
        200,
    )
    .await;
    (first, second)
}

/// The filtered lists of the rare and the large login and product, in the API and the panel.
async fn read_rare_and_large_lists(app: &TestApp, large: &Reseller, cookie: &str) {
    let partner = partner_request(app, large);
    // Twice, so that a statement runs again on a connection that prepared it; pages of 4 so
    // that the second page starts at a cursor.
    for _ in 0..2 {
        for (list, filter, member) in [
            (LICENSES, "login=bob", "licenses"),
            (LICENSES, "planSlug=basic", "licenses"),
            (LICENSES, "login=bob&planSlug=pro", "licenses"),
            (LEDGER, "productSlug=basic", "entries"),
        ] {
            let (first, second) = first_two_pages(&partner, list, filter).await;
            let found =
                first[member].as_array().unwrap().len() + second[member].as_array().unwrap().len();
            // The ledger's product also has its credit's entry.
            let expected = RARE_ROWS + i64::from(list == LEDGER);
            assert_eq!(found as i64, expected, "{filter}: every item once");
            if list == LEDGER {
                assert_eq!(second["hasMore"], json!(false), "{filter}: two pages");
            } else {
                assert!(second["nextCursor"].is_null(), "{filter}: two pages");
            }
        }
        // The large login's, plan's and product's first two pages (never all of them).
        for (list, filter, member) in [
            (LICENSES, "login=alice", "licenses"),
            (LICENSES, "planSlug=pro", "licenses"),
            (LEDGER, "productSlug=pro", "entries"),
        ] {
            let (first, second) = first_two_pages(&partner, list, filter).await;
            for page in [first, second] {
                assert_eq!(page[member].as_array().unwrap().len(), 4, "{filter}");
            }
        }
        // The operator's export of the rare product (`admin quota ledger --plan`), in
        // chunks from one snapshot, oldest first.
        let client_id = ClientId::parse("clientId", &large.client_id).unwrap();
        let basic = PlanSlug::parse("product", "basic").unwrap();
        let exported: Vec<_> = quota::ledger(&app.store, &client_id, Some(&basic))
            .await
            .expect("quota ledger")
            .try_collect()
            .await
            .expect("ledger entries");
        assert_eq!(
            exported
                .iter()
                .filter(|entry| entry.product_slug == "basic")
                .count() as i64,
            RARE_ROWS + 1,
            "the product's export: its credit and its entries, nothing else"
        );
        assert_eq!(exported.len() as i64, RARE_ROWS + 1, "only the product's");
        // The panel's pages, of the rare login and product and of the large ones (whose
        // first page, and the probe for a newer one, must not sort them all either).
        for (path, rows) in [
            ("/panel/licenses?login=bob", RARE_ROWS),
            ("/panel/licenses?login=alice", PANEL_LICENSES_PAGE_SIZE),
            ("/panel/ledger?product=basic", RARE_ROWS + 1),
            ("/panel/ledger?product=pro", PANEL_LEDGER_PAGE_SIZE),
        ] {
            let page = panel_get(app, cookie, path).await;
            // A header row, then one per item.
            assert_eq!(page.matches("<tr").count() as i64 - 1, rows, "{path}");
        }
    }
    // Back from the large login's second page: its "Newer" page (read forwards from the
    // cursor, then asked for an older one) is the first page again, row for row.
    let first = panel_get(app, cookie, "/panel/licenses?login=alice").await;
    // Bob, registered after alice, has licenses too: none of them is "newer" than hers.
    assert_eq!(
        link(&first, "prev"),
        None,
        "the first page has no newer one"
    );
    let older = older_link(&first).expect("an older page");
    let second = panel_get(app, cookie, &older).await;
    let newer = link(&second, "prev").expect("a newer page");
    let again = panel_get(app, cookie, &newer).await;
    // Its licenses, by id (a page reached by a cursor also carries it in its forms).
    let table = |body: &str| -> Vec<String> {
        body.split("<code id=\"license-")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(table(&first).len() as i64, PANEL_LICENSES_PAGE_SIZE);
    assert_eq!(
        table(&again),
        table(&first),
        "the newer page of the second is the first"
    );
    assert_ne!(
        table(&second),
        table(&first),
        "the second page is another page"
    );
}

/// The licenses of the rare login and of the rare plan.
const RARE_ROWS: i64 = 6;
