//! The partner API: what a reseller's backend calls with its API key.

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::{ApiResponse, OpenApi};

use partner_billing::audit::Actor;
use partner_billing::licenses::{self, IssueLicense};
use partner_billing::promo::{self, GeneratePromoBatch};
use partner_billing::reads::{self, LicenseFilter, PageRequest};
use partner_billing::subscriptions::{self, Revoker};
use partner_billing::wire::{
    Balances, GeneratePromoBatchRequest, IssueLicenseRequest, License, LicenseList, LicenseRecord,
    PromoBatch, PromoBatchList,
};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::auth::PartnerAuth;
use crate::body::JsonBody;
use crate::errors;
use crate::origin::RequestFacts;
use crate::problem::OpResult;

/// Endpoints under `/v1/billing/partner`.
pub struct PartnerApi;

#[derive(ApiResponse)]
pub enum IssueLicenseResponse {
    /// The license. On a retry with the same idempotency key, the original license again,
    /// with `Idempotent-Replayed: true` and no second charge.
    #[oai(status = 200)]
    Ok(
        Json<License>,
        #[oai(header = "Idempotent-Replayed")] Option<String>,
    ),
}

#[derive(ApiResponse)]
pub enum PromoBatchResponse {
    /// The batch and its plaintext codes. On a retry with the same idempotency key within 72
    /// hours, the original batch again, with `Idempotent-Replayed: true` and no second charge.
    #[oai(status = 200)]
    Ok(
        Json<PromoBatch>,
        #[oai(header = "Idempotent-Replayed")] Option<String>,
    ),
}

#[derive(ApiResponse)]
pub enum RevokeLicenseResponse {
    /// The license with `revokedUtc`. Revoking it again answers the same license, unchanged.
    #[oai(status = 200)]
    Ok(Json<LicenseRecord>),
}

#[derive(ApiResponse)]
pub enum LicenseListResponse {
    /// One page of the account's licenses, newest first.
    #[oai(status = 200)]
    Ok(Json<LicenseList>),
}

#[derive(ApiResponse)]
pub enum PromoBatchListResponse {
    /// One page of the account's promo batches, newest first; never a code.
    #[oai(status = 200)]
    Ok(Json<PromoBatchList>),
}

#[derive(ApiResponse)]
pub enum BalancesResponse {
    /// The account's balance of every product ever credited to it, sorted by slug.
    #[oai(status = 200)]
    Ok(Json<Balances>),
}

#[OpenApi(prefix_path = "/v1/billing/partner", tag = "ApiTags::Partner")]
impl PartnerApi {
    /// Remaining quota per product.
    ///
    /// Lists every product ever credited to the account, zero balances included, sorted by
    /// slug. Each `productSlug` is valid as `planSlug` in requests.
    #[oai(path = "/balances", method = "get", operation_id = "getBalances")]
    async fn balances(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
    ) -> OpResult<BalancesResponse, errors::GetBalances> {
        Ok(BalancesResponse::Ok(Json(
            auth.balances(&state.store).await?,
        )))
    }

    /// Issue one subscription directly to a registered end user.
    ///
    /// Costs one unit of the plan's quota, charged in the same transaction that records the
    /// license. `idempotencyKey` makes retries safe: the same key with the same request returns
    /// the original license and charges nothing; with a different request it is refused (422).
    #[oai(path = "/licenses", method = "post", operation_id = "issueLicense")]
    async fn issue_license(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        body: JsonBody<IssueLicenseRequest>,
    ) -> OpResult<IssueLicenseResponse, errors::IssueLicense> {
        let account = auth.verify(&state.store).await?;
        let request = IssueLicense::try_from(&body.0)?;
        let outcome = licenses::issue_license(&state.store, &account, request).await?;
        let replayed = outcome.replayed.then(|| "true".to_owned());
        Ok(IssueLicenseResponse::Ok(Json(outcome.value), replayed))
    }

