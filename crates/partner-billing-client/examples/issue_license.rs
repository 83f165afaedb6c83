//! Issue one license with retries that never charge twice.
//!
//! ```sh
//! PARTNER_BILLING_BASE_URL=http://127.0.0.1:8080 PARTNER_BILLING_CLIENT_ID=rsc_… \
//! PARTNER_BILLING_SECRET=rss_… cargo run -p partner-billing-client --example issue_license -- pro alice@example.com order-4711
//! ```
//!
//! The idempotency key (third argument) should come from your own records (an order id): after
//! a crash or an unknown outcome, run again with the same key and you get the same license,
//! `replayed: true`, and no second charge.

use std::time::Duration;

use partner_billing_client::{Credentials, Error, PartnerClient, RetryPolicy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(plan), Some(login), Some(key)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: issue_license PLAN LOGIN IDEMPOTENCY_KEY");
        std::process::exit(2);
    };
    let base_url = std::env::var("PARTNER_BILLING_BASE_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned());
    let credentials = Credentials::new(
        std::env::var("PARTNER_BILLING_CLIENT_ID")?,
        std::env::var("PARTNER_BILLING_SECRET")?,
    );
    // The SDK retries transport failures, timeouts, 503 and RequestInProgress with the same
    // key; here up to 8 attempts, backing off from 250 ms to 10 s.
    let policy = RetryPolicy::default()
        .with_max_attempts(8)
        .with_backoff(Duration::from_millis(250), Duration::from_secs(10));
    let client = PartnerClient::new(base_url, credentials)?.with_retry_policy(policy);

    match client.issue_license(&plan, &login, Some(&key)).await {
        Ok(issued) => {
            println!(
                "license {} for {} on {} (remaining {}; replayed: {})",
                issued.value.license_id,
                issued.value.login,
                issued.value.plan_slug,
                issued.value.remaining_balance,
                issued.replayed
            );
            Ok(())
        }
        Err(Error::InsufficientQuota { .. }) => {
            eprintln!("the balance of {plan} is empty; nothing was charged");
            std::process::exit(1)
        }
        Err(error) if !error.is_definite() => {
            // Retries are used up and the outcome is unknown: keep the key and run again later.
            eprintln!("outcome unknown ({error}); retry later with the key {key}");
            std::process::exit(75)
        }
        Err(error) => Err(error.into()),
    }
}
