//! Real concurrent requests: one idempotency key charges once; a small balance is never
//! overdrawn.
//!
//! Over 450 lines on purpose: one scenario per race (groups, one key, a small balance, sustained
//! writers), with group commit and without, each spelling out its clients and the totals it
//! checks afterwards.

use std::time::{Duration, Instant};

use partner_billing::store::{Backend, FaultPoint};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use reqwest::Method;
use serde_json::{Value, json};

both_databases!(
    a_group_of_waiting_licenses_answers_each_request,
    a_group_across_accounts_charges_each_balance_in_arrival_order,
    a_failure_inside_a_group_fails_every_request_of_it,
    sustained_concurrent_writers_never_fail,
    sustained_concurrent_writers_never_fail_without_group_commit,
    fifty_requests_with_one_key_charge_once,
    fifty_requests_with_one_key_charge_once_without_group_commit,
    forty_distinct_keys_against_five_units,
    forty_distinct_keys_against_five_units_without_group_commit
);

const LICENSES: &str = "/v1/billing/partner/licenses";

async fn fifty_requests_with_one_key_charge_once(db: Db) {
    fifty_requests_with_one_key_charge_once_on(TestApp::spawn(&db).await).await;
}

/// The same with one transaction per request (`--group-commit false`).
async fn fifty_requests_with_one_key_charge_once_without_group_commit(db: Db) {
    fifty_requests_with_one_key_charge_once_on(TestApp::spawn_without_group_commit(&db).await)
        .await;
}