    /// One of the account's licenses.
    ///
    /// Any other id, another account's or a malformed one included, is 404
    /// `License.NotFound`.
    #[oai(
        path = "/licenses/:licenseId",
        method = "get",
        operation_id = "getLicense"
    )]
    async fn get_license(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        /// The license (uuid).
        #[oai(name = "licenseId")]
        license_id: Path<String>,
    ) -> OpResult<crate::reads::LicenseResponse, errors::GetLicense> {
        let account = auth.verify(&state.store).await?;
        Ok(crate::reads::LicenseResponse::Ok(Json(
            partner_billing::reads::get_license(&state.store, account.account_id, &license_id.0)
                .await?,
        )))
    }

    /// Revoke a license.
    ///
    /// The account's own licenses: those it issued and those redeemed from its promo codes; any
    /// other id, malformed ones included, is 404 `License.NotFound`. The license grants nothing
    /// from `revokedUtc` on; the login's later licenses of the plan move earlier by its unused
    /// time, so the login keeps exactly the time of its other licenses. No unit is returned.
    /// Idempotent: revoking again answers the same license and changes nothing.
    #[oai(
        path = "/licenses/:licenseId",
        method = "delete",
        operation_id = "revokeLicense"
    )]
    async fn revoke_license(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        facts: RequestFacts,
        /// The license to revoke (uuid).
        #[oai(name = "licenseId")]
        license_id: Path<String>,
    ) -> OpResult<RevokeLicenseResponse, errors::RevokeLicense> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::ApiKey(account.api_key_id.to_string()));
        let license = subscriptions::revoke_license(
            &state.store,
            Revoker::api_key(&account),
            &license_id.0,
            &origin,
        )
        .await?;
        Ok(RevokeLicenseResponse::Ok(Json(license)))
    }

    /// Generate a batch of promo codes.
    ///
    /// The whole batch is charged up front: `count` units, whether or not the codes are ever
    /// redeemed. A balance below `count` refuses the request whole (402) and consumes nothing.
    /// If codes cannot be produced the answer is 500 `Reseller.PromoGenerationFailed`: nothing
    /// charged, nothing issued, and a retry with the same key runs again. After a timeout, retry
    /// with the same `idempotencyKey`: you get the original codes (for about 72 hours; then 410
    /// `Reseller.PromoCodesExpired`, never a second charge), or 409 `Reseller.RequestInProgress`
    /// (wait and retry). Redemptions per code and code validity are set by the operator on the
    /// plan.
    #[oai(
        path = "/promo-batches",
        method = "post",
        operation_id = "generatePromoBatch"
    )]
    async fn generate_promo_batch(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        body: JsonBody<GeneratePromoBatchRequest>,
    ) -> OpResult<PromoBatchResponse, errors::GeneratePromoBatch> {
        let account = auth.verify(&state.store).await?;
        let request = GeneratePromoBatch::try_from(&body.0)?;
        let outcome = promo::generate_promo_batch(&state.store, &account, request).await?;
        let replayed = outcome.replayed.then(|| "true".to_owned());
        Ok(PromoBatchResponse::Ok(Json(outcome.value), replayed))
    }

    /// The account's licenses, newest first.
    ///
    /// Those issued with the account's keys and those redeemed from its promo codes. Pages by
    /// keyset: pass the answer's `nextCursor` as `cursor` for the next page (null on the last);
    /// a page never repeats or skips a license because others were issued meanwhile.
    #[oai(path = "/licenses", method = "get", operation_id = "listLicenses")]
    async fn list_licenses(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        /// Only the licenses of this login (compared exactly).
        login: Query<Option<String>>,
        /// Only the licenses of this plan.
        #[oai(name = "planSlug")]
        plan_slug: Query<Option<String>>,
        /// Licenses per page, 1–500 (default 100).
        limit: Query<Option<i64>>,
        /// The `nextCursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> OpResult<LicenseListResponse, errors::PartnerList> {
        let account = auth.verify(&state.store).await?;
        let filter = LicenseFilter::parse(login.0.as_deref(), plan_slug.0.as_deref())?;
        let page = PageRequest::parse(limit.0, cursor.0.as_deref())?;
        Ok(LicenseListResponse::Ok(Json(
            reads::list_licenses(&state.store, account.account_id, &filter, &page).await?,
        )))
    }

    /// The account's promo batches, newest first: counts, never a code.
    ///
    /// `redeemed` counts the redemptions of the batch's codes; `voidedUtc` says when the whole
    /// batch was voided. Pages by keyset like the license list.
    #[oai(
        path = "/promo-batches",
        method = "get",
        operation_id = "listPromoBatches"
    )]
    async fn list_promo_batches(
        &self,
        state: Data<&AppState>,
        auth: PartnerAuth,
        /// Batches per page, 1–500 (default 100).
        limit: Query<Option<i64>>,
        /// The `nextCursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> OpResult<PromoBatchListResponse, errors::PartnerList> {
        let account = auth.verify(&state.store).await?;
        let page = PageRequest::parse(limit.0, cursor.0.as_deref())?;
        Ok(PromoBatchListResponse::Ok(Json(
            reads::list_promo_batches(&state.store, account.account_id, &page).await?,
        )))
    }
}
