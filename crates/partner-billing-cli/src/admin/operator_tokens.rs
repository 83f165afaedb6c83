//! `partner-billing admin operator-token …`: operator tokens, the product backend's credential
//! on the product API (`/v1/billing/product/…`).

use anyhow::{Result, anyhow};
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::operators;
use partner_billing::store::Store;
use serde_json::json;

use crate::output::{Output, fields, opt_utc, table, utc};

const CREATE_HELP: &str = "\
The token (rso_…) is printed this once and stored only as its SHA-256: keep it in the product
backend's secret store. The backend sends it as `Authorization: Bearer rso_…` on
/v1/billing/product/…. Names stay unique, revoked tokens included.";

#[derive(Debug, Subcommand)]
pub enum OperatorTokenCommand {
    /// Creates an operator token for the product's backend; it is printed this once.
    #[command(after_help = CREATE_HELP)]
    Create {
        /// A unique name (1-64 characters), e.g. product-backend.
        #[arg(long, value_name = "N")]
        name: String,
    },
    /// Lists the operator tokens, revoked ones included (never the tokens themselves).
    List,
    /// Revokes an operator token, from its next request on.
    Revoke {
        /// The token's name.
        #[arg(long, value_name = "N")]
        name: String,
    },
}

pub async fn run(store: &Store, cmd: OperatorTokenCommand, out: Output) -> Result<()> {
    match cmd {
        OperatorTokenCommand::Create { name } => {
            let created = match operators::create_operator_token(store, &name, &Origin::cli()).await
            {
                Ok(created) => created,
                Err(partner_billing::Error::AlreadyExists(_)) => {
                    return Err(anyhow!(
                        "an operator token named {name:?} exists already (names stay unique, \
                         revoked tokens included): choose another name"
                    ));
                }
                Err(err) => return Err(err.into()),
            };
            eprintln!(
                "warning: the token is shown this once and cannot be recovered; store it now, in \
                 the product backend's secrets only"
            );
            out.emit(
                &json!({
                    "name": created.name,
                    "token": created.token.expose(),
                    "createdUtc": created.created_utc,
                }),
                || {
                    fields(&[
                        ("name", created.name.clone()),
                        ("token", created.token.expose().to_owned()),
                        ("created", utc(created.created_utc)),
                    ])
                },
            )
        }
        OperatorTokenCommand::List => {
            let tokens = operators::list_operator_tokens(store).await?;
            out.emit(&json!({ "operatorTokens": tokens }), || {
                let rows: Vec<Vec<String>> = tokens
                    .iter()
                    .map(|t| {
                        vec![
                            t.name.clone(),
                            t.status.clone(),
                            utc(t.created_utc),
                            opt_utc(t.last_used_utc),
                            opt_utc(t.revoked_utc),
                        ]
                    })
                    .collect();
                table(
                    &["NAME", "STATUS", "CREATED", "LAST_USED", "REVOKED"],
                    &rows,
                )
            })
        }
        OperatorTokenCommand::Revoke { name } => {
            operators::revoke_operator_token(store, &name, &Origin::cli())
                .await
                .map_err(|err| match err {
                    partner_billing::Error::NotFound(_) => {
                        anyhow!("no operator token named {name:?}")
                    }
                    other => other.into(),
                })?;
            out.emit(&json!({ "name": name, "revoked": true }), || {
                format!("revoked operator token {name}; it is refused from its next request on")
            })
        }
    }
}
