//! The product API: what the product's own backend calls with an operator token.

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::{ApiResponse, OpenApi};

use partner_billing::audit::Actor;
use partner_billing::domain::Login;
use partner_billing::licenses;
use partner_billing::plans;
use partner_billing::redemption::{self, RedeemPromoCode};
use partner_billing::subscriptions;
use partner_billing::wire::{
    EndUser, Entitlements, RedeemPromoCodeRequest, RedeemedLicense, RegisterUserRequest,
    UserLicenses,
};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::auth::OperatorAuth;
use crate::body::JsonBody;
use crate::errors;
use crate::origin::RequestFacts;
use crate::problem::OpResult;

/// Endpoints under `/v1/billing/product`.
pub struct ProductApi;

#[derive(ApiResponse)]
pub enum RegisterUserResponse {
    /// The login is now registered.
    #[oai(status = 201)]
    Created(Json<EndUser>),
    /// The login was registered before; nothing changed.
    #[oai(status = 200)]
    Existing(Json<EndUser>),
}

#[derive(ApiResponse)]
pub enum RedeemResponse {
    /// The license granted. On a retry with the same idempotency key, the same license again,
    /// with `Idempotent-Replayed: true`.
    #[oai(status = 200)]
    Ok(
        Json<RedeemedLicense>,
        #[oai(header = "Idempotent-Replayed")] Option<String>,
    ),
}

#[derive(ApiResponse)]
pub enum UserLicensesResponse {
    /// The login and every license it holds, expired ones included, oldest first.
    #[oai(status = 200)]
    Ok(Json<UserLicenses>),
}

#[derive(ApiResponse)]
pub enum EntitlementsResponse {
    /// The login and what it may use, one entry per plan, sorted by slug.
    #[oai(status = 200)]
    Ok(Json<Entitlements>),
}

#[OpenApi(prefix_path = "/v1/billing/product", tag = "ApiTags::Product")]
impl ProductApi {
    /// Register an end user's login.
    ///
    /// Idempotent: 201 the first time, 200 with the same body afterwards. Licenses, issued by a
    /// reseller or redeemed from a promo code, name a registered login.
    #[oai(path = "/users", method = "post", operation_id = "registerUser")]
    async fn register_user(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        facts: RequestFacts,
        body: JsonBody<RegisterUserRequest>,
    ) -> OpResult<RegisterUserResponse, errors::RegisterUser> {
        let operator = auth.verify(&state.store).await?;
        let login = Login::parse("login", &body.0.login)?;
        let origin = facts.origin(Actor::OperatorToken(operator.name));
        let registration = plans::register_user(&state.store, &login, &origin).await?;
        Ok(if registration.created {
            RegisterUserResponse::Created(Json(registration.user))
        } else {
            RegisterUserResponse::Existing(Json(registration.user))
        })
    }

    /// Redeem a promo code for a registered login.
    ///
    /// Grants a license of the code's plan, paid for by the reseller that bought the code when
    /// its batch was generated: redemption charges nothing. The code is normalised first (case,
    /// spaces and hyphens ignored, `I`/`L` read as `1`, `O` as `0`). An unknown code and input
    /// that is not a code get the same 404 `Promo.CodeNotFound`. Past the batch's validity: 410
    /// `Promo.CodeExpired`; voided by its reseller (the code or its batch): 410
    /// `Promo.CodeVoided`; redemptions used up: 409 `Promo.CodeExhausted`; the same login
    /// again: 409 `Promo.AlreadyRedeemed`. Failed redemptions are limited per login (10 a
    /// minute): then 429 `Promo.TooManyAttempts` with `Retry-After`. `idempotencyKey` makes
    /// retries safe: the same key with the same request returns the same license.
    #[oai(
        path = "/promo-redemptions",
        method = "post",
        operation_id = "redeemPromoCode"
    )]
    async fn redeem_promo_code(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        body: JsonBody<RedeemPromoCodeRequest>,
    ) -> OpResult<RedeemResponse, errors::RedeemPromoCode> {
        let operator = auth.verify(&state.store).await?;
        let request = RedeemPromoCode::try_from(&body.0)?;
        let outcome = redemption::redeem_promo_code(&state.store, &operator, request).await?;
        let replayed = outcome.replayed.then(|| "true".to_owned());
        Ok(RedeemResponse::Ok(Json(outcome.value), replayed))
    }

    /// Every license of a registered login.
    ///
    /// Direct licenses (`source: direct`, issued by a reseller) and redeemed ones (`source:
    /// promo`, with the code's `batchId`), expired ones included, oldest first. An unregistered
    /// login is 422 `Reseller.UnknownLogin`.
    #[oai(
        path = "/users/:login/licenses",
        method = "get",
        operation_id = "listUserLicenses"
    )]
    async fn user_licenses(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        /// The login, percent-encoded: 1–254 characters, no control characters.
        #[oai(validator(
            min_length = 1,
            max_length = 254,
            custom = "&crate::text_rule::NO_CONTROL"
        ))]
        login: Path<String>,
    ) -> OpResult<UserLicensesResponse, errors::ListUserLicenses> {
        auth.verify(&state.store).await?;
        let login = Login::parse("login", &login.0)?;
        Ok(UserLicensesResponse::Ok(Json(
            licenses::user_licenses(&state.store, &login).await?,
        )))
    }

    /// What a login may use now, and until when.
    ///
    /// For the product's sign-in path: one entry per plan for which the login holds an
    /// unrevoked license that has not ended, sorted by slug. `activeFromUtc` is the start of the
    /// earliest such license, `activeUntilUtc` the end of the latest (null for a perpetual
    /// plan), `activeNow` whether `activeFromUtc` has come. A plan not listed is not held. An
    /// unregistered login is 422 `Reseller.UnknownLogin`.
    #[oai(
        path = "/users/:login/entitlements",
        method = "get",
        operation_id = "getUserEntitlements"
    )]
    async fn user_entitlements(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        /// The login, percent-encoded: 1–254 characters, no control characters.
        #[oai(validator(
            min_length = 1,
            max_length = 254,
            custom = "&crate::text_rule::NO_CONTROL"
        ))]
        login: Path<String>,
    ) -> OpResult<EntitlementsResponse, errors::GetUserEntitlements> {
        auth.verify(&state.store).await?;
        let login = Login::parse("login", &login.0)?;
        Ok(EntitlementsResponse::Ok(Json(
            subscriptions::entitlements(&state.store, &login).await?,
        )))
    }
}
