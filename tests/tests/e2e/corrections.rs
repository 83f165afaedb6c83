//! The operator's corrections: credits idempotent by reference, adjustments of either sign that
//! never take a balance below zero (even racing licenses), each in the ledger and the trail.

use partner_billing::Error;
use partner_billing::audit::Origin;
use partner_billing::audit_log;
use partner_billing::domain::{ClientId, PlanSlug};
use partner_billing::quota::{self, Corrected, Correction};
use partner_billing_tests::{Db, Reseller, TestApp, both_databases};
use serde_json::json;

both_databases!(
    a_credit_with_a_reference_applies_once_and_the_reference_is_not_reused,
    adjustments_go_either_way_but_never_below_zero,
    bad_reasons_and_references_are_refused_with_nothing_changed,
    concurrent_runs_of_one_reference_apply_once,
    an_adjustment_racing_licenses_never_goes_below_zero_nor_loses_a_debit
);

struct Operator {
    client_id: ClientId,
    plan: PlanSlug,
}

impl Operator {
    fn new(r: &Reseller) -> Self {
        Self {
            client_id: ClientId::parse("clientId", &r.client_id).unwrap(),
            plan: PlanSlug::parse("plan", "pro").unwrap(),
        }
    }

    fn correction<'a>(
        &'a self,
        units: i64,
        reason: &'a str,
        reference: Option<&'a str>,
    ) -> Correction<'a> {
        Correction {
            client_id: &self.client_id,
            plan: &self.plan,
            units,
            reason,
            reference,
        }
    }

    async fn credit(
        &self,
        app: &TestApp,
        units: i64,
        reference: Option<&str>,
    ) -> Result<Corrected, Error> {
        quota::credit(
            &app.store,
            &self.correction(units, "top-up", reference),
            &Origin::cli(),
        )
        .await
    }

    async fn adjust(
        &self,
        app: &TestApp,
        units: i64,
        reference: Option<&str>,
    ) -> Result<Corrected, Error> {
        quota::adjust(
            &app.store,
            &self.correction(units, "fix a wrong credit", reference),
            &Origin::cli(),
        )
        .await
    }

    async fn ledger_kinds(&self, app: &TestApp) -> Vec<(String, i64)> {
        app.ledger(self.client_id.as_str())
            .await
            .into_iter()
            .map(|e| (e.kind, e.delta))
            .collect()
    }

    async fn trail_actions(&self, app: &TestApp) -> Vec<String> {
        audit_log::operator_log(&app.store, Some(&self.client_id), None, Some(500), None)
            .await
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.action)
            .collect()
    }
}

