//! `partner-billing admin key …`: a reseller's API keys, seen and revoked by the operator.

use anyhow::Result;
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::domain::{ApiKeyId, ClientId};
use partner_billing::keys;
use partner_billing::store::Store;
use serde_json::json;

use super::ClientIdArg;
use crate::args;
use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Lists an account's API keys.
    List(ClientIdArg),
    /// Revokes one of an account's API keys.
    Revoke {
        /// The account's client id (rsc_…).
        #[arg(long, value_name = "C", value_parser = args::client_id)]
        client_id: ClientId,
        /// The key to revoke (rsk_…).
        #[arg(long, value_name = "K", value_parser = args::api_key_id)]
        api_key_id: ApiKeyId,
    },
}

pub async fn run(store: &Store, cmd: KeyCommand, out: Output) -> Result<()> {
    match cmd {
        KeyCommand::List(ClientIdArg { client_id }) => {
            let list = keys::list_api_keys_for(store, &client_id).await?;
            out.emit(&list, || crate::keys::key_table(&list))
        }
        KeyCommand::Revoke {
            client_id,
            api_key_id,
        } => {
            keys::revoke_api_key_for(store, &client_id, api_key_id.as_str(), &Origin::cli())
                .await?;
            out.emit(
                &json!({ "clientId": client_id.as_str(), "apiKeyId": api_key_id.as_str(), "revoked": true }),
                || format!("revoked API key {api_key_id} of {client_id}"),
            )
        }
    }
}
