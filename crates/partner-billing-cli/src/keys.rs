//! `partner-billing keys …`: the account's API keys through a reseller panel session.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use partner_billing::wire::ApiKeyList;

use crate::output::{Output, opt, opt_utc, table, utc};

#[derive(Debug, Args)]
pub struct KeysArgs {}

pub async fn run(_base_url: &str, _args: KeysArgs, _out: Output) -> Result<ExitCode> {
    anyhow::bail!("not yet")
}

/// The API keys as an aligned table.
pub fn key_table(list: &ApiKeyList) -> String {
    let rows: Vec<Vec<String>> = list
        .api_keys
        .iter()
        .map(|k| {
            vec![
                k.api_key_id.clone(),
                k.status.clone(),
                utc(k.created_utc),
                opt_utc(k.last_used_utc),
                opt_utc(k.revoked_utc),
                opt(k.name.as_deref()),
            ]
        })
        .collect();
    table(&["API_KEY_ID", "STATUS", "CREATED", "LAST_USED", "REVOKED", "NAME"], &rows)
}
