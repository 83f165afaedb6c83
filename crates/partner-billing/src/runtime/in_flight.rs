//! The process-local registry of idempotency keys in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Scoped idempotency keys (`account:1:key`, `operator:token:2:key`) that a request of this
/// process is running, each with the operation it runs (`license`, `promo_batch`, or `""`
/// when the caller did not say), for the request lookup.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    keys: Arc<Mutex<HashMap<String, &'static str>>>,
}

impl InFlight {
    /// Claims `entry` until the guard drops; a second claim while the first runs is
    /// [`Error::RequestInProgress`].
    pub(crate) fn claim(&self, entry: String) -> Result<InFlightGuard> {
        self.claim_for(entry, "")
    }

    /// [`claim`](Self::claim), saying which operation runs under the key.
    pub(crate) fn claim_for(
        &self,
        entry: String,
        operation: &'static str,
    ) -> Result<InFlightGuard> {
        let mut set = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if set.contains_key(&entry) {
            return Err(Error::RequestInProgress);
        }
        set.insert(entry.clone(), operation);
        Ok(InFlightGuard {
            set: Arc::clone(&self.keys),
            entry,
        })
    }
}

impl InFlight {
    /// The operation running under `entry` in this process, if one is (`""` when its caller
    /// did not say which).
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
