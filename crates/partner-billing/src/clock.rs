//! Time, from a clock that tests can move.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The system clock plus an offset that tests advance; production never touches the offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_seconds: Arc<AtomicI64>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self::default()
    }

    /// Unix seconds, UTC.
    pub fn now_utc(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        i64::try_from(now).unwrap_or(i64::MAX) + self.offset_seconds.load(Ordering::Relaxed)
    }

    /// Moves this clock (and every copy of it) forward by `seconds`.
    pub fn advance(&self, seconds: i64) {
        self.offset_seconds.fetch_add(seconds, Ordering::Relaxed);
    }
}