async fn a_credit_with_a_reference_applies_once_and_the_reference_is_not_reused(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.plan_with_days("basic", Some(30)).await;
    let r = app.reseller().await;
    let op = Operator::new(&r);
    let first = op.credit(&app, 100, Some("invoice-2026-11")).await.unwrap();
    assert_eq!((first.remaining_balance, first.replayed), (100, false));
    let again = op.credit(&app, 100, Some("invoice-2026-11")).await.unwrap();
    assert_eq!(
        again,
        Corrected {
            product_slug: "pro".into(),
            remaining_balance: 100,
            replayed: true
        }
    );
    assert_eq!(app.balance(&r, "pro").await, Some(100));
    let trail = op.trail_actions(&app).await;
    assert_eq!(trail.iter().filter(|a| *a == "quota.credited").count(), 1);
    // The reference on another credit (units, plan or kind): refused, nothing changed.
    let other_units = op
        .credit(&app, 1000, Some("invoice-2026-11"))
        .await
        .unwrap_err();
    assert!(
        matches!(&other_units, Error::Validation(f) if f.field == "reference"),
        "{other_units:?}"
    );
    let basic = Operator {
        client_id: op.client_id.clone(),
        plan: PlanSlug::parse("plan", "basic").unwrap(),
    };
    assert!(
        basic
            .credit(&app, 100, Some("invoice-2026-11"))
            .await
            .is_err()
    );
    assert!(op.adjust(&app, 100, Some("invoice-2026-11")).await.is_err());
    assert_eq!(app.balance(&r, "pro").await, Some(100));
    assert_eq!(app.balance(&r, "basic").await, None);
    assert_eq!(op.trail_actions(&app).await, trail);
    // The reference is per account: another account may use it.
    let other = app.reseller().await;
    let theirs = Operator::new(&other);
    assert!(
        !theirs
            .credit(&app, 5, Some("invoice-2026-11"))
            .await
            .unwrap()
            .replayed
    );
    let entries = app.ledger(op.client_id.as_str()).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].reference.as_deref(), Some("invoice-2026-11"));
    assert!(entries[0].actor.starts_with("cli:"));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn adjustments_go_either_way_but_never_below_zero(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;
    let op = Operator::new(&r);
    op.credit(&app, 1000, None).await.unwrap();
    let down = op
        .adjust(&app, -900, Some("fix-1000-to-100"))
        .await
        .unwrap();
    assert_eq!((down.remaining_balance, down.replayed), (100, false));
    let replay = op
        .adjust(&app, -900, Some("fix-1000-to-100"))
        .await
        .unwrap();
    assert_eq!((replay.remaining_balance, replay.replayed), (100, true));
    let up = op.adjust(&app, 5, None).await.unwrap();
    assert_eq!(up.remaining_balance, 105);
    let below = op.adjust(&app, -106, None).await.unwrap_err();
    assert!(matches!(below, Error::InsufficientQuota), "{below:?}");
    assert!(matches!(
        op.adjust(&app, 0, None).await,
        Err(Error::Validation(_))
    ));
    assert_eq!(app.balance(&r, "pro").await, Some(105));
    assert_eq!(
        op.ledger_kinds(&app).await,
        [
            ("credit".to_owned(), 1000),
            ("adjustment".to_owned(), -900),
            ("adjustment".to_owned(), 5)
        ]
    );
    let log = audit_log::operator_log(&app.store, Some(&op.client_id), None, None, None)
        .await
        .unwrap();
    let adjusted: Vec<_> = log
        .entries
        .iter()
        .filter(|e| e.action == "quota.adjusted")
        .collect();
    assert_eq!(adjusted.len(), 2, "one entry per applied adjustment");
    assert_eq!(adjusted[1].details["units"], -900);
    assert_eq!(adjusted[1].details["reason"], "fix a wrong credit");
    assert_eq!(adjusted[1].ids["reference"], "fix-1000-to-100");
    // The reseller's ledger shows the correction as its own kind.
    let token = app.session(&r.client_id, &r.password).await;
    let page = app
        .http
        .get(app.url("/v1/billing/resellers/me/activity"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = page.json().await.unwrap();
    assert!(body["entries"].to_string().contains("quota.adjusted"));
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn bad_reasons_and_references_are_refused_with_nothing_changed(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;
    let op = Operator::new(&r);
    op.credit(&app, 10, None).await.unwrap();
    let trail = op.trail_actions(&app).await;
    let ten_kb = "x".repeat(10 * 1024);
    for (reason, reference, field) in [
        ("line one\nline two", None, "reason"),
        ("\u{1b}[31mred", None, "reason"),
        (ten_kb.as_str(), None, "reason"),
        ("", None, "reason"),
        ("fine", Some("has space"), "reference"),
        ("fine", Some(""), "reference"),
    ] {
        for result in [
            quota::credit(
                &app.store,
                &op.correction(5, reason, reference),
                &Origin::cli(),
            )
            .await,
            quota::adjust(
                &app.store,
                &op.correction(-5, reason, reference),
                &Origin::cli(),
            )
            .await,
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, Error::Validation(f) if f.field == field),
                "{field}: {err:?}"
            );
            // The error quotes nothing of the input.
            assert!(!err.to_string().contains("line two") && !err.to_string().contains("xxxx"));
        }
    }
    assert!(op.credit(&app, 0, None).await.is_err());
    assert!(op.credit(&app, 1_000_000_001, None).await.is_err());
    assert_eq!(app.balance(&r, "pro").await, Some(10));
    assert_eq!(op.ledger_kinds(&app).await, [("credit".to_owned(), 10)]);
    assert_eq!(op.trail_actions(&app).await, trail);
    app.stop().await;
}

async fn concurrent_runs_of_one_reference_apply_once(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    let r = app.reseller().await;
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let store = app.store.clone();
            let client_id = ClientId::parse("clientId", &r.client_id).unwrap();
            tokio::spawn(async move {
                let plan = PlanSlug::parse("plan", "pro").unwrap();
                let correction = Correction {
                    client_id: &client_id,
                    plan: &plan,
                    units: 50,
                    reason: "retried job",
                    reference: Some("job-42"),
                };
                quota::credit(&store, &correction, &Origin::cli()).await
            })
        })
        .collect();
    let mut applied = 0;
    for run in runs {
        let done = run.await.unwrap().expect("every run succeeds");
        assert_eq!(done.remaining_balance, 50);
        applied += usize::from(!done.replayed);
    }
    assert_eq!(applied, 1);
    assert_eq!(app.balance(&r, "pro").await, Some(50));
    let op = Operator::new(&r);
    assert_eq!(op.ledger_kinds(&app).await, [("credit".to_owned(), 50)]);
    app.assert_audit_clean().await;
    app.stop().await;
}

async fn an_adjustment_racing_licenses_never_goes_below_zero_nor_loses_a_debit(db: Db) {
    let app = TestApp::spawn(&db).await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    let r = app.reseller().await;
    let op = Operator::new(&r);
    op.credit(&app, 40, None).await.unwrap();
    let licenses: Vec<_> = (0..30)
        .map(|i| {
            let request = app
                .partner(reqwest::Method::POST, "/v1/billing/partner/licenses", &r)
                .json(&json!({"planSlug": "pro", "login": "alice", "idempotencyKey": format!("race-{i:04}")}));
            tokio::spawn(request.send())
        })
        .collect();
    let adjustments: Vec<_> = (0..10)
        .map(|_| {
            let store = app.store.clone();
            let client_id = op.client_id.clone();
            tokio::spawn(async move {
                let plan = PlanSlug::parse("plan", "pro").unwrap();
                let correction = Correction {
                    client_id: &client_id,
                    plan: &plan,
                    units: -3,
                    reason: "race",
                    reference: None,
                };
                quota::adjust(&store, &correction, &Origin::cli()).await
            })
        })
        .collect();
    let mut issued = 0i64;
    for answer in licenses {
        let status = answer.await.unwrap().unwrap().status().as_u16();
        assert!(status == 200 || status == 402, "{status}");
        issued += i64::from(status == 200);
    }
    let mut adjusted = 0i64;
    for run in adjustments {
        match run.await.unwrap() {
            Ok(_) => adjusted += 1,
            Err(Error::InsufficientQuota) => {}
            Err(err) => panic!("{err:?}"),
        }
    }
    let balance = app.balance(&r, "pro").await.unwrap();
    assert!(balance >= 0);
    assert_eq!(balance, 40 - issued - 3 * adjusted, "no debit lost");
    let kinds = op.ledger_kinds(&app).await;
    assert_eq!(
        kinds.iter().filter(|(k, _)| k == "license").count() as i64,
        issued
    );
    assert_eq!(
        kinds.iter().filter(|(k, _)| k == "adjustment").count() as i64,
        adjusted
    );
    app.assert_audit_clean().await;
    app.stop().await;
}
