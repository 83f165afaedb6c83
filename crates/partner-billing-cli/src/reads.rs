//! Reseller commands that read back and void, with an API key, through the SDK: `license
//! list|show`, `promo list|void|void-codes`, `ledger` and `request show KEY`.
//!
//! A list prints one page (`--limit`, default 100) and, when more follow, the `--cursor` that
//! reads the next one (on stderr in text mode; as `nextCursor` with `--json`).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use partner_billing::domain::{IdempotencyKey, Login, PlanSlug};
use partner_billing::wire::{LicenseRecord, PromoBatchSummary};
use partner_billing_client::{LedgerQuery, LicenseQuery, PageQuery};

use crate::args::{self, Remote, usage};
use crate::output::{Output, fields, opt, opt_utc, table, utc};
use crate::partner::{ClientIdOpt, client};

/// Which page of a list.
#[derive(Debug, Args)]
pub struct PageOpts {
    /// Items per page, 1-500 [default: 100].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: Option<u32>,
    /// The cursor a previous page printed, to read the next one.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

#[derive(Debug, Args)]
pub struct LicenseListArgs {
    /// Only the licenses of this login.
    #[arg(long, value_name = "L", value_parser = args::login)]
    pub login: Option<Login>,
    /// Only the licenses of this plan.
    #[arg(long, value_name = "P", value_parser = args::plan_slug)]
    pub plan: Option<PlanSlug>,
    #[command(flatten)]
    pub page: PageOpts,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct LicenseShowArgs {
    /// The license (uuid).
    #[arg(long, value_name = "L")]
    pub license_id: String,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct PromoListArgs {
    #[command(flatten)]
    pub page: PageOpts,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct PromoVoidArgs {
    /// The batch to void (uuid).
    #[arg(long, value_name = "B")]
    pub batch_id: String,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct PromoVoidCodesArgs {
    /// Read the codes from FILE (one per line, or the CSV `promo generate --out` writes)
    /// instead of standard input.
    #[arg(long, value_name = "F")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct LedgerArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Only the entries of this product.
    #[arg(long, value_name = "P", value_parser = args::plan_slug)]
    pub product: Option<PlanSlug>,
    #[command(flatten)]
    pub page: PageOpts,
    #[command(flatten)]
    pub auth: ClientIdOpt,
}

#[derive(Debug, Args)]
pub struct RequestArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: RequestCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RequestCommand {
    /// Shows what became of a write sent with this idempotency key, without sending it again.
    Show {
        /// The idempotency key of the write.
        #[arg(value_parser = args::idempotency_key)]
        key: IdempotencyKey,
        #[command(flatten)]
        auth: ClientIdOpt,
    },
}

fn license_row(l: &LicenseRecord) -> Vec<String> {
    vec![
        l.license_id.clone(),
        l.login.clone(),
        l.plan_slug.clone(),
        l.source.clone(),
        utc(l.created_utc),
        utc(l.starts_utc),
        opt_utc(l.expires_utc),
        opt_utc(l.revoked_utc),
    ]
}

pub async fn license_list(base_url: &str, args: LicenseListArgs, out: Output) -> Result<ExitCode> {
    let page = client(base_url, args.auth)?
        .list_licenses(&LicenseQuery {
            login: args.login.map(|l| l.to_string()),
            plan_slug: args.plan.map(|p| p.to_string()),
            limit: args.page.limit,
            cursor: args.page.cursor,
        })
        .await?;
    out.emit(&page, || {
        let rows: Vec<Vec<String>> = page.licenses.iter().map(license_row).collect();
        table(
            &[
                "LICENSE", "LOGIN", "PLAN", "SOURCE", "CREATED", "STARTS", "EXPIRES", "REVOKED",
            ],
            &rows,
        )
    })?;
    out.more(page.next_cursor.as_deref());
    Ok(ExitCode::SUCCESS)
}

pub async fn license_show(base_url: &str, args: LicenseShowArgs, out: Output) -> Result<ExitCode> {
    let license = client(base_url, args.auth)?
        .license(&args.license_id)
        .await?;
    out.emit(&license, || crate::partner::license_fields(&license))?;
    Ok(ExitCode::SUCCESS)
}

fn batch_row(b: &PromoBatchSummary) -> Vec<String> {
    vec![
        b.batch_id.clone(),
        b.plan_slug.clone(),
        b.count.to_string(),
        b.redeemed.to_string(),
        utc(b.created_utc),
        opt_utc(b.voided_utc),
    ]
}

const BATCH_HEADERS: [&str; 6] = ["BATCH", "PLAN", "CODES", "REDEEMED", "CREATED", "VOIDED"];

pub async fn promo_list(base_url: &str, args: PromoListArgs, out: Output) -> Result<ExitCode> {
    let page = client(base_url, args.auth)?
        .list_promo_batches(&PageQuery {
            limit: args.page.limit,
            cursor: args.page.cursor,
        })
        .await?;
    out.emit(&page, || {
        let rows: Vec<Vec<String>> = page.promo_batches.iter().map(batch_row).collect();
        table(&BATCH_HEADERS, &rows)
    })?;
    out.more(page.next_cursor.as_deref());
    Ok(ExitCode::SUCCESS)
}

pub async fn promo_void(base_url: &str, args: PromoVoidArgs, out: Output) -> Result<ExitCode> {
    let batch = client(base_url, args.auth)?
        .void_promo_batch(&args.batch_id)
        .await?;
    out.emit(&batch, || table(&BATCH_HEADERS, &[batch_row(&batch)]))?;
    Ok(ExitCode::SUCCESS)
}

/// The codes of a text: one per line, or the first column of `promo generate`'s CSV (its
/// header row skipped); blank lines ignored.
fn codes_of(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split(',').next().unwrap_or("").trim())
        .filter(|code| !code.is_empty() && *code != "code")
        .map(str::to_owned)
        .collect()
}

pub async fn promo_void_codes(
    base_url: &str,
    args: PromoVoidCodesArgs,
    out: Output,
) -> Result<ExitCode> {
    let client = client(base_url, args.auth)?;
    let text = match &args.file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the codes from stdin")?;
            text
        }
    };
    let codes = codes_of(&text);
    if codes.is_empty() || codes.len() > partner_billing::limits::VOID_CODES_MAX {
        return Err(usage(format!(
            "give 1-{} codes, one per line (found {})",
            partner_billing::limits::VOID_CODES_MAX,
            codes.len()
        )));
    }
    let result = client.void_promo_codes(&codes).await?;
    out.emit(&result, || {
        let mut text = format!("voided: {}", result.voided);
        if !result.unknown.is_empty() {
            text.push_str(&format!(
                "\nnot this account's codes ({}), left as they are:",
                result.unknown.len()
            ));
            for code in &result.unknown {
                text.push_str("\n  ");
                text.push_str(code);
            }
        }
        text
    })?;
    Ok(ExitCode::SUCCESS)
}

pub async fn ledger(base_url: &str, args: LedgerArgs, out: Output) -> Result<ExitCode> {
    let page = client(base_url, args.auth)?
        .ledger_page(&LedgerQuery {
            product_slug: args.product.map(|p| p.to_string()),
            limit: args.page.limit,
            cursor: args.page.cursor,
        })
        .await?;
    out.emit(&page, || {
        let rows: Vec<Vec<String>> = page
            .entries
            .iter()
            .map(|e| {
                vec![
                    utc(e.created_utc),
                    e.product_slug.clone(),
                    e.kind.clone(),
                    e.units.to_string(),
                    e.balance_after.to_string(),
                    opt(e.reference.as_deref()),
                ]
            })
            .collect();
        table(
            &[
                "TIME",
                "PRODUCT",
                "KIND",
                "UNITS",
                "BALANCE AFTER",
                "REFERENCE",
            ],
            &rows,
        )
    })?;
    if !out.json {
        // Kept, the cursor reads only what is written later: print it even on the last page.
        let what = if page.has_more { "more" } else { "later" };
        eprintln!("{what}: run again with --cursor {}", page.next_cursor);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn request(base_url: &str, args: RequestArgs, out: Output) -> Result<ExitCode> {
    let RequestCommand::Show { key, auth } = args.command;
    let status = client(base_url, auth)?.request_status(key.as_str()).await?;
    out.emit(&status, || {
        fields(&[
            ("idempotencyKey", status.idempotency_key.clone()),
            ("status", status.status.clone()),
            ("operation", opt(status.operation.as_deref())),
            ("created", utc(status.created_utc)),
            ("licenseId", opt(status.license_id.as_deref())),
            ("batchId", opt(status.batch_id.as_deref())),
            ("orderPublicId", opt(status.order_public_id.as_deref())),
        ])
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_come_one_per_line_or_from_the_generate_csv() {
        let csv = "code,batch_id,order_public_id,plan_slug\nAAAA-BBBB-CCCC-DDDD,b,o,pro\n\nEEEE-FFFF-GGGG-HHHH,b,o,pro\n";
        assert_eq!(
            codes_of(csv),
            ["AAAA-BBBB-CCCC-DDDD", "EEEE-FFFF-GGGG-HHHH"]
        );
        assert_eq!(
            codes_of(" aaaa bbbb cccc dddd \r\n"),
            ["aaaa bbbb cccc dddd"]
        );
    }
}
