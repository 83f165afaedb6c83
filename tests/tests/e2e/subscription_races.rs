//! Revocations racing issues and each other, over two server processes of the real binary that
//! share nothing but the database: every login's chain of periods stays whole (no overlap, and
//! no gap but what a revocation removed), a license is revoked once, and no unit moves back.

use partner_billing_client::{Credentials, PartnerClient, ProductClient, UserLicense};
use partner_billing_tests::{Db, TestApp, both_databases};

both_databases!(revocations_and_issues_race_across_replicas);

const DAY: i64 = 86_400;

/// The unrevoked licenses of a 30-day plan, in chain order, each starting where the one before
/// it ends.
fn assert_whole_chain(licenses: &[UserLicense]) -> Vec<(i64, i64)> {
    let mut periods: Vec<(i64, i64)> = licenses
        .iter()
        .filter(|l| l.revoked_utc.is_none())
        .map(|l| (l.starts_utc, l.expires_utc.expect("a 30-day plan")))
        .collect();
    periods.sort_unstable();
    for (start, end) in &periods {
        assert_eq!(end - start, 30 * DAY, "each period as granted: {periods:?}");
    }
    for pair in periods.windows(2) {
        assert_eq!(pair[1].0, pair[0].1, "no overlap, no gap: {periods:?}");
    }
    periods
}

async fn revocations_and_issues_race_across_replicas(db: Db) {
    let app = TestApp::spawn(&db).await;
    let token = app.operator_token("backend").await;
    let product = ProductClient::new(&app.base_url, &token).unwrap();
    let r = app.reseller().await;
    app.plan_with_days("pro", Some(30)).await;
    app.user("alice").await;
    app.credit(&r, "pro", 100).await;
    let processes = app.process_replicas(2);
    let replicas = processes.base_urls();
    let on = |replica: usize| {
        PartnerClient::new(
            &replicas[replica],
            Credentials::new(&r.client_id, &r.secret),
        )
        .unwrap()
    };
    // A chain of four to start from.
    let mut first = Vec::new();
    for _ in 0..4 {
        first.push(
            on(0)
                .issue_license("pro", "alice", None)
                .await
                .unwrap()
                .value,
        );
    }

    // At once: twelve renewals on both replicas; the running license and an unstarted one each
    // revoked twice, once per replica.
    let mut issues = tokio::task::JoinSet::new();
    for i in 0..12 {
        let sdk = on(i % 2);
        issues.spawn(async move { sdk.issue_license("pro", "alice", None).await });
    }
    let mut revocations = tokio::task::JoinSet::new();
    for license in [&first[0], &first[2]] {
        for replica in 0..2 {
            let sdk = on(replica);
            let id = license.license_id.clone();
            revocations.spawn(async move { sdk.revoke_license(&id).await });
        }
    }
    let issued: Vec<_> = issues
        .join_all()
        .await
        .into_iter()
        .map(|issued| issued.expect("every renewal succeeds").value)
        .collect();
    let revoked: Vec<_> = revocations
        .join_all()
        .await
        .into_iter()
        .map(|revoked| revoked.expect("every revocation succeeds"))
        .collect();
    // Both answers of one license are the same revocation.
    for license in [&first[0], &first[2]] {
        let answers: Vec<_> = revoked
            .iter()
            .filter(|l| l.license_id == license.license_id)
            .collect();
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0], answers[1], "revoked once");
        assert!(answers[0].revoked_utc.is_some());
    }

    let licenses = product.user_licenses("alice").await.unwrap().licenses;
    assert_eq!(licenses.len(), 16);
    let periods = assert_whole_chain(&licenses);
    assert_eq!(periods.len(), 14);
    // The chain starts at the first revocation at the latest: the time before it was used up.
    let first_revoked = revoked.iter().filter_map(|l| l.revoked_utc).min().unwrap();
    assert!(periods[0].0 <= first_revoked + 5, "{periods:?}");
    // Every renewal is in it, as it is now.
    for license in &issued {
        assert!(
            licenses
                .iter()
                .any(|l| l.license_id == license.license_id && l.revoked_utc.is_none())
        );
    }

    // Revocation on one replica while the other issues, again, then the chain is still whole.
    let mut mixed = tokio::task::JoinSet::new();
    let victims: Vec<String> = issued
        .iter()
        .take(3)
        .map(|l| l.license_id.clone())
        .collect();
    for id in victims {
        let sdk = on(0);
        mixed.spawn(async move { sdk.revoke_license(&id).await.map(|_| ()) });
        let sdk = on(1);
        mixed.spawn(async move { sdk.issue_license("pro", "alice", None).await.map(|_| ()) });
    }
    for outcome in mixed.join_all().await {
        outcome.expect("each request succeeds");
    }
    let licenses = product.user_licenses("alice").await.unwrap().licenses;
    assert_eq!(assert_whole_chain(&licenses).len(), 14);
    // Nineteen licenses charged, none given back.
    assert_eq!(app.balance(&r, "pro").await, Some(81));
    app.assert_audit_clean().await;
    drop(processes);
    app.stop().await;
}
