//! `partner-billing promo generate`: a batch of promo codes through the SDK, printed on stdout
//! or written to a new private CSV file.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use partner_billing::domain::{IdempotencyKey, PlanSlug};
use partner_billing::limits::PROMO_RECOVERY_WINDOW_SECONDS;
use partner_billing::wire::{PromoBatch, PromoCode};
use partner_billing_client::{Error as SdkError, Issued, MAX_PROMO_BATCH_COUNT};
use serde::Serialize;

use crate::args::{self, Remote, usage};
use crate::output::{Output, fields, utc};
use crate::partner::{ClientIdOpt, client, says_nothing_was_charged, write_failure};

/// The header row of the `--out` CSV file.
const CSV_HEADER: [&str; 4] = ["code", "batch_id", "order_public_id", "plan_slug"];

const GENERATE_HELP: &str = "\
Costs one unit of the plan per code, charged when the batch is generated (not on redemption);
unredeemed codes are not refunded. The codes appear only in this answer: keep them safe.

Without --out the codes go to stdout, one per line (with --json: one JSON object holding the
batch, `idempotencyKey` and `replayed`); the summary, with the idempotency key, goes to stderr,
so stdout can be piped.

With --out FILE the codes are written to FILE, a new file created with mode 0600, as CSV with
the header row `code,batch_id,order_public_id,plan_slug` and one row per code; the summary goes
to stdout. An existing FILE is never overwritten: the command refuses before contacting the
service, so nothing is charged.

Every run prints the idempotency key it used, on failure too. Running the command again with
the same --idempotency-key (and the same plan and count) never charges twice: within about 72
hours it returns the same codes, afterwards it fails with Reseller.PromoCodesExpired.";

#[derive(Debug, Args)]
pub struct PromoArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: PromoCommand,
}

#[derive(Debug, Subcommand)]
pub enum PromoCommand {
    /// Generates a batch of promo codes; costs one unit of the plan per code, charged now.
    #[command(after_help = GENERATE_HELP)]
    Generate {
        /// The plan's slug (a product from `balance`).
        #[arg(long, value_name = "P", value_parser = args::plan_slug)]
        plan: PlanSlug,
        /// How many codes (1-1000).
        #[arg(
            long,
            value_name = "N",
            allow_negative_numbers = true,
            value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PROMO_BATCH_COUNT))
        )]
        count: u32,
        /// Reuse the key a failed run printed to retry it safely (or to fetch the same codes
        /// again within 72 hours); generated when absent.
        #[arg(long, value_name = "K", value_parser = args::idempotency_key)]
        idempotency_key: Option<IdempotencyKey>,
        /// Write the codes to FILE (a new file, mode 0600, CSV) instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[command(flatten)]
        auth: ClientIdOpt,
    },
    /// Lists the account's promo batches, newest first: counts, never a code.
    List(crate::reads::PromoListArgs),
    /// Voids a whole batch: its codes redeem no more; nothing is refunded.
    Void(crate::reads::PromoVoidArgs),
    /// Voids listed codes (one per line, or the CSV `promo generate --out` writes) from
    /// --file or standard input; codes that are not this account's are listed back.
    VoidCodes(crate::reads::PromoVoidCodesArgs),
}

/// A batch with the idempotency key it was generated under (stdout, `--json`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GeneratedBatch<'a> {
    #[serde(flatten)]
    batch: &'a PromoBatch,
    idempotency_key: &'a str,
    replayed: bool,
}

/// What `--json` prints when the codes went to a file.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WrittenBatch<'a> {
    out: String,
    order_public_id: &'a str,
    batch_id: &'a str,
    plan_slug: &'a str,
    count: usize,
    remaining_balance: i64,
    created_utc: i64,
    idempotency_key: &'a str,
    replayed: bool,
}

