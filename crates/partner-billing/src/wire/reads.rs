//! The JSON shapes of what a reseller's backend reads back with its API key (licenses, promo
//! batches, the ledger, the outcome of a request) and of voiding its own promo codes.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use poem_openapi::Object;

/// A license of the account: issued by it directly, or redeemed from one of its promo codes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct LicenseRecord {
    /// Identifies the license (uuid).
    pub license_id: String,
    /// The product granted.
    pub plan_slug: String,
    /// The end user who holds it.
    pub login: String,
    /// `direct` (issued with the API key) or `promo` (redeemed from one of the account's codes).
    pub source: String,
    /// The batch of the redeemed code; null for a direct license.
    pub batch_id: Option<String>,
    /// When it was granted (Unix seconds, UTC).
    pub created_utc: i64,
    /// When its period begins (Unix seconds, UTC): the grant time, or the end of the login's
    /// latest unexpired license of the plan when it renews one early.
    pub starts_utc: i64,
    /// When its period ends (Unix seconds, UTC); null when the plan has no subscription length.
    pub expires_utc: Option<i64>,
    /// When it was revoked (Unix seconds, UTC); null unless revoked.
    pub revoked_utc: Option<i64>,
}

/// `GET /v1/billing/partner/licenses`: one page, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct LicenseList {
    /// At most `limit` licenses.
    pub licenses: Vec<LicenseRecord>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A promo batch as the account's lists show it: counts, never a code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct PromoBatchSummary {
    /// Groups the codes (uuid).
    pub batch_id: String,
    /// The purchase (uuid).
    pub order_public_id: String,
    /// The product the codes unlock.
    pub plan_slug: String,
    /// How many codes the batch holds.
    pub count: i64,
    /// How many redemptions its codes have had.
    pub redeemed: i64,
    /// When the whole batch was voided (Unix seconds, UTC); null while it is not.
    pub voided_utc: Option<i64>,
    /// When it was generated (Unix seconds, UTC).
    pub created_utc: i64,
    /// Until when a retry with the same idempotency key returns the codes again.
    pub recoverable_until_utc: i64,
}

/// `GET /v1/billing/partner/promo-batches`: one page, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct PromoBatchList {
    /// At most `limit` batches.
    pub promo_batches: Vec<PromoBatchSummary>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
}

/// One ledger entry: a change of one product's balance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
#[cfg_attr(feature = "db", derive(sqlx::FromRow))]
pub struct LedgerEntryRecord {
    /// Identifies the entry; unique, never reused.
    pub entry_id: i64,
    /// The product whose balance changed.
    pub product_slug: String,
    /// `credit`, `license`, `promo_batch` or `adjustment`.
    pub kind: String,
    /// The change: positive for credits, negative for charges.
    pub units: i64,
    /// The product's balance right after this entry.
    pub balance_after: i64,
    /// What the entry paid for or refers to (a license id, a batch's order id), if anything.
    pub reference: Option<String>,
    /// When it was written (Unix seconds, UTC).
    pub created_utc: i64,
}

/// `GET /v1/billing/partner/ledger`: one page, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct LedgerPage {
    /// At most `limit` entries, oldest first.
    pub entries: Vec<LedgerEntryRecord>,
    /// Never null: pass it as `cursor` for the next page, or keep it and send it later to get
    /// only the entries written since (a change feed).
    pub next_cursor: String,
    /// Whether more entries are already there to read.
    pub has_more: bool,
}

/// `GET /v1/billing/partner/requests/{idempotencyKey}`: what became of a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct RequestStatus {
    /// The key asked about.
    pub idempotency_key: String,
    /// `succeeded` (its effects are committed) or `in_progress` (still running).
    pub status: String,
    /// `license` or `promo_batch`; null only while a request runs on another server and the
    /// operation is not known yet.
    pub operation: Option<String>,
    /// When it succeeded, or when this answer was given for a request in progress (Unix
    /// seconds, UTC).
    pub created_utc: i64,
    /// The license it issued; null otherwise.
    pub license_id: Option<String>,
    /// The promo batch it generated; null otherwise.
    pub batch_id: Option<String>,
    /// The purchase of that batch; null otherwise.
    pub order_public_id: Option<String>,
}

/// Every value of [`RequestStatus::status`].
pub const REQUEST_STATUSES: [&str; 2] = ["succeeded", "in_progress"];
/// Every value of [`RequestStatus::operation`].
pub const REQUEST_OPERATIONS: [&str; 2] = ["license", "promo_batch"];

/// `POST /v1/billing/partner/promo-codes/void`: the codes to withdraw.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(
    feature = "openapi",
    oai(rename_all = "camelCase", deny_unknown_fields)
)]
pub struct VoidPromoCodesRequest {
    /// 1–1000 codes as printed or typed: case, spaces and hyphens do not matter.
    pub codes: Vec<String>,
}

impl std::fmt::Debug for VoidPromoCodesRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoidPromoCodesRequest")
            .field("codes", &format_args!("[{} redacted]", self.codes.len()))
            .finish()
    }
}

/// What voiding listed codes did.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase"))]
pub struct VoidPromoCodesResult {
    /// How many of the account's codes are voided by this request or were already.
    pub voided: i64,
    /// Each sent code that is not one of the account's (unknown, malformed, or another
    /// account's), as it was sent.
    pub unknown: Vec<String>,
}

impl std::fmt::Debug for VoidPromoCodesResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoidPromoCodesResult")
            .field("voided", &self.voided)
            .field(
                "unknown",
                &format_args!("[{} redacted]", self.unknown.len()),
            )
            .finish()
    }
}
