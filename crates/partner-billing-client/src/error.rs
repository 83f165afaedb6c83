//! The SDK's error type: one variant per API error code (docs/design.md), plus the failures that
//! happen before or around the HTTP exchange.

use std::time::Duration;

use partner_billing::wire::{ErrorCode, Problem};

/// Everything a call can fail with.
///
/// Variants named after an API error code carry the server's RFC 9457 [`Problem`] body (boxed,
/// to keep `Result`s small). No variant ever holds a secret: the API's error bodies never carry
/// one, and the SDK never formats credentials into messages.
///
/// Two questions decide what a caller should do next:
/// - [`Error::is_definite`]: is the outcome known? A definite error means the server refused
///   the request and nothing was charged. An indefinite one (transport failure, timeout,
///   `Service.Unavailable`, `Internal.Error`, `Reseller.RequestInProgress`) means a write may or
///   may not have happened: retry it with the **same** idempotency key to find out, never with a
///   new one.
/// - [`Error::code`]: the stable API error code, when the server sent one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `400 Request.ValidationFailed`: a malformed body or parameter; `problem.field` names it.
    #[error("Request.ValidationFailed: {}", problem.detail)]
    ValidationFailed { problem: Box<Problem> },
    /// `413 Request.PayloadTooLarge`: the body is over 16 KiB.
    #[error("Request.PayloadTooLarge: {}", problem.detail)]
    PayloadTooLarge { problem: Box<Problem> },
    /// `404 Request.NotFound` / `405 Request.MethodNotAllowed`: no such route or method; the
    /// base URL is probably wrong.
    #[error("{}: {}", problem.code, problem.detail)]
    NoSuchRoute { problem: Box<Problem> },
    /// `403 Request.BrowserOriginForbidden`: the request carried browser headers.
    #[error("Request.BrowserOriginForbidden: {}", problem.detail)]
    BrowserOriginForbidden { problem: Box<Problem> },
    /// `403 Reseller.PanelSessionRequired`: an API key was used on a panel endpoint.
    #[error("Reseller.PanelSessionRequired: {}", problem.detail)]
    PanelSessionRequired { problem: Box<Problem> },
    /// `402 Reseller.InsufficientQuota`: the balance is below the cost; nothing was consumed.
    #[error("Reseller.InsufficientQuota: {}", problem.detail)]
    InsufficientQuota { problem: Box<Problem> },
    /// `422 Reseller.UnknownPlan`: a well-formed slug that names no plan.
    #[error("Reseller.UnknownPlan: {}", problem.detail)]
    UnknownPlan { problem: Box<Problem> },
    /// `422 Reseller.UnknownLogin`: the login is not registered.
    #[error("Reseller.UnknownLogin: {}", problem.detail)]
    UnknownLogin { problem: Box<Problem> },
    /// `422 Reseller.IdempotencyKeyReused`: the key was used before for a different request.
    #[error("Reseller.IdempotencyKeyReused: {}", problem.detail)]
    IdempotencyKeyReused { problem: Box<Problem> },
    /// `409 Reseller.RequestInProgress`: a request with the same key is still running. Wait
    /// (`retry_after`) and retry with the same key; the SDK does so itself within its
    /// [`RetryPolicy`](crate::RetryPolicy).
    #[error("Reseller.RequestInProgress: {}", problem.detail)]
    RequestInProgress {
        problem: Box<Problem>,
        retry_after: Option<Duration>,
    },
    /// `409 Reseller.ApiKeyLimitReached`: the account already has five active keys.
    #[error("Reseller.ApiKeyLimitReached: {}", problem.detail)]
    ApiKeyLimitReached { problem: Box<Problem> },
    /// `404 Reseller.ApiKeyNotFound`: no such key on this account.
    #[error("Reseller.ApiKeyNotFound: {}", problem.detail)]
    ApiKeyNotFound { problem: Box<Problem> },
    /// `404 Reseller.WebhookEndpointNotFound`: no such webhook endpoint on this account.
    #[error("Reseller.WebhookEndpointNotFound: {}", problem.detail)]
    WebhookEndpointNotFound { problem: Box<Problem> },
    /// `409 Reseller.WebhookEndpointLimitReached`: the account already has five endpoints.
    #[error("Reseller.WebhookEndpointLimitReached: {}", problem.detail)]
    WebhookEndpointLimitReached { problem: Box<Problem> },
    /// `410 Reseller.PromoCodesExpired`: a batch retried after its recovery window (about 72
    /// hours); its plaintext codes are gone for good while its quota stays spent. The batch is
    /// named by `problem.order_public_id` and `problem.batch_id`. Nothing was charged again.
    #[error("Reseller.PromoCodesExpired: {}", problem.detail)]
    PromoCodesExpired { problem: Box<Problem> },
    /// `500 Reseller.PromoGenerationFailed`: no codes were produced and nothing was charged; a
    /// retry with the same key is allowed. A definite outcome, unlike other 5xx.
    #[error("Reseller.PromoGenerationFailed: {}", problem.detail)]
    PromoGenerationFailed { problem: Box<Problem> },
    /// `404 Promo.CodeNotFound`: an unknown or malformed promo code.
    #[error("Promo.CodeNotFound: {}", problem.detail)]
    CodeNotFound { problem: Box<Problem> },
    /// `410 Promo.CodeExpired`: the code is past its batch's validity.
    #[error("Promo.CodeExpired: {}", problem.detail)]
    CodeExpired { problem: Box<Problem> },
    /// `409 Promo.CodeExhausted`: the code's redemptions are used up.
    #[error("Promo.CodeExhausted: {}", problem.detail)]
    CodeExhausted { problem: Box<Problem> },
    /// `409 Promo.AlreadyRedeemed`: this login redeemed this code before.
    #[error("Promo.AlreadyRedeemed: {}", problem.detail)]
    AlreadyRedeemed { problem: Box<Problem> },
    /// `429 Promo.TooManyAttempts`: too many failed redemptions for a login; wait `retry_after`.
    #[error("Promo.TooManyAttempts: {}", problem.detail)]
    TooManyAttempts {
        problem: Box<Problem>,
        retry_after: Option<Duration>,
    },
    /// `429 Request.RateLimited`: too many attempts (failed sign-ins, unknown logins); nothing
    /// changed. Wait `retry_after`.
    #[error("Request.RateLimited: {}", problem.detail)]
    RateLimited {
        problem: Box<Problem>,
        retry_after: Option<Duration>,
    },
    /// `503 Service.Unavailable`: the database is unreachable. The outcome of a write is
    /// unknown: retry with the same idempotency key.
    #[error("Service.Unavailable: {}", problem.detail)]
    ServiceUnavailable {
        problem: Box<Problem>,
        retry_after: Option<Duration>,
    },
    /// `500 Internal.Error`: anything else went wrong on the server; the outcome is unknown.
    #[error("Internal.Error: {}", problem.detail)]
    InternalError { problem: Box<Problem> },
    /// `404 License.NotFound`: no license of this account has this id.
    #[error("License.NotFound: {}", problem.detail)]
    LicenseNotFound { problem: Box<Problem> },
    /// `409 License.AlreadyActive`: the login already holds this perpetual plan; nothing was
    /// charged, and a retry under the same key runs again.
    #[error("License.AlreadyActive: {}", problem.detail)]
    LicenseAlreadyActive { problem: Box<Problem> },
    /// `404 Reseller.RequestNotFound`: no record of a request with this idempotency key.
    #[error("Reseller.RequestNotFound: {}", problem.detail)]
    RequestNotFound { problem: Box<Problem> },
    /// `404 Reseller.PromoBatchNotFound`: no promo batch of this account has this id.
    #[error("Reseller.PromoBatchNotFound: {}", problem.detail)]
    PromoBatchNotFound { problem: Box<Problem> },
    /// `410 Promo.CodeVoided`: the code, or its batch, was voided by its reseller.
    #[error("Promo.CodeVoided: {}", problem.detail)]
    CodeVoided { problem: Box<Problem> },
    /// A problem body whose `code` this version of the SDK does not know (a newer server).
    #[error("{} (HTTP {}): {}", problem.code, problem.status, problem.detail)]
    UnrecognizedProblem { problem: Box<Problem> },
    /// `401` with an empty body: the credentials (or the panel session) were rejected: unknown,
    /// wrong, revoked, expired, or the account is suspended. The API does not say which.
    #[error("unauthorized: the credentials were rejected")]
    Unauthorized,
    /// The request could not be sent or its answer could not be read (connection refused,
    /// reset, TLS failure…). The outcome of a write is unknown.
    #[error("transport error: {0}")]
    Transport(String),
    /// No answer within the policy's per-request timeout. The outcome of a write is unknown.
    #[error("the request timed out")]
    Timeout,
    /// An answer that is not part of the API contract: a status without a problem body (a proxy
    /// in between, say), or a success body that does not decode.
    #[error("unexpected response (HTTP {status}): {body_snippet}")]
    UnexpectedResponse { status: u16, body_snippet: String },
    /// A value given to the SDK was rejected before anything was sent.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        field: &'static str,
        message: String,
    },
}