pub async fn run(base_url: &str, cmd: PromoCommand, out: Output) -> Result<ExitCode> {
    let (plan, count, idempotency_key, out_path, auth) = match cmd {
        PromoCommand::Generate {
            plan,
            count,
            idempotency_key,
            out: out_path,
            auth,
        } => (plan, count, idempotency_key, out_path, auth),
        PromoCommand::List(args) => return crate::reads::promo_list(base_url, args, out).await,
        PromoCommand::Void(args) => return crate::reads::promo_void(base_url, args, out).await,
        PromoCommand::VoidCodes(args) => {
            return crate::reads::promo_void_codes(base_url, args, out).await;
        }
    };
    let client = client(base_url, auth)?;
    // Chosen here, not in the SDK, so that a failed run can print it for the retry.
    let key = idempotency_key.unwrap_or_else(IdempotencyKey::generate);
    // Created before the request: a file that is in the way costs nothing.
    let file = out_path.map(PendingFile::create).transpose()?;

    let result = tokio::select! {
        result = client.generate_promo_batch(plan.as_str(), count, Some(key.as_str())) => result,
        Ok(()) = tokio::signal::ctrl_c() => {
            drop(file);
            eprintln!(
                "error: interrupted; the outcome is unknown: retry with --idempotency-key {key}"
            );
            std::process::exit(130);
        }
    };
    let issued = match result {
        Ok(issued) => issued,
        Err(err) => return Err(promo_failure(&err, &key)),
    };
    match file {
        Some(file) => to_file(file, &issued, out)?,
        None => to_stdout(&issued, out).map_err(|err| charged_but_lost(&err, &key))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The one-line error of a failed generation, with the key to retry it.
fn promo_failure(err: &SdkError, key: &IdempotencyKey) -> anyhow::Error {
    match err {
        SdkError::PromoGenerationFailed { .. } => {
            let text = err.to_string();
            let text = text.trim_end_matches('.');
            if says_nothing_was_charged(text) {
                anyhow!("{text} (retry with --idempotency-key {key})")
            } else {
                anyhow!("{text} (nothing was charged; retry with --idempotency-key {key})")
            }
        }
        SdkError::PromoCodesExpired { problem } => {
            let text = err.to_string();
            let text = text.trim_end_matches('.');
            let order = problem.order_public_id.as_deref().unwrap_or("?");
            let batch = problem.batch_id.as_deref().unwrap_or("?");
            anyhow!(
                "{text} (order {order}, batch {batch}: generated more than 72 hours ago, its \
                 codes are gone for good; nothing was charged again; idempotency key {key})"
            )
        }
        _ => write_failure(err, key),
    }
}

/// Codes on stdout, one per line, and the summary on stderr; or one JSON object on stdout.
fn to_stdout(issued: &Issued<PromoBatch>, out: Output) -> Result<()> {
    let batch = &issued.value;
    let shown = GeneratedBatch {
        batch,
        idempotency_key: &issued.idempotency_key,
        replayed: issued.replayed,
    };
    out.emit(&shown, || {
        batch
            .codes
            .iter()
            .map(|code| code.code.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    if !out.json {
        let summary = summary(issued, format!("{} (on stdout)", batch.codes.len()));
        // The codes are out; a summary that cannot be shown is no reason to fail.
        let _ = writeln!(io::stderr().lock(), "{summary}");
    }
    Ok(())
}

/// Codes into the file, then the summary on stdout.
fn to_file(file: PendingFile, issued: &Issued<PromoBatch>, out: Output) -> Result<()> {
    let batch = &issued.value;
    let path = file.path.clone();
    let key = &issued.idempotency_key;
    file.write_codes(batch)
        .map_err(|err| charged_but_lost(&err, key))?;
    let shown = WrittenBatch {
        out: path.display().to_string(),
        order_public_id: &batch.order_public_id,
        batch_id: &batch.batch_id,
        plan_slug: &batch.plan_slug,
        count: batch.codes.len(),
        remaining_balance: batch.remaining_balance,
        created_utc: batch.created_utc,
        idempotency_key: &issued.idempotency_key,
        replayed: issued.replayed,
    };
    out.emit(&shown, || {
        summary(
            issued,
            format!("{} written to {}", batch.codes.len(), path.display()),
        )
    })
    .map_err(|err| {
        anyhow!(
            "{err:#} (the codes were written to {}; idempotency key {key})",
            path.display()
        )
    })
}

/// The codes were paid for but could not be delivered: how to get them again.
fn charged_but_lost(err: &anyhow::Error, key: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "{err:#}; the batch was charged: get the same codes again within 72 hours with \
         --idempotency-key {key}"
    )
}

fn summary(issued: &Issued<PromoBatch>, codes: String) -> String {
    let batch = &issued.value;
    let mut pairs = vec![
        ("codes", codes),
        ("plan", batch.plan_slug.clone()),
        ("batchId", batch.batch_id.clone()),
        ("orderPublicId", batch.order_public_id.clone()),
        ("remainingBalance", batch.remaining_balance.to_string()),
        ("created", utc(batch.created_utc)),
        (
            "recoverableUntil",
            format!(
                "about {} with the same idempotency key",
                utc(batch
                    .created_utc
                    .saturating_add(PROMO_RECOVERY_WINDOW_SECONDS))
            ),
        ),
        ("idempotencyKey", issued.idempotency_key.clone()),
    ];
    if issued.replayed {
        pairs.push((
            "replayed",
            "yes: generated before under this key; nothing charged again".to_owned(),
        ));
    }
    fields(&pairs)
}

/// The `--out` file: created (new, 0600) before the request, removed again unless the codes
/// were written to it in full.
struct PendingFile {
    path: PathBuf,
    file: Option<File>,
}

impl PendingFile {
    fn create(path: PathBuf) -> Result<Self> {
        match create_private(&path) {
            Ok(file) => Ok(Self {
                path,
                file: Some(file),
            }),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Err(usage(format!(
                "{} already exists: refusing to overwrite it (nothing was sent, nothing charged)",
                path.display()
            ))),
            Err(err) => Err(anyhow::Error::new(err).context(format!(
                "cannot create {} (nothing was sent, nothing charged)",
                path.display()
            ))),
        }
    }

    /// Writes the CSV and syncs it; on failure the partial file is removed.
    fn write_codes(mut self, batch: &PromoBatch) -> Result<()> {
        let file = self.file.take().context("the output file is closed")?;
        let written = write_csv(file, batch);
        match written {
            Ok(()) => {
                // Complete: keep it.
                self.path = PathBuf::new();
                Ok(())
            }
            Err(err) => {
                Err(anyhow::Error::new(err)
                    .context(format!("cannot write {}", self.path.display())))
            }
        }
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A new file only its owner can read and write; never an existing one.
fn create_private(path: &Path) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn write_csv(file: File, batch: &PromoBatch) -> io::Result<()> {
    let mut writer = BufWriter::new(file);
    writer.write_all(csv(batch).as_bytes())?;
    writer.flush()?;
    writer.get_ref().sync_all()
}

/// The CSV text: the header row, then one row per code (the project's one CSV writer).
fn csv(batch: &PromoBatch) -> String {
    use partner_billing::csv::{Cell, line};
    let mut bytes = Vec::with_capacity(64 * (batch.codes.len() + 1));
    bytes.extend(line(&CSV_HEADER.map(Cell::Text)));
    for PromoCode { code } in &batch.codes {
        bytes.extend(line(&[
            Cell::Text(code),
            Cell::Text(&batch.batch_id),
            Cell::Text(&batch.order_public_id),
            Cell::Text(&batch.plan_slug),
        ]));
    }
    String::from_utf8(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> PromoBatch {
        PromoBatch {
            order_public_id: "order-1".to_owned(),
            batch_id: "batch-1".to_owned(),
            plan_slug: "pro".to_owned(),
            codes: vec![
                PromoCode {
                    code: "ABCD-EFGH-JKMN-PQRS".to_owned(),
                },
                PromoCode {
                    code: "we,ird\"".to_owned(),
                },
            ],
            remaining_balance: 3,
            created_utc: 0,
        }
    }

    #[test]
    fn csv_has_a_header_and_one_row_per_code() {
        assert_eq!(
            csv(&batch()),
            "code,batch_id,order_public_id,plan_slug\n\
             ABCD-EFGH-JKMN-PQRS,batch-1,order-1,pro\n\
             \"we,ird\"\"\",batch-1,order-1,pro\n"
        );
    }

    #[test]
    fn the_file_is_new_private_and_removed_unless_complete() {
        let dir = partner_billing_testkit::TempDir::new();
        let path = dir.path.join("codes.csv");

        let pending = PendingFile::create(path.clone()).unwrap();
        assert!(path.exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let refused = PendingFile::create(path.clone()).err().unwrap();
        assert!(refused.to_string().contains("already exists"), "{refused}");
        drop(pending);
        assert!(!path.exists(), "an unwritten file is removed");

        PendingFile::create(path.clone())
            .unwrap()
            .write_codes(&batch())
            .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("code,batch_id,order_public_id,plan_slug\n"));
        assert_eq!(text.lines().count(), 3);
    }
}
