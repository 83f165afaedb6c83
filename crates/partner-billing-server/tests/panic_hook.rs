//! The server's panic hook logs where a panic happened, never what it said: a panic message
//! can quote the data it failed on. Its own test binary, as a panic hook is process-wide.

use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_panic_is_logged_without_its_message() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    partner_billing_server::command::install_panic_hook();
    let canary = "rsk_CanarySecretThatMustNotLeak0";
    let outcome = std::panic::catch_unwind(|| {
        panic!("failed while handling {canary}");
    });
    let _ = std::panic::take_hook();
    assert!(outcome.is_err());
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("panic"), "the panic is logged: {log}");
    assert!(log.contains("panic_hook.rs"), "with its location: {log}");
    assert!(!log.contains("Canary"), "but not its message: {log}");
}
