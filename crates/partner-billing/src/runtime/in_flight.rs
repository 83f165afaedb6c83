//! The process-local registry of idempotency keys in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Scoped idempotency keys (`account:1:key`, `operator:token:2:key`) that a request of this
/// process is running, each with the operation it runs (`license`, `promo_batch`,
/// `promo_redemption`), for the request lookup.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    keys: Arc<Mutex<HashMap<String, &'static str>>>,
}

impl InFlight {
    /// Claims `entry` until the guard drops, saying which operation runs under it; `None`
    /// while another claim of it runs.
    pub(crate) fn claim(&self, entry: String, operation: &'static str) -> Option<InFlightGuard> {
        let mut set = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if set.contains_key(&entry) {
            return None;
        }
        set.insert(entry.clone(), operation);
        Some(InFlightGuard {
            set: Arc::clone(&self.keys),
            entry,
        })
    }
}

impl InFlight {
    /// The operation running under `entry` in this process, if one is.
    pub(crate) fn operation_of(&self, entry: &str) -> Option<&'static str> {
        let set = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        set.get(entry).copied()
    }
}

/// Releases an in-flight claim when dropped, however the request ends.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    set: Arc<Mutex<HashMap<String, &'static str>>>,
    entry: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.entry);
    }
}
