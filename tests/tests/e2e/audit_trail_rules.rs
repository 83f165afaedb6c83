//! The audit trail's rules: a change whose transaction fails leaves no entry (and no entry is
//! without its change); refused input changes nothing and leaves no entry; pages by keyset
//! never repeat or skip; the table refuses UPDATE and DELETE; licenses add no entry.

use partner_billing::audit_log::{self, AuditPage};
use partner_billing::domain::ClientId;
use partner_billing::store::FaultPoint;
use partner_billing_tests::{Db, TestApp, both_databases};
use serde_json::{Value, json};

use crate::audit_trail::{actions, activity, all_entries};
use crate::panel::{between, get, sign_in};

both_databases!(
    a_change_whose_transaction_fails_leaves_no_entry,
    refused_input_changes_nothing_and_leaves_no_entry,
    activity_pages_by_keyset_without_repeats_or_gaps,
    the_operators_log_pages_by_keyset_without_repeats_or_gaps,
    a_trail_cursor_is_read_only_as_it_was_given,
    the_activity_page_links_older_and_newer_pages_by_cursor,
    the_trail_refuses_update_and_delete,
    licenses_add_no_entry
);

async fn a_change_whose_transaction_fails_leaves_no_entry(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let before = all_entries(&app, &token).await.len();
    app.store.inject_fault(FaultPoint::AfterAuditEntry);
    let revoke = app
        .http
        .delete(app.url(&format!(
            "/v1/billing/resellers/me/api-keys/{}",
            r.api_key_id
        )))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 500);
    // Neither the change nor its entry: the key still works and the trail is as it was.
    let listed: Value = app
        .http
        .get(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["apiKeys"][0]["status"], "active");
    let entries = all_entries(&app, &token).await;
    assert_eq!(entries.len(), before);
    assert!(!actions(&entries).contains(&"api_key.revoked"));
    // And every entry has its change: each key named by a creation entry exists.
    for entry in entries.iter().filter(|e| e["action"] == "api_key.created") {
        let id = entry["ids"]["apiKeyId"].as_str().unwrap();
        assert!(listed.to_string().contains(id));
    }
    // The same revocation without the fault: exactly one entry.
    let revoke = app
        .http
        .delete(app.url(&format!(
            "/v1/billing/resellers/me/api-keys/{}",
            r.api_key_id
        )))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 204);
    let entries = all_entries(&app, &token).await;
    assert_eq!(entries.len(), before + 1);
    assert_eq!(entries[0]["action"], "api_key.revoked");
    app.stop().await;
}

