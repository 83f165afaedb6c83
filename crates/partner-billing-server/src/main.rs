//! `partner-billing-server`: the Partner Billing HTTP service.
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// A refusal to start (a bad master key, an unreachable database, a port in use) is one line
/// on stderr, `error: ` and the causes, whatever `RUST_BACKTRACE` says; exit status 1.
#[tokio::main]
async fn main() -> ExitCode {
    match partner_billing_server::command::run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

/// The text with every line break and control character turned into a space.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
