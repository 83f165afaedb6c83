//! `partner-billing-server`: the Partner Billing HTTP service.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    partner_billing_server::command::run().await
}
