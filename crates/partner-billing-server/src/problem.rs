//! Every error response, in one place: the empty 401 and RFC 9457 problem bodies.

use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{MetaHeader, MetaMediaType, MetaResponse, MetaResponses, Registry};
use poem_openapi::types::Type;

use partner_billing::Error;
use partner_billing::domain::InvalidField;
use partner_billing::wire::{ErrorCode, Problem};

/// The media type of problem bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The realm announced on every 401.
pub const WWW_AUTHENTICATE: &str = r#"Basic realm="partner-billing""#;

/// An error answer of the API.
#[derive(Debug)]
pub enum ApiError {
    /// The empty 401: identical for every credential failure.
    Unauthorized,
    /// A problem body.
    Problem {
        problem: Box<Problem>,
        retry_after: Option<u64>,
    },
}

impl ApiError {
    /// A problem with its code's status and title.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::with_status(code, code.status(), detail)
    }

    /// A problem whose status differs from its code's usual one (413, 404 for routes).
    pub fn with_status(code: ErrorCode, status: u16, detail: impl Into<String>) -> Self {
        let retry_after = match code {
            ErrorCode::RequestInProgress => Some(1),
            ErrorCode::ServiceUnavailable => Some(2),
            _ => None,
        };
        Self::Problem {
            problem: Box::new(Problem {
                problem_type: code.type_uri(),
                title: code.title().to_owned(),
                status,
                detail: detail.into(),
                code: code.as_str().to_owned(),
                field: None,
                order_public_id: None,
                batch_id: None,
            }),
            retry_after,
        }
    }

    /// `Request.ValidationFailed` naming the field.
    pub fn validation(field: impl Into<String>, detail: impl Into<String>) -> Self {
        let mut error = Self::new(ErrorCode::ValidationFailed, detail);
        if let Self::Problem { problem, .. } = &mut error {
            problem.field = Some(field.into());
        }
        error
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        match err {
            Error::Unauthorized => Self::Unauthorized,
            Error::Validation(invalid) => Self::validation(
                invalid.field,
                format!("`{}` {}", invalid.field, invalid.message),
            ),
            Error::InsufficientQuota => Self::new(
                ErrorCode::InsufficientQuota,
                "The balance of this plan is below the cost of the request; nothing was consumed.",
            ),
            Error::UnknownPlan => Self::new(ErrorCode::UnknownPlan, "No plan has this slug."),
            Error::UnknownLogin => Self::new(
                ErrorCode::UnknownLogin,
                "No end user is registered with this login.",
            ),
            Error::IdempotencyKeyReused => Self::new(
                ErrorCode::IdempotencyKeyReused,
                "This idempotency key was used for a different request; choose a new key.",
            ),
            Error::RequestInProgress => Self::new(
                ErrorCode::RequestInProgress,
                "A request with this idempotency key is still running; retry with the same key.",
            ),
            Error::ApiKeyLimitReached => Self::new(
                ErrorCode::ApiKeyLimitReached,
                "Five API keys are already active; revoke one before creating another.",
            ),
            Error::ApiKeyNotFound => Self::new(
                ErrorCode::ApiKeyNotFound,
                "No API key of this account has this id.",
            ),
            Error::WebhookEndpointNotFound => Self::new(
                ErrorCode::WebhookEndpointNotFound,
                "No webhook endpoint of this account has this id.",
            ),
            Error::WebhookEndpointLimitReached => Self::new(
                ErrorCode::WebhookEndpointLimitReached,
                "Five webhook endpoints already exist; delete one before adding another.",
            ),
            Error::PromoCodesExpired {
                order_public_id,
                batch_id,
            } => {
                let mut error = Self::new(
                    ErrorCode::PromoCodesExpired,
                    "This batch was generated more than 72 hours ago: its codes can no longer be recovered. Nothing was charged.",
                );
                if let Self::Problem { problem, .. } = &mut error {
                    problem.order_public_id = Some(order_public_id);
                    problem.batch_id = Some(batch_id);
                }
                error
            }
            Error::PromoGenerationFailed => Self::new(
                ErrorCode::PromoGenerationFailed,
                "The codes could not be produced. Nothing was charged and nothing issued; retry with the same idempotency key.",
            ),
            // One detail for unknown and malformed codes alike: the answer is no oracle.
            Error::CodeNotFound => {
                Self::new(ErrorCode::CodeNotFound, "No promo code matches this input.")
            }
            Error::CodeExpired => Self::new(
                ErrorCode::CodeExpired,
                "This promo code is past its validity and can no longer be redeemed.",
            ),
            Error::CodeExhausted => Self::new(
                ErrorCode::CodeExhausted,
                "This promo code has been redeemed as often as it allows.",
            ),
            Error::AlreadyRedeemed => Self::new(
                ErrorCode::AlreadyRedeemed,
                "This login has redeemed this promo code before.",
            ),
            Error::TooManyAttempts {
                retry_after_seconds,
            } => {
                let mut error = Self::new(
                    ErrorCode::TooManyAttempts,
                    "Too many failed redemptions for this login; retry after the time in Retry-After.",
                );
                if let Self::Problem { retry_after, .. } = &mut error {
                    *retry_after = Some(retry_after_seconds);
                }
                error
            }
            Error::RateLimited {
                retry_after_seconds,
            } => {
                let mut error = Self::new(
                    ErrorCode::RateLimited,
                    "Too many attempts; retry after the time in Retry-After.",
                );
                if let Self::Problem { retry_after, .. } = &mut error {
                    *retry_after = Some(retry_after_seconds);
                }
                error
            }
            Error::Overloaded => Self::new(
                ErrorCode::ServiceUnavailable,
                "Too many requests of this kind are waiting; retry shortly.",
            ),
            Error::Unavailable(source) => {
                tracing::warn!(error = %source, "database unavailable");
                Self::new(
                    ErrorCode::ServiceUnavailable,
                    "The database is unreachable; the outcome is unknown. Retry with the same idempotency key.",
                )
            }
            Error::NotFound(_) | Error::AlreadyExists(_) | Error::Internal(_) => {
                tracing::error!(error = %err, "internal error");
                Self::new(
                    ErrorCode::InternalError,
                    "An unexpected error occurred; the outcome is unknown. Retry with the same idempotency key.",
                )
            }
        }
    }
}