/// `Result` with the SDK's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds the variant for an API error code.
    pub(crate) fn from_problem(
        code: ErrorCode,
        problem: Problem,
        retry_after: Option<Duration>,
    ) -> Self {
        let problem = Box::new(problem);
        match code {
            ErrorCode::ValidationFailed => Self::ValidationFailed { problem },
            ErrorCode::PayloadTooLarge => Self::PayloadTooLarge { problem },
            ErrorCode::RouteNotFound | ErrorCode::MethodNotAllowed => Self::NoSuchRoute { problem },
            ErrorCode::BrowserOriginForbidden => Self::BrowserOriginForbidden { problem },
            ErrorCode::PanelSessionRequired => Self::PanelSessionRequired { problem },
            ErrorCode::InsufficientQuota => Self::InsufficientQuota { problem },
            ErrorCode::UnknownPlan => Self::UnknownPlan { problem },
            ErrorCode::UnknownLogin => Self::UnknownLogin { problem },
            ErrorCode::IdempotencyKeyReused => Self::IdempotencyKeyReused { problem },
            ErrorCode::RequestInProgress => Self::RequestInProgress {
                problem,
                retry_after,
            },
            ErrorCode::ApiKeyLimitReached => Self::ApiKeyLimitReached { problem },
            ErrorCode::ApiKeyNotFound => Self::ApiKeyNotFound { problem },
            ErrorCode::WebhookEndpointNotFound => Self::WebhookEndpointNotFound { problem },
            ErrorCode::WebhookEndpointLimitReached => Self::WebhookEndpointLimitReached { problem },
            ErrorCode::PromoCodesExpired => Self::PromoCodesExpired { problem },
            ErrorCode::PromoGenerationFailed => Self::PromoGenerationFailed { problem },
            ErrorCode::CodeNotFound => Self::CodeNotFound { problem },
            ErrorCode::CodeExpired => Self::CodeExpired { problem },
            ErrorCode::CodeExhausted => Self::CodeExhausted { problem },
            ErrorCode::AlreadyRedeemed => Self::AlreadyRedeemed { problem },
            ErrorCode::TooManyAttempts => Self::TooManyAttempts {
                problem,
                retry_after,
            },
            ErrorCode::RateLimited => Self::RateLimited {
                problem,
                retry_after,
            },
            ErrorCode::ServiceUnavailable => Self::ServiceUnavailable {
                problem,
                retry_after,
            },
            ErrorCode::InternalError => Self::InternalError { problem },
            ErrorCode::LicenseNotFound => Self::LicenseNotFound { problem },
            ErrorCode::LicenseAlreadyActive => Self::LicenseAlreadyActive { problem },
            ErrorCode::RequestNotFound => Self::RequestNotFound { problem },
            ErrorCode::PromoBatchNotFound => Self::PromoBatchNotFound { problem },
            ErrorCode::CodeVoided => Self::CodeVoided { problem },
        }
    }

    /// The API error code, when the server answered with a problem body this SDK knows.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            Self::ValidationFailed { .. } => ErrorCode::ValidationFailed,
            Self::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            Self::NoSuchRoute { problem } => ErrorCode::parse(&problem.code)?,
            Self::BrowserOriginForbidden { .. } => ErrorCode::BrowserOriginForbidden,
            Self::PanelSessionRequired { .. } => ErrorCode::PanelSessionRequired,
            Self::InsufficientQuota { .. } => ErrorCode::InsufficientQuota,
            Self::UnknownPlan { .. } => ErrorCode::UnknownPlan,
            Self::UnknownLogin { .. } => ErrorCode::UnknownLogin,
            Self::IdempotencyKeyReused { .. } => ErrorCode::IdempotencyKeyReused,
            Self::RequestInProgress { .. } => ErrorCode::RequestInProgress,
            Self::ApiKeyLimitReached { .. } => ErrorCode::ApiKeyLimitReached,
            Self::ApiKeyNotFound { .. } => ErrorCode::ApiKeyNotFound,
            Self::WebhookEndpointNotFound { .. } => ErrorCode::WebhookEndpointNotFound,
            Self::WebhookEndpointLimitReached { .. } => ErrorCode::WebhookEndpointLimitReached,
            Self::PromoCodesExpired { .. } => ErrorCode::PromoCodesExpired,
            Self::PromoGenerationFailed { .. } => ErrorCode::PromoGenerationFailed,
            Self::CodeNotFound { .. } => ErrorCode::CodeNotFound,
            Self::CodeExpired { .. } => ErrorCode::CodeExpired,
            Self::CodeExhausted { .. } => ErrorCode::CodeExhausted,
            Self::AlreadyRedeemed { .. } => ErrorCode::AlreadyRedeemed,
            Self::TooManyAttempts { .. } => ErrorCode::TooManyAttempts,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::ServiceUnavailable { .. } => ErrorCode::ServiceUnavailable,
            Self::InternalError { .. } => ErrorCode::InternalError,
            Self::LicenseNotFound { .. } => ErrorCode::LicenseNotFound,
            Self::LicenseAlreadyActive { .. } => ErrorCode::LicenseAlreadyActive,
            Self::RequestNotFound { .. } => ErrorCode::RequestNotFound,
            Self::PromoBatchNotFound { .. } => ErrorCode::PromoBatchNotFound,
            Self::CodeVoided { .. } => ErrorCode::CodeVoided,
            Self::UnrecognizedProblem { .. }
            | Self::Unauthorized
            | Self::Transport(_)
            | Self::Timeout
            | Self::UnexpectedResponse { .. }
            | Self::InvalidInput { .. } => return None,
        })
    }

    /// The server's problem body, for every variant that came with one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::ValidationFailed { problem }
            | Self::PayloadTooLarge { problem }
            | Self::NoSuchRoute { problem }
            | Self::BrowserOriginForbidden { problem }
            | Self::PanelSessionRequired { problem }
            | Self::InsufficientQuota { problem }
            | Self::UnknownPlan { problem }
            | Self::UnknownLogin { problem }
            | Self::IdempotencyKeyReused { problem }
            | Self::RequestInProgress { problem, .. }
            | Self::ApiKeyLimitReached { problem }
            | Self::ApiKeyNotFound { problem }
            | Self::WebhookEndpointNotFound { problem }
            | Self::WebhookEndpointLimitReached { problem }
            | Self::PromoCodesExpired { problem }
            | Self::PromoGenerationFailed { problem }
            | Self::CodeNotFound { problem }
            | Self::CodeExpired { problem }
            | Self::CodeExhausted { problem }
            | Self::AlreadyRedeemed { problem }
            | Self::TooManyAttempts { problem, .. }
            | Self::RateLimited { problem, .. }
            | Self::ServiceUnavailable { problem, .. }
            | Self::InternalError { problem }
            | Self::LicenseNotFound { problem }
            | Self::LicenseAlreadyActive { problem }
            | Self::RequestNotFound { problem }
            | Self::PromoBatchNotFound { problem }
            | Self::CodeVoided { problem }
            | Self::UnrecognizedProblem { problem } => Some(problem),
            Self::Unauthorized
            | Self::Transport(_)
            | Self::Timeout
            | Self::UnexpectedResponse { .. }
            | Self::InvalidInput { .. } => None,
        }
    }

    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Unauthorized => Some(401),
            Self::UnexpectedResponse { status, .. } => Some(*status),
            Self::Transport(_) | Self::Timeout | Self::InvalidInput { .. } => None,
            other => other.problem().map(|problem| problem.status),
        }
    }

    /// How long the server asked the caller to wait (`Retry-After`), when it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RequestInProgress { retry_after, .. }
            | Self::TooManyAttempts { retry_after, .. }
            | Self::RateLimited { retry_after, .. }
            | Self::ServiceUnavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether the outcome is known: the server refused the request and, for a write, nothing
    /// was charged or created (`Reseller.PromoGenerationFailed` included).
    ///
    /// `false` for transport failures, timeouts, `Service.Unavailable`, `Internal.Error`, any
    /// other 5xx and `Reseller.RequestInProgress`: a write may have happened or may still
    /// happen, so retry it with the same idempotency key rather than a new one.
    pub fn is_definite(&self) -> bool {
        match self {
            Self::RequestInProgress { .. }
            | Self::ServiceUnavailable { .. }
            | Self::InternalError { .. }
            | Self::Transport(_)
            | Self::Timeout => false,
            Self::UnrecognizedProblem { problem } => problem.status < 500,
            Self::UnexpectedResponse { status, .. } => (400..500).contains(status),
            _ => true,
        }
    }

    /// Whether the SDK's retry loop may send the request again: transport failures, timeouts,
    /// `503` and `409 Reseller.RequestInProgress` (and a bare 502/503/504 from a proxy). A
    /// definite outcome is never retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Transport(_)
            | Self::Timeout
            | Self::ServiceUnavailable { .. }
            | Self::RequestInProgress { .. } => true,
            Self::UnexpectedResponse { status, .. } => matches!(status, 502..=504),
            _ => false,
        }
    }

    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            message: message.into(),
        }
    }
}

impl From<partner_billing::domain::InvalidField> for Error {
    fn from(invalid: partner_billing::domain::InvalidField) -> Self {
        Self::InvalidInput {
            field: invalid.field,
            message: invalid.message,
        }
    }
}
