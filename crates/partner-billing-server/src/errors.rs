//! The errors each operation can answer with, one set per operation: what its handler's
//! library calls can fail with, plus what the layers before it add on its route (the browser
//! guard's 403s, the body's 400 and 413, a path parameter's 400, the credentials' 401).
//! The document publishes exactly these; debug builds check every answer against them.
//! `Request.NotFound` and `Request.MethodNotAllowed` belong to no operation: they answer
//! requests that match none.

use crate::problem::{Challenge, error_set};

const API_KEY: Option<Challenge> = Some(Challenge::Basic);
const BEARER: Option<Challenge> = Some(Challenge::Bearer);

error_set!(
    /// `GET /healthz`: no credentials; 503 when the database does not answer.
    Health, None, [InternalError, ServiceUnavailable]
);

error_set!(
    /// `GET /v1/billing/partner/balances`.
    GetBalances, API_KEY, [BrowserOriginForbidden, InternalError, ServiceUnavailable]
);

error_set!(
    /// `POST /v1/billing/partner/licenses`.
    IssueLicense, API_KEY, [
        ValidationFailed, InsufficientQuota, BrowserOriginForbidden, RequestInProgress,
        PayloadTooLarge, UnknownPlan, UnknownLogin, IdempotencyKeyReused, RateLimited,
        LicenseAlreadyActive, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/partner/promo-batches`.
    GeneratePromoBatch, API_KEY, [
        ValidationFailed, InsufficientQuota, BrowserOriginForbidden, RequestInProgress,
        PromoCodesExpired, PayloadTooLarge, UnknownPlan, IdempotencyKeyReused,
        PromoGenerationFailed, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/product/users`.
    RegisterUser, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PayloadTooLarge, InternalError,
        ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/product/promo-redemptions`.
    RedeemPromoCode, BEARER, [
        ValidationFailed, BrowserOriginForbidden, CodeNotFound, RequestInProgress, CodeExhausted,
        AlreadyRedeemed, CodeExpired, CodeVoided, PayloadTooLarge, UnknownLogin,
        IdempotencyKeyReused, TooManyAttempts, RateLimited, LicenseAlreadyActive, InternalError,
        ServiceUnavailable,
    ]
);

error_set!(
    /// `GET /v1/billing/product/users/{login}/licenses`.
    ListUserLicenses, BEARER, [
        ValidationFailed, BrowserOriginForbidden, UnknownLogin, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `GET /v1/billing/product/users/{login}/entitlements`.
    GetUserEntitlements, BEARER, [
        ValidationFailed, BrowserOriginForbidden, UnknownLogin, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `DELETE /v1/billing/partner/licenses/{licenseId}`.
    RevokeLicense, API_KEY, [
        BrowserOriginForbidden, LicenseNotFound, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/resellers/sessions`: the body's credentials, not a header; a failed
    /// sign-in is the same empty 401 (with the panel's Bearer challenge).
    CreateSession, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PayloadTooLarge, RateLimited, InternalError,
        ServiceUnavailable,
    ]
);

error_set!(
    /// Panel reads without parameters (`getAccount`, `listApiKeys`, `listWebhookEndpoints`)
    /// and signing out.
    PanelRead, BEARER, [
        BrowserOriginForbidden, PanelSessionRequired, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `GET /v1/billing/resellers/me/activity`: a bad `limit` or `cursor` is a 400 naming it.
    ListActivity, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, InternalError,
        ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/resellers/me/api-keys`.
    CreateApiKey, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, ApiKeyLimitReached,
        PayloadTooLarge, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `DELETE /v1/billing/resellers/me/api-keys/{apiKeyId}`.
    RevokeApiKey, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, ApiKeyNotFound,
        InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/resellers/me/api-keys/{apiKeyId}/roll`.
    RollApiKey, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, ApiKeyNotFound,
        ApiKeyLimitReached, PayloadTooLarge, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `PUT /v1/billing/resellers/me/password`: a wrong `currentPassword` is a 400 naming it,
    /// and counts as a failed sign-in (past the limit, 429).
    ChangePassword, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, PayloadTooLarge,
        RateLimited, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/resellers/me/webhook-endpoints`.
    CreateWebhookEndpoint, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired,
        WebhookEndpointLimitReached, PayloadTooLarge, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// One webhook endpoint by id: delete, test, deliveries.
    WebhookEndpointById, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, WebhookEndpointNotFound,
        InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `PUT /v1/billing/resellers/me/alerts/{productSlug}`.
    SetLowBalanceAlert, BEARER, [
        ValidationFailed, BrowserOriginForbidden, PanelSessionRequired, PayloadTooLarge,
        UnknownPlan, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// The partner API's lists (`listLicenses`, `listPromoBatches`, `getLedger`): `limit`,
    /// `cursor` and the filters can be malformed.
    PartnerList, API_KEY, [
        ValidationFailed, BrowserOriginForbidden, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `GET /v1/billing/partner/licenses/{licenseId}`.
    GetLicense, API_KEY, [
        BrowserOriginForbidden, LicenseNotFound, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `GET /v1/billing/partner/requests/{idempotencyKey}`.
    GetRequest, API_KEY, [
        BrowserOriginForbidden, RequestNotFound, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/partner/promo-batches/{batchId}/void`.
    VoidPromoBatch, API_KEY, [
        BrowserOriginForbidden, PromoBatchNotFound, InternalError, ServiceUnavailable,
    ]
);

error_set!(
    /// `POST /v1/billing/partner/promo-codes/void`.
    VoidPromoCodes, API_KEY, [
        ValidationFailed, BrowserOriginForbidden, PayloadTooLarge, InternalError,
        ServiceUnavailable,
    ]
);
