//! Generate a promo batch and write its codes to a CSV file.
//!
//! ```sh
//! PARTNER_BILLING_CLIENT_ID=rsc_… PARTNER_BILLING_SECRET=rss_… \
//! cargo run -p partner-billing-client --example promo_batch_csv -- pro 100 campaign-2026-11 codes.csv
//! ```
//!
//! The answer is the only place the plaintext codes appear. If writing the file fails, run the
//! example again with the same idempotency key within 72 hours: the same codes come back and
//! nothing is charged again.

use std::io::Write;

use partner_billing_client::{Credentials, PartnerClient};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [plan, count, key, path] = args.as_slice() else {
        eprintln!("usage: promo_batch_csv PLAN COUNT IDEMPOTENCY_KEY FILE.csv");
        std::process::exit(2);
    };
    let count: u32 = count.parse()?;
    let base_url = std::env::var("PARTNER_BILLING_BASE_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned());
    let client = PartnerClient::new(
        base_url,
        Credentials::new(
            std::env::var("PARTNER_BILLING_CLIENT_ID")?,
            std::env::var("PARTNER_BILLING_SECRET")?,
        ),
    )?;
    let issued = client.generate_promo_batch(plan, count, Some(key)).await?;
    let batch = &issued.value;

    // Write to a temporary file beside the target, then rename: a crash never leaves half a
    // list that looks complete.
    let partial = format!("{path}.partial");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    writeln!(file, "code,plan_slug,batch_id,order_public_id,created_utc")?;
    for code in &batch.codes {
        writeln!(
            file,
            "{},{},{},{},{}",
            code.code, batch.plan_slug, batch.batch_id, batch.order_public_id, batch.created_utc
        )?;
    }
    file.into_inner()?.sync_all()?;
    std::fs::rename(&partial, path)?;
    eprintln!(
        "{} codes of {} written to {path} (batch {}, remaining {}, replayed: {})",
        batch.codes.len(),
        batch.plan_slug,
        batch.batch_id,
        batch.remaining_balance,
        issued.replayed
    );
    Ok(())
}
