//! `partner-billing-server` built with feature `fault-injection`, for the crash tests: the same
//! start-up, plus the crash points that `PARTNER_BILLING_CRASH_AT` arms. `cargo test -p
//! partner-billing-tests` always builds it with the feature, whatever else was built before.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    partner_billing_server::command::run().await
}