impl From<InvalidField> for ApiError {
    fn from(invalid: InvalidField) -> Self {
        Error::Validation(invalid).into()
    }
}

/// The one 401 of the service: empty body, the same headers whatever the cause.
pub fn unauthorized_response() -> Response {
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(header::WWW_AUTHENTICATE, WWW_AUTHENTICATE)
        .body(())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Unauthorized => unauthorized_response(),
            Self::Problem {
                problem,
                retry_after,
            } => {
                let status = StatusCode::from_u16(problem.status)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = serde_json::to_vec(&problem).unwrap_or_default();
                let mut response = Response::builder()
                    .status(status)
                    .content_type(PROBLEM_JSON)
                    .body(body);
                if let Some(seconds) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                }
                response
            }
        }
    }
}

impl From<ApiError> for poem::Error {
    fn from(err: ApiError) -> Self {
        poem::Error::from_response(err.into_response())
    }
}

/// The statuses documented for every operation's errors.
const DOCUMENTED: &[(u16, &str)] = &[
    (
        400,
        "`Request.ValidationFailed`: a malformed body or parameter; `field` names it.",
    ),
    (
        402,
        "`Reseller.InsufficientQuota`: the balance is below the cost; nothing consumed.",
    ),
    (
        403,
        "`Request.BrowserOriginForbidden` or `Reseller.PanelSessionRequired`.",
    ),
    (
        404,
        "`Reseller.ApiKeyNotFound`; `Reseller.WebhookEndpointNotFound`; `Promo.CodeNotFound` (an unknown or malformed promo code); or no such route.",
    ),
    (
        409,
        "`Reseller.RequestInProgress` (with `Retry-After`), `Reseller.ApiKeyLimitReached`, `Reseller.WebhookEndpointLimitReached`, `Promo.CodeExhausted` (the code's redemptions are used up) or `Promo.AlreadyRedeemed` (this login redeemed this code before).",
    ),
    (
        410,
        "`Reseller.PromoCodesExpired`: the batch's codes are past their 72-hour recovery window; `orderPublicId` and `batchId` name it; nothing charged. `Promo.CodeExpired`: the promo code is past its batch's validity.",
    ),
    (413, "`Request.PayloadTooLarge`: the body is over 16 KiB."),
    (
        422,
        "`Reseller.UnknownPlan`, `Reseller.UnknownLogin` or `Reseller.IdempotencyKeyReused`.",
    ),
    (
        429,
        "`Promo.TooManyAttempts` (with `Retry-After`, in seconds): too many failed redemptions for this login. `Request.RateLimited` (with `Retry-After`): too many failed sign-ins for this client id or address, or too many unknown logins for this account; nothing changed.",
    ),
    (
        500,
        "`Internal.Error`: the outcome is unknown; retry with the same idempotency key.",
    ),
    (
        503,
        "`Service.Unavailable` (with `Retry-After`): the outcome is unknown; retry.",
    ),
];

/// `Retry-After` (seconds) as the document declares it: always on 429 and 503, on 409 only for
/// `Reseller.RequestInProgress`.
fn retry_after_header(status: u16) -> Option<MetaHeader> {
    let required = match status {
        429 | 503 => true,
        409 => false,
        _ => return None,
    };
    Some(MetaHeader {
        name: "Retry-After".to_owned(),
        description: Some(
            "Seconds to wait before retrying (on 409 only with `Reseller.RequestInProgress`)."
                .to_owned(),
        ),
        required,
        deprecated: false,
        schema: u64::schema_ref(),
    })
}

impl ApiResponse for ApiError {
    fn meta() -> MetaResponses {
        let mut responses: Vec<MetaResponse> = DOCUMENTED
            .iter()
            .map(|&(status, description)| MetaResponse {
                description,
                status: Some(status),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: PROBLEM_JSON,
                    schema: Problem::schema_ref(),
                }],
                headers: retry_after_header(status).into_iter().collect(),
            })
            .collect();
        responses.push(MetaResponse {
            description: "Credentials missing, malformed, unknown, wrong or revoked (an API key, a panel session or an operator token), or the account is suspended. Empty body.",
            status: Some(401),
            status_range: None,
            content: vec![],
            headers: vec![],
        });
        responses.sort_by_key(|r| r.status);
        MetaResponses { responses }
    }

    fn register(registry: &mut Registry) {
        Problem::register(registry);
    }
}

/// Handler results.
pub type ApiResult<T> = Result<T, ApiError>;
