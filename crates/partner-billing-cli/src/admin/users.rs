//! `partner-billing admin user …`: end-user logins and the licenses they hold.

use anyhow::Result;
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::domain::Login;
use partner_billing::store::Store;
use partner_billing::{licenses, plans, subscriptions};
use serde_json::json;

use super::Coded;
use crate::args;
use crate::output::{Output, opt, opt_utc, table, utc};

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Registers an end-user login (idempotent).
    Add {
        /// The end user's login (1-254 characters).
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
    },
    /// Lists every license of a registered login, direct and redeemed.
    Licenses {
        /// The end user's login.
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
    },
    /// What a registered login may use now and until when, one line per plan it holds.
    Entitlements {
        /// The end user's login.
        #[arg(long, value_name = "L", value_parser = args::login)]
        login: Login,
    },
}

pub async fn run(store: &Store, cmd: UserCommand, out: Output) -> Result<()> {
    match cmd {
        UserCommand::Add { login } => {
            let created = plans::add_user(store, &login, &Origin::cli()).await?;
            out.emit(
                &json!({ "login": login.as_str(), "created": created }),
                || {
                    if created {
                        format!("registered user {login}")
                    } else {
                        format!("user {login} was already registered")
                    }
                },
            )
        }
        UserCommand::Licenses { login } => user_licenses(store, &login, out).await,
        UserCommand::Entitlements { login } => entitlements(store, &login, out).await,
    }
}

async fn entitlements(store: &Store, login: &Login, out: Output) -> Result<()> {
    let held = subscriptions::entitlements(store, login)
        .await
        .map_err(|err| Coded::new(err, String::new()))?;
    out.emit(&held, || {
        let rows: Vec<Vec<String>> = held
            .entitlements
            .iter()
            .map(|e| {
                vec![
                    e.plan_slug.clone(),
                    if e.active_now { "yes" } else { "no" }.to_owned(),
                    utc(e.active_from_utc),
                    opt_utc(e.active_until_utc),
                ]
            })
            .collect();
        table(&["PLAN", "ACTIVE_NOW", "FROM", "UNTIL"], &rows)
    })
}

async fn user_licenses(store: &Store, login: &Login, out: Output) -> Result<()> {
    let list = licenses::user_licenses(store, login)
        .await
        .map_err(|err| Coded::new(err, String::new()))?;
    out.emit(&list, || {
        let rows: Vec<Vec<String>> = list
            .licenses
            .iter()
            .map(|l| {
                vec![
                    l.license_id.clone(),
                    l.plan_slug.clone(),
                    l.source.clone(),
                    opt(l.client_id.as_deref()),
                    opt(l.batch_id.as_deref()),
                    utc(l.created_utc),
                    utc(l.starts_utc),
                    opt_utc(l.expires_utc),
                    opt_utc(l.revoked_utc),
                ]
            })
            .collect();
        table(
            &[
                "LICENSE_ID",
                "PLAN",
                "SOURCE",
                "RESELLER",
                "BATCH_ID",
                "CREATED",
                "STARTS",
                "EXPIRES",
                "REVOKED",
            ],
            &rows,
        )
    })
}
