//! Every error response, in one place: the empty 401 and RFC 9457 problem bodies.
//!
//! Over 450 lines on purpose: the answer of each error and the document's description of it
//! (per-operation error sets, one example per code) stay side by side, so they cannot drift.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::{Mutex, OnceLock};

use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{
    MetaHeader, MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry,
};
use poem_openapi::types::Type;

use partner_billing::Error;
use partner_billing::domain::InvalidField;
use partner_billing::wire::{ErrorCode, Problem};

/// The media type of problem bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The challenge of every 401 of the partner API (API keys).
pub const WWW_AUTHENTICATE: &str = r#"Basic realm="partner-billing""#;

/// The challenge of every 401 of the panel and product APIs (panel sessions, operator tokens).
pub const WWW_AUTHENTICATE_BEARER: &str = r#"Bearer realm="partner-billing""#;

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
    /// A problem with its code's status and title: each code has exactly one status
    /// ([`ErrorCode::status`]), so the document's per-status lists hold.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        let retry_after = match code {
            ErrorCode::RequestInProgress => Some(1),
            ErrorCode::ServiceUnavailable => Some(2),
            _ => None,
        };
        Self::Problem {
            problem: Box::new(Problem {
                problem_type: code.type_uri(),
                title: code.title().to_owned(),
                status: code.status(),
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
            Error::LicenseNotFound => Self::new(
                ErrorCode::LicenseNotFound,
                "No license of this account has this id.",
            ),
            Error::LicenseAlreadyActive => Self::new(
                ErrorCode::LicenseAlreadyActive,
                "The login already holds an unrevoked license of this perpetual plan; nothing was charged.",
            ),
            Error::RequestNotFound => Self::new(
                ErrorCode::RequestNotFound,
                "This account has no record of a request with this idempotency key.",
            ),
            Error::PromoBatchNotFound => Self::new(
                ErrorCode::PromoBatchNotFound,
                "No promo batch of this account has this id.",
            ),
            Error::CodeVoided => Self::new(
                ErrorCode::CodeVoided,
                "This promo code was voided by the reseller that bought it.",
            ),
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

/// The one 401 of the service: empty body, the same headers whatever the cause. The browser
/// guard (`guard::Passed::finish`) sets the challenge of the route: this `Basic` one on the partner API,
/// `Bearer` on the panel and product APIs.
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

/// The scheme a 401 challenges the caller with (RFC 9110 `WWW-Authenticate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// An API key (`X-Client-Id` + `X-Client-Secret`, or HTTP Basic): the partner API.
    Basic,
    /// A panel session or an operator token: the panel and product APIs.
    Bearer,
}

impl Challenge {
    /// The `WWW-Authenticate` value.
    pub fn header_value(self) -> &'static str {
        match self {
            Self::Basic => WWW_AUTHENTICATE,
            Self::Bearer => WWW_AUTHENTICATE_BEARER,
        }
    }

    /// The challenge of the routes under `path`: Basic for the partner API, Bearer elsewhere.
    pub fn for_path(path: &str) -> Self {
        if path.starts_with("/v1/billing/partner") {
            Self::Basic
        } else {
            Self::Bearer
        }
    }
}

/// The errors one operation can answer with: the document declares exactly these (grouped by
/// status, an example each), and debug builds check every answer against them.
pub trait ErrorSet: Send + Sync + 'static {
    /// The problem codes, besides the empty 401.
    const CODES: &'static [ErrorCode];
    /// The challenge of the operation's empty 401; `None` when it takes no credentials.
    const UNAUTHORIZED: Option<Challenge>;
}

