//! The process-local registry of idempotency keys in flight.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Scoped idempotency keys (`account:1:key`, `operator:token:2:key`) that a request of this
/// process is running.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    keys: Arc<Mutex<HashSet<String>>>,
}

impl InFlight {
    /// Claims `entry` until the guard drops; a second claim while the first runs is
    /// [`Error::RequestInProgress`].
    pub(crate) fn claim(&self, entry: String) -> Result<InFlightGuard> {
        let mut set = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if !set.insert(entry.clone()) {
            return Err(Error::RequestInProgress);
        }
        Ok(InFlightGuard {
            set: Arc::clone(&self.keys),
            entry,
        })
    }
}

/// Releases an in-flight claim when dropped, however the request ends.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    set: Arc<Mutex<HashSet<String>>>,
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
