//! The partner API's reads and voids: what a reseller's backend reads back about its own
//! account with its API key, and how it withdraws its own promo codes. (The reads that
//! share a path with a write, `GET /licenses`, `GET /licenses/{licenseId}` and
//! `GET /promo-batches`, are in `partner.rs`: poem-openapi keeps one API struct's operations
//! per path.)

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::{ApiResponse, OpenApi};

use partner_billing::audit::Actor;
use partner_billing::domain::PlanSlug;
use partner_billing::limits::VOID_CODES_MAX_BODY_BYTES;
use partner_billing::reads::{self, PageRequest};
use partner_billing::voids;
use partner_billing::wire::{
    LedgerPage, LicenseRecord, PromoBatchSummary, RequestStatus, VoidPromoCodesRequest,
    VoidPromoCodesResult,
};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::auth::PartnerAuth;
use crate::body::LargeJsonBody;
use crate::errors;
use crate::origin::RequestFacts;
use crate::problem::OpResult;

/// Read and void endpoints under `/v1/billing/partner`.
pub struct ReadsApi;

#[derive(ApiResponse)]
pub enum LicenseResponse {
    /// The license.
    #[oai(status = 200)]
    Ok(Json<LicenseRecord>),
}

#[derive(ApiResponse)]
pub enum LedgerResponse {
    /// One page of the account's ledger, oldest first.
    #[oai(status = 200)]
    Ok(Json<LedgerPage>),
}

#[derive(ApiResponse)]
pub enum RequestStatusResponse {
    /// What became of the request.
    #[oai(status = 200)]
    Ok(Json<RequestStatus>),
}

#[derive(ApiResponse)]
pub enum VoidPromoBatchResponse {
    /// The batch, with `voidedUtc` set (unchanged when it was voided before).
    #[oai(status = 200)]
    Ok(Json<PromoBatchSummary>),
}

#[derive(ApiResponse)]
pub enum VoidPromoCodesResponse {
    /// How many of the account's codes are voided, and which sent codes are not its own.
    #[oai(status = 200)]
    Ok(Json<VoidPromoCodesResult>),
}

#[OpenApi(prefix_path = "/v1/billing/partner", tag = "ApiTags::Partner")]
impl ReadsApi {
    /// The account's ledger, oldest first: a change feed.
    ///
    /// Every change of the account's balances (credits, licenses, promo batches,
    /// adjustments). `nextCursor` is never null: follow it while `hasMore` is true; keep the
    /// last one and send it later to get only the entries written since. The feed never skips
    /// an entry, even one whose writer committed late.
    #[oai(path = "/ledger", method = "get", operation_id = "getLedger")]
    async fn ledger(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        /// Only the entries of this product.
        #[oai(name = "productSlug")]
        product_slug: Query<Option<String>>,
        /// Entries per page, 1–500 (default 100).
        limit: Query<Option<i64>>,
        /// The `nextCursor` of an earlier page.
        cursor: Query<Option<String>>,
    ) -> OpResult<LedgerResponse, errors::PartnerList> {
        let account = auth.verify(&state.store).await?;
        let product = product_slug
            .0
            .as_deref()
            .map(|p| PlanSlug::parse("productSlug", p))
            .transpose()?;
        let page = PageRequest::parse(limit.0, cursor.0.as_deref())?;
        Ok(LedgerResponse::Ok(Json(
            reads::ledger(&state.store, account.account_id, product.as_ref(), &page).await?,
        )))
    }

    /// What became of a write sent with this idempotency key.
    ///
    /// `succeeded` with the ids it created (never a code), or `in_progress`; 404
    /// `Reseller.RequestNotFound` when there is no record of it (it never arrived, or it was
    /// refused: refusals change nothing and are not recorded). Learn the outcome of a timed-out
    /// request without sending it again. Percent-encode `/`, `%`, `?` and `#` in the key.
    #[oai(
        path = "/requests/:idempotencyKey",
        method = "get",
        operation_id = "getRequest"
    )]
    async fn request_status(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        /// The idempotency key of the write.
        #[oai(name = "idempotencyKey")]
        idempotency_key: Path<String>,
    ) -> OpResult<RequestStatusResponse, errors::GetRequest> {
        let account = auth.verify(&state.store).await?;
        Ok(RequestStatusResponse::Ok(Json(
            reads::request_status(&state.store, account.account_id, &idempotency_key.0).await?,
        )))
    }

    /// Void a whole promo batch.
    ///
    /// None of its codes redeems any more (410 `Promo.CodeVoided`); licenses already redeemed
    /// stay; no unit is returned. Voiding again answers the batch unchanged. Sends the event
    /// `promo_batch.voided`.
    #[oai(
        path = "/promo-batches/:batchId/void",
        method = "post",
        operation_id = "voidPromoBatch"
    )]
    async fn void_batch(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        facts: RequestFacts,
        /// The batch (uuid).
        #[oai(name = "batchId")]
        batch_id: Path<String>,
    ) -> OpResult<VoidPromoBatchResponse, errors::VoidPromoBatch> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::ApiKey(account.api_key_id.to_string()));
        Ok(VoidPromoBatchResponse::Ok(Json(
            voids::void_batch(
                &state.store,
                voids::Voider::Reseller {
                    account_id: account.account_id,
                },
                &batch_id.0,
                &origin,
            )
            .await?,
        )))
    }

    /// Void listed promo codes.
    ///
    /// 1–1000 codes, as printed or typed (case, spaces and hyphens do not matter); this body
    /// may be up to 64 KiB. Each code of one of the account's batches redeems no more (410
    /// `Promo.CodeVoided`); every other code (unknown, malformed or another account's) is
    /// listed in `unknown` as it was sent. Voiding again changes nothing; no unit is returned.
    #[oai(
        path = "/promo-codes/void",
        method = "post",
        operation_id = "voidPromoCodes"
    )]
    async fn void_codes(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        facts: RequestFacts,
        body: LargeJsonBody<VoidPromoCodesRequest, VOID_CODES_MAX_BODY_BYTES>,
    ) -> OpResult<VoidPromoCodesResponse, errors::VoidPromoCodes> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::ApiKey(account.api_key_id.to_string()));
        Ok(VoidPromoCodesResponse::Ok(Json(
            voids::void_codes(&state.store, account.account_id, &body.0.codes, &origin).await?,
        )))
    }
}
