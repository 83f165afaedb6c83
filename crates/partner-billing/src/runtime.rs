//! The runtime context of one store: what a process keeps beside the database, shared by
//! every clone of the store. The clock, the concurrency limits, the master key, the keys in flight, the promo
//! permits, the webhook settings and worker bell, the armed faults, and a slot for the
//! license group queues.
//!
//! Like [`crate::db`], this layer imports nothing from the domain modules above it: the
//! license group queues are typed by `licenses::group`, which alone fills their `Slot`.

mod capacity;
mod in_flight;
mod promo_permits;
mod webhook_settings;

use std::any::Any;
use std::sync::{Arc, OnceLock, RwLock};

pub(crate) use capacity::Capacity;
pub(crate) use in_flight::{InFlight, InFlightGuard};
pub(crate) use promo_permits::{PromoPermit, PromoPermits};
pub use webhook_settings::{DEFAULT_BACKOFF, WebhookSettings, parse_backoff};

use crate::clock::Clock;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::faults::Faults;

/// Process state beside the database. Cheap to clone; clones share everything but the
/// builder settings, which are fixed before the store is shared.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub(crate) clock: Clock,
    pub(crate) master_key: Option<Arc<MasterKey>>,
    pub(crate) in_flight: InFlight,
    pub(crate) capacity: Capacity,
    pub(crate) promo_permits: PromoPermits,
    pub(crate) group_commit: bool,
    pub(crate) license_groups: Arc<Slot>,
    pub(crate) plans: Arc<Slot>,
    pub(crate) webhooks: Arc<WebhookSettings>,
    pub(crate) webhook_wake: Arc<tokio::sync::Notify>,
    pub(crate) faults: Faults,
    pub(crate) audit_observer: AuditObserver,
}

impl Runtime {
    /// A fresh context on `clock` for a process of `capacity`: no master key, group commit on,
    /// default webhook settings.
    pub(crate) fn new(clock: Clock, capacity: Capacity) -> Self {
        Self {
            clock,
            master_key: None,
            in_flight: InFlight::default(),
            capacity,
            promo_permits: PromoPermits::new(capacity.promo_batches),
            group_commit: true,
            license_groups: Arc::default(),
            plans: Arc::default(),
            webhooks: Arc::default(),
            webhook_wake: Arc::default(),
            faults: Faults::default(),
            audit_observer: AuditObserver::default(),
        }
    }

    /// The master key that promo codes and webhook secrets need.
    pub(crate) fn master_key(&self) -> Result<&MasterKey> {
        self.master_key
            .as_deref()
            .ok_or_else(|| Error::Internal("no master key configured".to_owned()))
    }
}

/// Told the action of each audit entry once its transaction has committed (the server counts
/// them in a metric); nothing by default.
#[derive(Clone, Default)]
pub(crate) struct AuditObserver(Arc<RwLock<Option<AuditObserverFn>>>);

type AuditObserverFn = Arc<dyn Fn(&'static str) + Send + Sync>;

impl AuditObserver {
    /// Replaces the observer (every clone of the store sees the new one).
    pub(crate) fn set(&self, observe: AuditObserverFn) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(observe);
    }

    pub(crate) fn observe(&self, action: &'static str) {
        let observer = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(observe) = observer {
            observe(action);
        }
    }
}

impl std::fmt::Debug for AuditObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditObserver").finish_non_exhaustive()
    }
}

/// State a module above this layer keeps for the life of the store, held here without its
/// type so that this layer imports nothing above it; made on first use.
#[derive(Default)]
pub(crate) struct Slot(OnceLock<Box<dyn Any + Send + Sync>>);

impl Slot {
    /// The state, made with `T::default()` on first use. One slot holds one type: its owner
    /// is the only caller.
    pub(crate) fn get_or_default<T: Any + Default + Send + Sync>(&self) -> &T {
        match self.0.get_or_init(|| Box::new(T::default())).downcast_ref() {
            Some(state) => state,
            None => unreachable!("a slot is read as the one type its owner stores"),
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}
