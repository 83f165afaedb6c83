//! Turns to generate a promo batch: a few per process, fewer per account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::limits::PROMO_BATCHES_PER_ACCOUNT;

/// The process's permits and each account's. An account's ([`PROMO_BATCHES_PER_ACCOUNT`]) stay
/// below the global count (`Capacity::promo_batches`), so one account's batches never hold
/// every slot and other accounts are not queued behind them (docs/security.md). An account's
/// further batches wait holding no global slot.
#[derive(Debug, Clone)]
pub(crate) struct PromoPermits {
    global: Arc<Semaphore>,
    accounts: Arc<Mutex<HashMap<i64, Arc<Semaphore>>>>,
}

impl PromoPermits {
    /// `at_once` batches per process, [`PROMO_BATCHES_PER_ACCOUNT`] of them per account.
    pub(crate) fn new(at_once: usize) -> Self {
        Self {
            global: Arc::new(Semaphore::new(at_once)),
            accounts: Arc::default(),
        }
    }

    /// Waits for a turn: first one of the account's [`PROMO_BATCHES_PER_ACCOUNT`], then one
    /// of the process's.
    pub(crate) async fn acquire(&self, account_id: i64) -> Result<PromoPermit<'_>> {
        let closed = |_| Error::Internal("promo permits closed".to_owned());
        let account = {
            let mut map = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(
                map.entry(account_id)
                    .or_insert_with(|| Arc::new(Semaphore::new(PROMO_BATCHES_PER_ACCOUNT))),
            )
        };
        let account = account.acquire_owned().await.map_err(closed)?;
        let global = self.global.acquire().await.map_err(closed)?;
        Ok(PromoPermit {
            _account: account,
            _global: global,
        })
    }
}

/// A turn to generate a promo batch: the account's slot and a global one, released on drop.
#[derive(Debug)]
pub(crate) struct PromoPermit<'a> {
    _account: tokio::sync::OwnedSemaphorePermit,
    _global: tokio::sync::SemaphorePermit<'a>,
}
