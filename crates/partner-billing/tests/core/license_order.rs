//! One table of license cases, run one request at a time (group commit off, and on with each
//! request alone in its group) and in groups of many: every way gives the same answers, in
//! the one order of checks — the key, then the plan, then the balance and the login.

use partner_billing::Result;
use partner_billing::domain::{Login, PlanSlug};
use partner_billing::idempotency::Outcome;
use partner_billing::licenses::{IssueLicense, issue_license};
use partner_billing::plans::register_user;
use partner_billing::quota::balances;
use partner_billing::store::{Backend, Store};
use partner_billing::wire::License;

use crate::fixture::{Reseller, key, reseller, wait_for_groups};

/// Which account a case's request is made with.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// Holds units: 10 credited, one spent on `rich-done`.
    Rich,
    /// Holds none: 1 credited, spent on `poor-done`.
    Poor,
}

/// One request of the table and the answer it must get.
struct Case {
    what: &'static str,
    who: Who,
    plan: &'static str,
    login: &'static str,
    key: &'static str,
    answer: &'static str,
}

const CASES: &[Case] = &[
    Case {
        what: "replay",
        who: Who::Rich,
        plan: "pro",
        login: "alice",
        key: "rich-done",
        answer: "replayed",
    },
    Case {
        what: "reused key, unknown login",
        who: Who::Rich,
        plan: "pro",
        login: "nobody",
        key: "rich-done",
        answer: "IdempotencyKeyReused",
    },
    Case {
        what: "reused key, unknown plan",
        who: Who::Rich,
        plan: "no-such-plan",
        login: "alice",
        key: "rich-done",
        answer: "IdempotencyKeyReused",
    },
    Case {
        what: "reused key at a zero balance",
        who: Who::Poor,
        plan: "pro",
        login: "bob",
        key: "poor-done",
        answer: "IdempotencyKeyReused",
    },
    Case {
        what: "reused key at a zero balance, unknown login",
        who: Who::Poor,
        plan: "pro",
        login: "nobody",
        key: "poor-done",
        answer: "IdempotencyKeyReused",
    },
    Case {
        what: "unknown plan",
        who: Who::Rich,
        plan: "no-such-plan",
        login: "nobody",
        key: "rich-new-1",
        answer: "UnknownPlan",
    },
    Case {
        what: "unknown login at a zero balance",
        who: Who::Poor,
        plan: "pro",
        login: "nobody",
        key: "poor-new-1",
        answer: "InsufficientQuota",
    },
    Case {
        what: "unknown login at a non-zero balance",
        who: Who::Rich,
        plan: "pro",
        login: "nobody",
        key: "rich-new-2",
        answer: "UnknownLogin",
    },
    Case {
        what: "insufficient quota",
        who: Who::Poor,
        plan: "pro",
        login: "alice",
        key: "poor-new-2",
        answer: "InsufficientQuota",
    },
    Case {
        what: "success",
        who: Who::Rich,
        plan: "pro",
        login: "bob",
        key: "rich-new-3",
        answer: "issued",
    },
];

/// The two accounts of the table, each with its earlier success recorded.
struct Accounts {
    rich: Reseller,
    poor: Reseller,
    rich_done: License,
}

async fn accounts(store: &Store) -> Accounts {
    for login in ["alice", "bob"] {
        let login = Login::parse("login", login).unwrap();
        // Registered once per store; the table runs several times on one.
        let _ = register_user(store, &login, &partner_billing::audit::Origin::cli()).await;
    }
    let rich = reseller(store, 10).await;
    let poor = reseller(store, 1).await;
    let rich_done = issue_license(store, &rich.account, request("pro", "alice", "rich-done"))
        .await
        .expect("the earlier success")
        .value;
    issue_license(store, &poor.account, request("pro", "alice", "poor-done"))
        .await
        .expect("the earlier success");
    Accounts {
        rich,
        poor,
        rich_done,
    }
}

fn request(plan: &str, login: &str, text: &str) -> IssueLicense {
    IssueLicense {
        plan: PlanSlug::parse("planSlug", plan).unwrap(),
        login: Login::parse("login", login).unwrap(),
        idempotency_key: key(text),
    }
}

impl Accounts {
    fn of(&self, who: Who) -> &Reseller {
        match who {
            Who::Rich => &self.rich,
            Who::Poor => &self.poor,
        }
    }

    /// Every answer as the table writes it; a replay must carry the earlier license.
    fn answers(&self, results: Vec<Result<Outcome<License>>>) -> Vec<String> {
        results
            .into_iter()
            .map(|result| match result {
                Ok(outcome) if outcome.replayed => {
                    assert_eq!(
                        outcome.value, self.rich_done,
                        "a replay is the stored license"
                    );
                    "replayed".to_owned()
                }
                Ok(_) => "issued".to_owned(),
                Err(err) => format!("{err:?}"),
            })
            .collect()
    }

