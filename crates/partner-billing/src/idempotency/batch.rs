//! The batch entry point of the idempotency API, for a group transaction of many keyed requests
//! (`licenses/group`): every key's lock in one statement, every stored outcome checked in
//! memory by the rule of [`start`](super::start), every record written with the group's other
//! rows. Partner (account-scoped) keys only: the groups are partner writes.

use serde::Serialize;

use super::rule::{Keyed, KeyedRequest, Scope, StoredOutcome, check, response_body};
use crate::db::{Tx, dialect};
use crate::error::{Error, Result};
use crate::store::Store;

/// The keys of a group transaction, in the group's order, and which of them it holds.
pub(crate) struct KeyBatch<'a> {
    requests: Vec<KeyedRequest<'a>>,
    held: Vec<bool>,
}

/// The record of one success, as a group writes it: a JSON object with named members.
#[derive(Debug, Serialize)]
pub(crate) struct RecordRow<'a> {
    pub account_id: i64,
    pub key: &'a str,
    pub operation: &'static str,
    pub fingerprint: &'a str,
    pub response_body: String,
}

impl<'a> KeyBatch<'a> {
    /// Locks every key across replicas, in one statement (PostgreSQL's advisory locks; SQLite's
    /// write lock already covers every key). A key another replica holds is refused as in
    /// progress by [`check`](Self::check) unless a record answers it. The stored outcomes must
    /// be read by a later statement, whose snapshot follows the locks.
    pub(crate) async fn lock(
        store: &Store,
        tx: &mut Tx,
        requests: Vec<KeyedRequest<'a>>,
    ) -> Result<Self> {
        let names = requests
            .iter()
            .map(|r| r.scope.lock_name(r.key))
            .collect::<Vec<_>>();
        let held = dialect::try_lock_names(store.backend(), tx, &names).await?;
        if held.len() != requests.len() {
            return Err(Error::Internal("advisory locks miscounted".to_owned()));
        }
        Ok(Self { requests, held })
    }

    /// The keys, no lock taken before the read: a write that takes every recorded key's lock
    /// itself ([`lock_names`](Self::lock_names)) and fails whole if one is held.
    pub(crate) fn unlocked(requests: Vec<KeyedRequest<'a>>) -> Self {
        let held = vec![true; requests.len()];
        Self { requests, held }
    }

    /// The check of request `index`'s key against what is stored under it. `first_in_group`:
    /// no earlier request of the group has the same key (a later one is in progress behind it,
    /// unless a record answers it).
    pub(crate) fn check(
        &self,
        index: usize,
        stored: Option<&StoredOutcome>,
        first_in_group: bool,
    ) -> Result<Keyed<()>> {
        let held = first_in_group && self.held.get(index).copied().unwrap_or(false);
        check(held, stored, self.requests[index].fingerprint)
    }

    /// The record of request `index`'s success.
    pub(crate) fn record_row<T: Serialize>(
        &self,
        index: usize,
        outcome: &T,
    ) -> Result<RecordRow<'a>> {
        let request = &self.requests[index];
        let Scope::Account(account_id) = request.scope else {
            return Err(Error::Internal(
                "a batch records partner keys only".to_owned(),
            ));
        };
        Ok(RecordRow {
            account_id,
            key: request.key.as_str(),
            operation: request.fingerprint.operation,
            fingerprint: request.fingerprint.digest.as_str(),
            response_body: response_body(outcome)?,
        })
    }

    /// The names of the advisory locks of the keys at `indexes`.
    pub(crate) fn lock_names(&self, indexes: impl IntoIterator<Item = usize>) -> Vec<String> {
        indexes
            .into_iter()
            .map(|i| self.requests[i].scope.lock_name(self.requests[i].key))
            .collect()
    }
}