/// Declares an [`ErrorSet`]: `error_set!(Name, Some(Challenge::Basic), [Code, ...]);`.
macro_rules! error_set {
    ($(#[$meta:meta])* $name:ident, $challenge:expr, [$($code:ident),* $(,)?]) => {
        $(#[$meta])*
        pub enum $name {}

        impl $crate::problem::ErrorSet for $name {
            const CODES: &'static [partner_billing::wire::ErrorCode] =
                &[$(partner_billing::wire::ErrorCode::$code),*];
            const UNAUTHORIZED: Option<$crate::problem::Challenge> = $challenge;
        }
    };
}
pub(crate) use error_set;

/// An error answer of an operation whose possible errors are the set `S`.
pub struct Failure<S>(pub ApiError, PhantomData<S>);

impl<S> std::fmt::Debug for Failure<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<S> From<ApiError> for Failure<S> {
    fn from(err: ApiError) -> Self {
        Self(err, PhantomData)
    }
}

impl<S> From<Error> for Failure<S> {
    fn from(err: Error) -> Self {
        Self(err.into(), PhantomData)
    }
}

impl<S> From<InvalidField> for Failure<S> {
    fn from(invalid: InvalidField) -> Self {
        Self(invalid.into(), PhantomData)
    }
}

impl<S: ErrorSet> IntoResponse for Failure<S> {
    fn into_response(self) -> Response {
        if cfg!(debug_assertions) {
            match &self.0 {
                ApiError::Unauthorized => debug_assert!(
                    S::UNAUTHORIZED.is_some(),
                    "a 401 from an operation that declares none"
                ),
                ApiError::Problem { problem, .. } => debug_assert!(
                    S::CODES.iter().any(|c| c.as_str() == problem.code),
                    "{} is not declared for this operation",
                    problem.code
                ),
            }
        }
        self.0.into_response()
    }
}

impl<S: ErrorSet> From<Failure<S>> for poem::Error {
    fn from(failure: Failure<S>) -> Self {
        poem::Error::from_response(failure.into_response())
    }
}

/// A text built once for the document, kept for the life of the process (poem-openapi's
/// response metadata holds `&'static str`); each distinct text is stored once.
fn interned(text: String) -> &'static str {
    static TEXTS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut texts = TEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(existing) = texts.get(text.as_str()) {
        return existing;
    }
    let leaked: &'static str = Box::leak(text.into_boxed_str());
    texts.insert(leaked);
    leaked
}

/// `Retry-After` as the document declares it for one error response.
fn retry_after_header(status: u16, codes: &[ErrorCode]) -> Option<MetaHeader> {
    let (description, required) = match status {
        429 => ("Seconds until another attempt is allowed.", true),
        503 => ("Seconds to wait before retrying.", true),
        409 if codes == [ErrorCode::RequestInProgress] => (
            "Seconds to wait before retrying with the same idempotency key.",
            true,
        ),
        409 if codes.contains(&ErrorCode::RequestInProgress) => (
            "Seconds to wait before retrying with the same idempotency key; sent with \
             `Reseller.RequestInProgress` only.",
            false,
        ),
        _ => return None,
    };
    let mut schema = i64::schema_ref();
    if let MetaSchemaRef::Inline(schema) = &mut schema {
        schema.minimum = Some(0.0);
    }
    Some(MetaHeader {
        name: "Retry-After".to_owned(),
        description: Some(description.to_owned()),
        required,
        deprecated: false,
        schema,
    })
}

/// The description of an error response: one line per code, "`Code`: meaning". The document
/// builder reads the codes back from it to attach one example per code.
fn describe_codes(codes: &[ErrorCode]) -> String {
    codes
        .iter()
        .map(|code| format!("`{}`: {}", code.as_str(), code.meaning()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

impl<S: ErrorSet> ApiResponse for Failure<S> {
    fn meta() -> MetaResponses {
        let mut statuses: Vec<u16> = S::CODES.iter().map(|code| code.status()).collect();
        statuses.sort_unstable();
        statuses.dedup();
        let mut responses: Vec<MetaResponse> = statuses
            .into_iter()
            .map(|status| {
                let codes: Vec<ErrorCode> = S::CODES
                    .iter()
                    .copied()
                    .filter(|code| code.status() == status)
                    .collect();
                MetaResponse {
                    description: interned(describe_codes(&codes)),
                    status: Some(status),
                    status_range: None,
                    content: vec![MetaMediaType {
                        content_type: PROBLEM_JSON,
                        schema: Problem::schema_ref(),
                    }],
                    headers: retry_after_header(status, &codes).into_iter().collect(),
                }
            })
            .collect();
        if let Some(challenge) = S::UNAUTHORIZED {
            let mut schema = String::schema_ref();
            if let MetaSchemaRef::Inline(schema) = &mut schema {
                schema.enum_items = vec![challenge.header_value().into()];
            }
            responses.push(MetaResponse {
                description: "Credentials missing, malformed, unknown, wrong, revoked or expired, \
                    or the account is suspended: always this one answer, with an empty body.",
                status: Some(401),
                status_range: None,
                content: vec![],
                headers: vec![MetaHeader {
                    name: "WWW-Authenticate".to_owned(),
                    description: Some("The scheme to authenticate with.".to_owned()),
                    required: true,
                    deprecated: false,
                    schema,
                }],
            });
        }
        responses.sort_by_key(|r| r.status);
        MetaResponses { responses }
    }

    fn register(registry: &mut Registry) {
        Problem::register(registry);
    }
}

/// Results inside handlers and helpers: any problem.
pub type ApiResult<T> = Result<T, ApiError>;

/// An operation's result: its answer, or one of the errors of its set `S`.
pub type OpResult<T, S> = Result<T, Failure<S>>;