    /// What the balances show: only the earlier successes and the table's one success
    /// (and `extra` units of the rich account) moved quota.
    async fn assert_balances(&self, store: &Store, extra: i64) {
        let rich = balances(store, self.rich.account.account_id).await.unwrap();
        assert_eq!(rich.balances[0].remaining_balance, 8 - extra);
        let poor = balances(store, self.poor.account.account_id).await.unwrap();
        assert_eq!(poor.balances[0].remaining_balance, 0);
    }
}

fn expected() -> Vec<String> {
    CASES.iter().map(|c| c.answer.to_owned()).collect()
}

fn assert_table(how: &str, answers: &[String]) {
    for (case, answer) in CASES.iter().zip(answers) {
        assert_eq!(
            answer, case.answer,
            "{how}: {} ({:?} {} {} {})",
            case.what, case.who, case.plan, case.login, case.key
        );
    }
    assert_eq!(answers, expected());
}

/// Each request on its own, with group commit on and off.
async fn one_at_a_time(store: &Store, how: &str) {
    let accounts = accounts(store).await;
    let mut results = Vec::new();
    for case in CASES {
        let account = &accounts.of(case.who).account;
        results.push(issue_license(store, account, request(case.plan, case.login, case.key)).await);
    }
    assert_table(how, &accounts.answers(results));
    accounts.assert_balances(store, 0).await;
}

async fn the_table_one_request_at_a_time(store: Store) {
    one_at_a_time(&store, "group commit on, one at a time").await;
    one_at_a_time(&store.clone().with_group_commit(false), "group commit off").await;
}

/// The table's requests in as few groups as can hold them: one request per key at a time (a
/// second request with a key already in flight is in progress in this process before it
/// reaches a group), each group one transaction of several requests.
fn rounds() -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (index, case) in CASES.iter().enumerate() {
        let same_key = |&i: &usize| CASES[i].key == case.key;
        match rounds.iter_mut().find(|round| !round.iter().any(same_key)) {
            Some(round) => round.push(index),
            None => rounds.push(vec![index]),
        }
    }
    rounds
}

/// One round of the table's requests, all in one group transaction.
async fn one_group(
    store: &Store,
    accounts: &Accounts,
    round: usize,
    cases: &[usize],
) -> Vec<(usize, Result<Outcome<License>>)> {
    // Hold what every group needs before its first statement can finish.
    let mut blocker = store.begin_write().await.unwrap();
    if store.backend() == Backend::Postgres {
        sqlx::query("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *blocker)
            .await
            .unwrap();
    }
    // A first group, held at its first statement; the round's requests queue behind it.
    let plug = {
        let (store, account) = (store.clone(), accounts.rich.account.clone());
        let request = request("pro", "alice", &format!("plug-{round:04}"));
        tokio::spawn(async move { issue_license(&store, &account, request).await })
    };
    wait_for_groups(store, 0, 1).await;
    let (_, _, transactions_before) = store.license_group_stats();
    let tasks: Vec<_> = cases
        .iter()
        .map(|&index| {
            let case = &CASES[index];
            let store = store.clone();
            let account = accounts.of(case.who).account.clone();
            let request = request(case.plan, case.login, case.key);
            tokio::spawn(async move { issue_license(&store, &account, request).await })
        })
        .collect();
    wait_for_groups(store, cases.len(), 1).await;
    blocker.rollback().await.unwrap();
    assert!(!plug.await.unwrap().expect("the plug is issued").replayed);
    let mut results = Vec::new();
    for (&index, task) in cases.iter().zip(tasks) {
        results.push((index, task.await.unwrap()));
    }
    let (_, _, transactions_after) = store.license_group_stats();
    assert_eq!(
        transactions_after - transactions_before,
        1,
        "round {round} ran as one group"
    );
    results
}

/// Every request of the table in groups of many.
async fn the_table_in_groups_of_many(store: Store) {
    let accounts = accounts(&store).await;
    let rounds = rounds();
    assert!(rounds[0].len() >= 7, "most of the table shares one group");
    let mut results: Vec<(usize, Result<Outcome<License>>)> = Vec::new();
    for (round, cases) in rounds.iter().enumerate() {
        results.extend(one_group(&store, &accounts, round, cases).await);
    }
    results.sort_by_key(|(index, _)| *index);
    let results = results.into_iter().map(|(_, result)| result).collect();
    assert_table("groups of many", &accounts.answers(results));
    let plugs = i64::try_from(rounds.len()).unwrap();
    accounts.assert_balances(&store, plugs).await;
}

on_both_databases!(the_table_one_request_at_a_time, the_table_in_groups_of_many);