async fn fifty_requests_with_one_key_charge_once_on(app: TestApp) {
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 10).await;
    let body = json!({"planSlug":"pro","login":"alice","idempotencyKey":"storm-key-1"});
    let requests = (0..50).map(|_| {
        let request = app.partner(Method::POST, LICENSES, &r).json(&body);
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").is_some();
            (status, retry_after, response.json::<Value>().await.unwrap())
        })
    });
    let mut licenses = Vec::new();
    let mut in_progress = 0;
    for request in requests {
        let (status, retry_after, body) = request.await.unwrap();
        match status {
            200 => licenses.push(body),
            409 => {
                assert_eq!(body["code"], "Reseller.RequestInProgress");
                assert!(retry_after, "409 carries Retry-After");
                in_progress += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!licenses.is_empty());
    assert_eq!(licenses.len() + in_progress, 50);
    assert!(
        licenses.iter().all(|l| l == &licenses[0]),
        "every 200 is the same license"
    );
    assert_eq!(app.balance(&r, "pro").await, Some(9), "one unit charged");
    // After the storm the key replays.
    let replay: Value = app
        .partner(Method::POST, LICENSES, &r)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replay, licenses[0]);
    let ledger = app.ledger(&r.client_id).await;
    assert_eq!(ledger.iter().filter(|e| e.kind == "license").count(), 1);
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn forty_distinct_keys_against_five_units(db: Db) {
    forty_distinct_keys_against_five_units_on(TestApp::spawn(&db).await).await;
}

/// The same with one transaction per request (`--group-commit false`).
async fn forty_distinct_keys_against_five_units_without_group_commit(db: Db) {
    forty_distinct_keys_against_five_units_on(TestApp::spawn_without_group_commit(&db).await).await;
}

async fn forty_distinct_keys_against_five_units_on(app: TestApp) {
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 5).await;
    let requests = (0..40).map(|i| {
        let request = app.partner(Method::POST, LICENSES, &r).json(
            &json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("distinct-{i:04}")}),
        );
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    });
    let (mut ok, mut refused) = (0, 0);
    for request in requests {
        match request.await.unwrap() {
            (200, _) => ok += 1,
            (402, body) => {
                assert_eq!(body["code"], "Reseller.InsufficientQuota");
                refused += 1;
            }
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert_eq!((ok, refused), (5, 35));
    assert_eq!(app.balance(&r, "pro").await, Some(0));
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Sixteen clients writing at once for a few hundred requests (licenses, promo batches and
/// balance reads mixed): no request fails with a 5xx (on SQLite, no `SQLITE_BUSY` surfacing as a
/// 500), and every unit is accounted for.
async fn sustained_concurrent_writers_never_fail(db: Db) {
    sustained_concurrent_writers_never_fail_on(TestApp::spawn(&db).await).await;
}

/// The same with one transaction per request (`--group-commit false`).
async fn sustained_concurrent_writers_never_fail_without_group_commit(db: Db) {
    sustained_concurrent_writers_never_fail_on(TestApp::spawn_without_group_commit(&db).await)
        .await;
}

async fn sustained_concurrent_writers_never_fail_on(app: TestApp) {
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 100_000).await;
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let requests: Vec<reqwest::RequestBuilder> = (0..20)
                .map(|i| match i % 4 {
                    0 => app.partner(Method::POST, "/v1/billing/partner/promo-batches", &r).json(
                        &json!({"planSlug":"pro","count":5,"idempotencyKey":format!("sustained-{client}-{i}")}),
                    ),
                    1 => app.partner(Method::GET, "/v1/billing/partner/balances", &r),
                    _ => app.partner(Method::POST, LICENSES, &r).json(
                        &json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("sustained-{client}-{i}")}),
                    ),
                })
                .collect();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for request in requests {
                    statuses.push(request.send().await.unwrap().status().as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for client in clients {
        statuses.extend(client.await.unwrap());
    }
    assert_eq!(statuses.len(), 320);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // 16 clients × 5 batches × 5 codes + 16 × 10 licenses.
    assert_eq!(app.balance(&r, "pro").await, Some(100_000 - 400 - 160));
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Fourteen license requests wait behind a held lock and then share one transaction (group
/// commit); each gets its own answer: successes, a replay, refusals for a reused key, an
/// unknown plan or login and insufficient quota, with only the successes charged.
async fn a_group_of_waiting_licenses_answers_each_request(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("small", Some(30)).await;
    app.user("alice").await;
    app.user("bob").await;
    app.credit(&r, "pro", 10).await;
    app.credit(&r, "small", 2).await;
    let license = |plan: &str, login: &str, key: &str| json!({"planSlug": plan, "login": login, "idempotencyKey": key});
    let send = |body: Value| {
        let request = app.partner(Method::POST, LICENSES, &r).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            (status, replayed, response.json::<Value>().await.unwrap())
        }
    };
    let (status, _, earlier) = send(license("pro", "alice", "group-earlier-1")).await;
    assert_eq!(status, 200);
    assert_eq!(
        send(license("pro", "alice", "group-earlier-2")).await.0,
        200
    );

    // Unknown logins of known plans are refused outside any group, but their answer is
    // counted per account (a write): they are sent before the lock below is taken.
    assert_eq!(
        send(license("pro", "ghost", "group-unknown-login")).await.2["code"],
        "Reseller.UnknownLogin"
    );
    assert_eq!(
        send(license("small", "ghost", "group-unknown-login-2"))
            .await
            .0,
        422
    );

    // Hold the lock every fresh license needs: SQLite's write lock, or PostgreSQL's balance
    // rows. (Unknown plans and logins are refused before the group, without a lock.)
    let blocker = hold_the_license_lock(&app).await;
    let mut bodies = Vec::new();
    for i in 0..6 {
        bodies.push(license("pro", "bob", &format!("group-pro-{i}")));
    }
    for i in 0..4 {
        bodies.push(license("small", "bob", &format!("group-small-{i}")));
    }
    bodies.push(license("nope", "bob", "group-unknown-plan"));
    bodies.push(license("nope", "ghost", "group-unknown-both"));
    bodies.push(license("pro", "alice", "group-earlier-1"));
    bodies.push(license("pro", "bob", "group-earlier-2"));
    let count = bodies.len();
    // The first request holds the group's first transaction, blocked on the lock; only then
    // are the others sent, so that they queue behind it (sent together, all of them could
    // join that first group, and none would wait).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answers = vec![tokio::spawn(send(bodies[0].clone()))];
    while app.store.license_group_stats().1 == 0 {
        assert!(Instant::now() < deadline, "the first request never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    answers.extend(
        bodies[1..]
            .iter()
            .cloned()
            .map(|body| tokio::spawn(send(body))),
    );
    // A replay or a refusal may finish first: it needs no lock; the others queue.
    let (queued, transactions_at_release) = loop {
        let (waiting, running, transactions) = app.store.license_group_stats();
        let finished = answers.iter().filter(|a| a.is_finished()).count();
        if waiting > 0 && waiting + running + finished == count {
            break (waiting, transactions);
        }
        assert!(
            Instant::now() < deadline,
            "the requests queue for the group: {waiting} waiting, {running} running, \
             {finished} finished"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    blocker.rollback().await.unwrap();
    let mut answers_by_key = std::collections::BTreeMap::new();
    for (body, answer) in bodies.iter().zip(answers) {
        answers_by_key.insert(
            body["idempotencyKey"].as_str().unwrap().to_owned(),
            answer.await.unwrap(),
        );
    }
    let (waiting, running, transactions_after) = app.store.license_group_stats();
    assert_eq!((waiting, running), (0, 0));
    assert_eq!(
        transactions_after - transactions_at_release,
        1,
        "the {queued} requests that waited share one transaction"
    );

    let code = |key: &str| {
        let (status, _, body) = &answers_by_key[key];
        (*status, body["code"].as_str().unwrap_or("").to_owned())
    };
    for i in 0..6 {
        assert_eq!(code(&format!("group-pro-{i}")).0, 200);
    }
    let small: Vec<_> = (0..4).map(|i| code(&format!("group-small-{i}"))).collect();
    assert_eq!(
        small.iter().filter(|(s, _)| *s == 200).count(),
        2,
        "{small:?}"
    );
    assert!(
        small
            .iter()
            .filter(|(s, _)| *s != 200)
            .all(|(s, c)| *s == 402 && c == "Reseller.InsufficientQuota"),
        "{small:?}"
    );
    assert_eq!(
        code("group-unknown-plan"),
        (422, "Reseller.UnknownPlan".to_owned())
    );
    assert_eq!(code("group-unknown-both").0, 422);
    let (status, replayed, body) = &answers_by_key["group-earlier-1"];
    assert_eq!((*status, *replayed), (200, true));
    assert_eq!(body, &earlier, "the replay is the stored license");
    assert_eq!(
        code("group-earlier-2"),
        (422, "Reseller.IdempotencyKeyReused".to_owned())
    );
    // Each success has its own license.
    let mut ids: Vec<&str> = answers_by_key
        .values()
        .filter(|(s, replayed, _)| *s == 200 && !replayed)
        .map(|(_, _, b)| b["licenseId"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8);
    assert_eq!(app.balance(&r, "pro").await, Some(2), "10 - 2 earlier - 6");
    assert_eq!(app.balance(&r, "small").await, Some(0));
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Requests of two accounts wait behind a held lock and then share group transactions (one
/// commit lane on SQLite; on PostgreSQL when both accounts' lanes are the same): each balance
/// is charged in arrival order until it runs out, the rest answer 402, and the ledger shows one
/// entry per license with the balance stepping down by one.
async fn a_group_across_accounts_charges_each_balance_in_arrival_order(db: Db) {
    let app = TestApp::spawn(&db).await;
    let (r1, r2) = (app.reseller().await, app.reseller().await);
    app.plan_with_days("pro", Some(30)).await;
    app.user("carol").await;
    app.credit(&r1, "pro", 3).await;
    app.credit(&r2, "pro", 5).await;
    for r in [&r1, &r2] {
        // Use each key once first: its lastUsedUtc write would otherwise wait on the held lock.
        let used = app
            .partner(Method::GET, "/v1/billing/partner/balances", r)
            .send()
            .await
            .unwrap();
        assert_eq!(used.status(), 200);
    }
    let blocker = hold_the_license_lock(&app).await;
    let requests: Vec<(&Reseller, String)> = (0..5)
        .map(|i| (&r1, format!("across-1-{i}")))
        .chain((0..2).map(|i| (&r2, format!("across-2-{i}"))))
        .collect();
    let answers: Vec<_> = requests
        .iter()
        .map(|(r, key)| {
            let body = json!({"planSlug": "pro", "login": "carol", "idempotencyKey": key});
            let request = app.partner(Method::POST, LICENSES, r).json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (
                    response.status().as_u16(),
                    response.json::<Value>().await.unwrap(),
                )
            })
        })
        .collect();
    let count = requests.len();
    wait_for_groups(&app, |waiting, running| waiting + running == count).await;
    blocker.rollback().await.unwrap();
    let mut statuses = (Vec::new(), Vec::new());
    for ((r, _), answer) in requests.iter().zip(answers) {
        let (status, body) = answer.await.unwrap();
        if status != 200 {
            assert_eq!(
                (status, body["code"].as_str()),
                (402, Some("Reseller.InsufficientQuota"))
            );
        }
        if r.client_id == r1.client_id {
            statuses.0.push(status);
        } else {
            statuses.1.push(status);
        }
    }
    assert_eq!(statuses.0.iter().filter(|s| **s == 200).count(), 3);
    assert_eq!(statuses.1, [200, 200]);
    assert_eq!(app.balance(&r1, "pro").await, Some(0));
    assert_eq!(app.balance(&r2, "pro").await, Some(3));
    for (r, after) in [(&r1, vec![2, 1, 0]), (&r2, vec![4, 3])] {
        let ledger = app.ledger(&r.client_id).await;
        let licenses: Vec<i64> = ledger
            .iter()
            .filter(|e| e.kind == "license")
            .map(|e| {
                assert_eq!(e.delta, -1);
                e.balance_after
            })
            .collect();
        assert_eq!(licenses, after, "one entry per license, in order");
    }
    app.assert_audit_clean().await;
    app.stop().await;
}

/// A database failure in the middle of a group transaction: every request of the group gets
/// the retryable 500, nothing of any of them is committed, and each key retried is charged
/// exactly once.
async fn a_failure_inside_a_group_fails_every_request_of_it(db: Db) {
    let app = TestApp::spawn(&db).await;
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 20).await;
    let bodies: Vec<Value> = (0..6)
        .map(|i| json!({"planSlug":"pro","login":"alice","idempotencyKey":format!("group-fail-{i}")}))
        .collect();
    // Use the key once first: its lastUsedUtc write would otherwise wait on the held lock.
    let used = app
        .partner(Method::GET, "/v1/billing/partner/balances", &r)
        .send()
        .await
        .unwrap();
    assert_eq!(used.status(), 200);
    let blocker = hold_the_license_lock(&app).await;
    let send = |body: &Value| {
        let request = app.partner(Method::POST, LICENSES, &r).json(body);
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    // The first inside a group held at its first statement, then the rest queued behind it
    // (sent together, they could all be taken by one group).
    let mut answers = vec![send(&bodies[0])];
    wait_for_groups(&app, |waiting, running| (waiting, running) == (0, 1)).await;
    answers.extend(bodies[1..].iter().map(send));
    let behind = bodies.len() - 1;
    wait_for_groups(&app, |waiting, running| (waiting, running) == (behind, 1)).await;
    // Two transactions: the blocked one, and the next for all that queued behind it. One
    // fault each fails the first write of each; every request of both must fail with it.
    app.store.inject_fault(FaultPoint::LicenseWrite);
    app.store.inject_fault(FaultPoint::LicenseWrite);
    blocker.rollback().await.unwrap();
    for answer in answers {
        let (status, body) = answer.await.unwrap();
        assert_eq!(status, 500, "{body}");
        assert_eq!(body["code"], "Internal.Error");
    }
    let (_, _, transactions) = app.store.license_group_stats();
    assert_eq!(transactions, 2, "six requests, two group transactions");
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(20),
        "nothing of a failed group is charged"
    );
    for body in &bodies {
        let retry = app
            .partner(Method::POST, LICENSES, &r)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(retry.status(), 200);
    }
    assert_eq!(
        app.balance(&r, "pro").await,
        Some(14),
        "each key charged once"
    );
    app.assert_audit_clean().await;
    app.stop().await;
}

/// Holds what every license group needs before its first statement can finish, until the
/// returned transaction ends: SQLite's write lock; on PostgreSQL the `users` table, which the
/// group's one read joins whether it runs first without locks or again under them.
async fn hold_the_license_lock(app: &TestApp) -> partner_billing::store::Tx {
    let mut blocker = app.store.begin_write().await.unwrap();
    if app.store.backend() == Backend::Postgres {
        sqlx::query("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *blocker)
            .await
            .unwrap();
    }
    blocker
}

/// Waits until the license groups' counts — requests waiting for a group transaction,
/// requests inside a running one — satisfy `reached`.
async fn wait_for_groups(app: &TestApp, reached: impl Fn(usize, usize) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (waiting, running, _) = app.store.license_group_stats();
        if reached(waiting, running) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the requests queue for the group ({waiting} waiting, {running} running)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
