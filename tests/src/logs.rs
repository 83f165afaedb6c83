//! Captures every log line of the test process at debug level, so tests can scan them for
//! secrets.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

static CAPTURED: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();

fn buffer() -> &'static Mutex<Vec<u8>> {
    CAPTURED.get_or_init(|| Mutex::new(Vec::new()))
}

struct Capture;

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        buffer()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber once per process, at debug level for every crate, writing
/// the server's own text lines (a request's lines carry its id).
pub fn install() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(|| Capture)
            .event_format(partner_billing_server::logging::TextLines)
            .try_init();
    });
}

/// Everything logged so far.
pub fn captured() -> String {
    String::from_utf8_lossy(&buffer().lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}