async fn refused_input_changes_nothing_and_leaves_no_entry(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    let before = all_entries(&app, &token).await;
    let long_name = "n".repeat(10 * 1024);
    let refused = app
        .http
        .post(app.url("/v1/billing/resellers/me/api-keys"))
        .bearer_auth(&token)
        .json(&json!({"name": long_name}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let unknown = app
        .http
        .delete(app.url("/v1/billing/resellers/me/api-keys/rsk_000000000000000000000000"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let wrong = app
        .http
        .put(app.url("/v1/billing/resellers/me/password"))
        .bearer_auth(&token)
        .json(&json!({"currentPassword": "not it at all", "newPassword": "whatever you like"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400);
    assert_eq!(all_entries(&app, &token).await, before);
    // Bad page parameters are a 400 naming the parameter.
    for (query, field) in [
        ("?limit=0", "limit"),
        ("?limit=501", "limit"),
        ("?cursor=garbage", "cursor"),
    ] {
        let (status, body) = activity(&app, &token, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["code"], "Request.ValidationFailed");
        assert_eq!(body["field"], field, "{body}");
    }
    app.stop().await;
}

async fn activity_pages_by_keyset_without_repeats_or_gaps(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    let token = app.session(&r.client_id, &r.password).await;
    for i in 0..4 {
        let key: Value = app
            .http
            .post(app.url("/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&token)
            .json(&json!({"name": format!("k{i}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = key["apiKeyId"].as_str().unwrap();
        app.http
            .delete(app.url(&format!("/v1/billing/resellers/me/api-keys/{id}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
    }
    let all = all_entries(&app, &token).await;
    assert_eq!(all.len(), 12);
    let mut paged = Vec::new();
    let mut query = "?limit=5".to_owned();
    let mut pages = 0;
    loop {
        let (status, body) = activity(&app, &token, &query).await;
        assert_eq!(status, 200, "{body}");
        paged.extend(body["entries"].as_array().unwrap().iter().cloned());
        pages += 1;
        if pages == 1 {
            // An entry added after the first page does not shift the next ones.
            app.http
                .post(app.url("/v1/billing/resellers/me/api-keys"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
        }
        match body["nextCursor"].as_str() {
            Some(cursor) => query = format!("?limit=5&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, all, "every entry once, in order");
    app.stop().await;
}

/// `admin audit log`, with and without `--client-id`, pages from its cursor: three at a time
/// it returns what one page of 500 does, every entry once, in order, also among entries of the
/// same second (the id orders those) and with another account's entries in between.
async fn the_operators_log_pages_by_keyset_without_repeats_or_gaps(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, other) = (app.reseller().await, app.reseller().await);
    app.plan("pro").await;
    // Each credit is an entry of the operator's log, the two accounts' in turn.
    for reseller in [&r, &other, &r, &other, &r, &other, &r, &r] {
        app.credit(reseller, "pro", 1).await;
    }
    let client_id = ClientId::parse("clientId", &r.client_id).unwrap();
    for client in [Some(&client_id), None] {
        let log = |limit, cursor: Option<String>| {
            let store = app.store.clone();
            async move {
                audit_log::operator_log(&store, client, None, Some(limit), cursor.as_deref())
                    .await
                    .unwrap()
            }
        };
        let AuditPage { entries: all, .. } = log(500, None).await;
        assert!(
            all.len() > 6,
            "{client:?}: three pages or more: {}",
            all.len()
        );
        let mut paged = Vec::new();
        let mut cursor = None;
        loop {
            let page = log(3, cursor).await;
            paged.extend(page.entries);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, all, "{client:?}: every entry once, in order");
    }
    app.stop().await;
}

/// Every text that differs from `cursor` in one character (another base64url character).
fn altered_by_one_character(cursor: &str) -> Vec<String> {
    (0..cursor.len())
        .map(|at| {
            let mut bytes = cursor.as_bytes().to_vec();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            String::from_utf8(bytes).unwrap()
        })
        .collect()
}

/// The trail's cursors are sealed as every list's: one altered by a character, another
/// account's, another list's, or the operator's taken under another filter, is `400` on
/// `cursor` (the operator's `admin audit log`: a refusal naming it), and nothing is read.
async fn a_trail_cursor_is_read_only_as_it_was_given(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r, other) = (app.reseller().await, app.reseller().await);
    app.plan("pro").await;
    for reseller in [&r, &other, &r, &other, &r] {
        app.credit(reseller, "pro", 1).await;
    }
    let token = app.session(&r.client_id, &r.password).await;
    let other_token = app.session(&other.client_id, &other.password).await;
    let (status, first) = activity(&app, &token, "?limit=1").await;
    assert_eq!(status, 200, "{first}");
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let (status, second) = activity(&app, &token, &format!("?limit=1&cursor={cursor}")).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second["entries"], first["entries"], "the next page");
    let refused = |what: &str, (status, body): (u16, Value)| {
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["code"], "Request.ValidationFailed", "{what}: {body}");
        assert_eq!(body["field"], "cursor", "{what}: {body}");
    };
    for altered in altered_by_one_character(&cursor) {
        refused(
            &format!("altered {altered}"),
            activity(&app, &token, &format!("?limit=1&cursor={altered}")).await,
        );
    }
    refused(
        "another account's",
        activity(&app, &other_token, &format!("?limit=1&cursor={cursor}")).await,
    );
    // The ledger feed's cursor, never null: another list's.
    let ledger = app
        .partner(reqwest::Method::GET, "/v1/billing/partner/ledger", &r)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let ledger_cursor = ledger["nextCursor"].as_str().expect("the feed's cursor");
    refused(
        "the ledger's",
        activity(&app, &token, &format!("?cursor={ledger_cursor}")).await,
    );

    // The operator's log: its cursor holds under the client id and the `since` it was read with.
    let client_id = ClientId::parse("clientId", &r.client_id).unwrap();
    let other_id = ClientId::parse("clientId", &other.client_id).unwrap();
    let log = |client: Option<&ClientId>, since: Option<i64>, cursor: Option<&str>| {
        let (store, client, cursor) = (
            app.store.clone(),
            client.cloned(),
            cursor.map(str::to_owned),
        );
        async move {
            audit_log::operator_log(&store, client.as_ref(), since, Some(1), cursor.as_deref())
                .await
        }
    };
    for client in [Some(&client_id), None] {
        let page = log(client, Some(0), None).await.expect("first page");
        let cursor = page.next_cursor.expect("a next page");
        let next = log(client, Some(0), Some(&cursor))
            .await
            .expect("next page");
        assert_ne!(next.entries, page.entries, "{client:?}: the next page");
        let mut elsewhere: Vec<(String, Option<&ClientId>, Option<i64>, String)> = vec![
            ("another since".into(), client, Some(1), cursor.clone()),
            ("no since".into(), client, None, cursor.clone()),
            (
                "another client".into(),
                Some(client.map_or(&client_id, |_| &other_id)),
                Some(0),
                cursor.clone(),
            ),
            (
                "the activity API's".into(),
                client,
                Some(0),
                second["nextCursor"]
                    .as_str()
                    .expect("a third page")
                    .to_owned(),
            ),
        ];
        elsewhere.extend(
            altered_by_one_character(&cursor)
                .into_iter()
                .map(|altered| (format!("altered {altered}"), client, Some(0), altered)),
        );
        for (what, client, since, cursor) in elsewhere {
            let error = log(client, since, Some(&cursor))
                .await
                .expect_err(&format!("{what}: refused"));
            assert!(
                matches!(&error, partner_billing::Error::Validation(invalid) if invalid.field == "cursor"),
                "{what}: {error:?}"
            );
        }
    }
    app.stop().await;
}

/// The `href` of the page's link with `rel` (`next`: "Older", `prev`: "Newer").
fn page_link(body: &str, rel: &str) -> Option<String> {
    let at = body.find(&format!("\" rel=\"{rel}\""))?;
    let start = body[..at].rfind("href=\"")? + "href=\"".len();
    Some(body[start..at].replace("&amp;", "&"))
}

/// The rows of the page's `table#activity`.
fn activity_rows(body: &str) -> Vec<&str> {
    between(body, "<tbody>", "</tbody>")
        .unwrap_or_default()
        .split("<tr>")
        .skip(1)
        .collect()
}

async fn the_activity_page_links_older_and_newer_pages_by_cursor(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan("pro").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 1).await;
    let token = app.session(&r.client_id, &r.password).await;
    for threshold in 1..=60 {
        let set = app
            .http
            .put(app.url("/v1/billing/resellers/me/alerts/pro"))
            .bearer_auth(&token)
            .json(&json!({ "lowBalanceThreshold": threshold }))
            .send()
            .await
            .unwrap();
        assert_eq!(set.status(), 200);
    }
    let cookie = sign_in(&app, &r.client_id, &r.password).await;
    let total = all_entries(&app, &token).await.len();
    assert!(total > 60 && total <= 100, "{total}");

    let newest = get(&app, "/panel/activity", &cookie).await;
    assert_eq!(newest.status, 200);
    assert_eq!(
        page_link(&newest.body, "prev"),
        None,
        "no Newer on the first page"
    );
    let older = page_link(&newest.body, "next").expect("an Older link");
    assert!(older.starts_with("/panel/activity?cursor="), "{older}");
    let second = get(&app, &older, &cookie).await;
    assert_eq!(second.status, 200);
    assert_eq!(page_link(&second.body, "next"), None, "the last page");
    let newer = page_link(&second.body, "prev").expect("a Newer link");
    assert!(
        newer.starts_with("/panel/activity?cursor="),
        "Newer carries a cursor: {newer}"
    );
    let (first_rows, second_rows) = (activity_rows(&newest.body), activity_rows(&second.body));
    assert_eq!(first_rows.len(), 50);
    assert_eq!(
        first_rows.len() + second_rows.len(),
        total,
        "no repeat, no gap"
    );
    // "Newer" from the second page is the first page again.
    let back = get(&app, &newer, &cookie).await;
    assert_eq!(activity_rows(&back.body), first_rows);
    assert_eq!(page_link(&back.body, "prev"), None);
    assert_eq!(
        page_link(&back.body, "next").as_deref(),
        Some(older.as_str())
    );
    app.stop().await;
}

async fn the_trail_refuses_update_and_delete(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.reseller().await;
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM audit_entries")
            .fetch_one(app.store.pool())
            .await
            .unwrap()
    };
    let before = count().await;
    assert!(before > 0);
    let update = sqlx::query("UPDATE audit_entries SET actor = 'someone else'")
        .execute(app.store.pool())
        .await;
    assert!(update.is_err(), "UPDATE must be refused");
    let delete = sqlx::query("DELETE FROM audit_entries")
        .execute(app.store.pool())
        .await;
    assert!(delete.is_err(), "DELETE must be refused");
    assert_eq!(count().await, before);
    let actors: Vec<String> = sqlx::query_scalar("SELECT actor FROM audit_entries")
        .fetch_all(app.store.pool())
        .await
        .unwrap();
    assert!(actors.iter().all(|a| a != "someone else"));
    app.stop().await;
}

async fn licenses_add_no_entry(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    app.credit(&r, "pro", 3).await;
    let token = app.session(&r.client_id, &r.password).await;
    let before = all_entries(&app, &token).await;
    for i in 0..3 {
        let issued = app
            .partner(reqwest::Method::POST, "/v1/billing/partner/licenses", &r)
            .json(&json!({"planSlug": "pro", "login": "alice", "idempotencyKey": format!("license-{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(issued.status(), 200);
    }
    // The ledger records licenses; the trail does not repeat them.
    assert_eq!(all_entries(&app, &token).await, before);
    app.stop().await;
}
