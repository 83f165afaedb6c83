//! One license request waiting in a lane for its group's transaction: what the decisions read
//! of it, and where its answer goes.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::error::Result;
use crate::idempotency::Outcome;
use crate::keys::PartnerAccount;
use crate::licenses::request::IssueLicense;
use crate::plans::PlanRow;
use crate::wire::License;

/// One request waiting for its group's transaction.
pub(super) struct Pending {
    pub(super) account: PartnerAccount,
    pub(super) request: IssueLicense,
    /// The plan, or `None` when no plan has the slug: refused inside the group, after the
    /// key, so that a reused key is told so whatever its new body names.
    pub(super) plan: Option<PlanRow>,
    pub(super) reply: oneshot::Sender<Result<Outcome<License>>>,
    /// The request's id: the group's lines about this request are written as the request's,
    /// though the group runs in a task of its own.
    pub(super) request_id: Option<Arc<str>>,
}
