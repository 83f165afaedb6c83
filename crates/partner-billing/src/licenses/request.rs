//! A license request as the engine takes it: parsed, and its fingerprint (what makes two
//! requests the same request for their idempotency key).

use crate::domain::{IdempotencyKey, Login, PlanSlug};
use crate::error::{Error, Result};
use crate::idempotency::Fingerprint;
use crate::wire::IssueLicenseRequest;

/// A parsed license request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueLicense {
    pub plan: PlanSlug,
    pub login: Login,
    pub idempotency_key: IdempotencyKey,
}

impl TryFrom<&IssueLicenseRequest> for IssueLicense {
    type Error = Error;

    fn try_from(request: &IssueLicenseRequest) -> Result<Self> {
        Ok(Self {
            plan: PlanSlug::parse("planSlug", &request.plan_slug)?,
            login: Login::parse("login", &request.login)?,
            idempotency_key: IdempotencyKey::parse("idempotencyKey", &request.idempotency_key)?,
        })
    }
}

/// What makes two license requests the same request.
pub(super) fn fingerprint(request: &IssueLicense) -> Fingerprint {
    Fingerprint::new("license", &[request.plan.as_str(), request.login.as_str()])
}
