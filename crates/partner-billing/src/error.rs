//! The library's one error type. The server maps each variant to its status and code once.

use crate::domain::InvalidField;
use crate::wire::ErrorCode;

/// What a billing operation can answer besides success.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request value failed to parse; nothing was changed.
    #[error("invalid {}: {}", .0.field, .0.message)]
    Validation(#[from] InvalidField),
    /// Credentials were missing, wrong, revoked or the account is suspended. Deliberately
    /// carries no reason: every rejection must look the same.
    #[error("unauthorized")]
    Unauthorized,
    /// The balance is below the cost; nothing was consumed.
    #[error("insufficient quota")]
    InsufficientQuota,
    #[error("unknown plan")]
    UnknownPlan,
    #[error("unknown login")]
    UnknownLogin,
    #[error("idempotency key reused for a different request")]
    IdempotencyKeyReused,
    #[error("a request with this idempotency key is in progress")]
    RequestInProgress,
    #[error("five API keys are already active")]
    ApiKeyLimitReached,
    #[error("API key not found")]
    ApiKeyNotFound,
    /// No webhook endpoint of this account has this id.
    #[error("webhook endpoint not found")]
    WebhookEndpointNotFound,
    /// The account already has the most webhook endpoints allowed.
    #[error("webhook endpoint limit reached")]
    WebhookEndpointLimitReached,
    /// A promo batch was retried after its 72-hour recovery window: the codes are gone for
    /// good, and nothing is charged again.
    #[error("promo codes no longer recoverable")]
    PromoCodesExpired {
        order_public_id: String,
        batch_id: String,
    },
    /// Codes could not be produced; nothing was charged and a retry with the same key runs
    /// again.
    #[error("promo codes could not be generated")]
    PromoGenerationFailed,
    /// A promo code that matches no stored code, or that is not a code at all: one answer for
    /// both, so that a guesser learns nothing from the shape of its input.
    #[error("promo code not found")]
    CodeNotFound,
    /// The code is past its batch's validity.
    #[error("promo code expired")]
    CodeExpired,
    /// The code's redemptions are used up.
    #[error("promo code used up")]
    CodeExhausted,
    /// This login redeemed this code before.
    #[error("promo code already redeemed by this login")]
    AlreadyRedeemed,
    /// Too many failed redemptions for one login; the next attempt is allowed after
    /// `retry_after_seconds`.
    #[error("too many failed redemption attempts")]
    TooManyAttempts { retry_after_seconds: u64 },
    /// Too many attempts of another kind (sign-in failures, unknown logins: docs/design.md,
    /// "Abuse limits"): refused without looking further; allowed again after
    /// `retry_after_seconds`.
    #[error("too many attempts")]
    RateLimited { retry_after_seconds: u64 },
    /// Too much work of one kind is queued (password hashing); retry later.
    #[error("too busy")]
    Overloaded,
    /// No license of this account has this id.
    #[error("license not found")]
    LicenseNotFound,
    /// The login already holds an unrevoked license of this perpetual plan.
    #[error("license already active")]
    LicenseAlreadyActive,
    /// This account has no record of a request with this idempotency key.
    #[error("request not found")]
    RequestNotFound,
    /// No promo batch of this account has this id.
    #[error("promo batch not found")]
    PromoBatchNotFound,
    /// The code, or its batch, was voided by its reseller.
    #[error("promo code voided")]
    CodeVoided,
    /// An operator command named something that does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// An operator command would create something that exists already.
    #[error("{0} already exists")]
    AlreadyExists(&'static str),
    /// The database could not be reached; the outcome of a write is unknown.
    #[error("database unavailable")]
    Unavailable(#[source] sqlx::Error),
    /// Anything else; the outcome of a write is unknown.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The same error for another caller of one statement run for several (a shared read).
    pub(crate) fn again(&self) -> Self {
        match self {
            Self::Unavailable(e) => {
                Self::Unavailable(sqlx::Error::Io(std::io::Error::other(e.to_string())))
            }
            Self::Internal(message) => Self::Internal(message.clone()),
            other => Self::Internal(other.to_string()),
        }
    }

    /// The API error code this maps to; `None` for the empty 401 and operator-only errors
    /// (which the server never produces).
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            Self::Validation(_) => ErrorCode::ValidationFailed,
            Self::Unauthorized => return None,
            Self::InsufficientQuota => ErrorCode::InsufficientQuota,
            Self::UnknownPlan => ErrorCode::UnknownPlan,
            Self::UnknownLogin => ErrorCode::UnknownLogin,
            Self::IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
            Self::RequestInProgress => ErrorCode::RequestInProgress,
            Self::ApiKeyLimitReached => ErrorCode::ApiKeyLimitReached,
            Self::ApiKeyNotFound => ErrorCode::ApiKeyNotFound,
            Self::WebhookEndpointNotFound => ErrorCode::WebhookEndpointNotFound,
            Self::WebhookEndpointLimitReached => ErrorCode::WebhookEndpointLimitReached,
            Self::PromoCodesExpired { .. } => ErrorCode::PromoCodesExpired,
            Self::PromoGenerationFailed => ErrorCode::PromoGenerationFailed,
            Self::CodeNotFound => ErrorCode::CodeNotFound,
            Self::CodeExpired => ErrorCode::CodeExpired,
            Self::CodeExhausted => ErrorCode::CodeExhausted,
            Self::AlreadyRedeemed => ErrorCode::AlreadyRedeemed,
            Self::TooManyAttempts { .. } => ErrorCode::TooManyAttempts,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::LicenseNotFound => ErrorCode::LicenseNotFound,
            Self::LicenseAlreadyActive => ErrorCode::LicenseAlreadyActive,
            Self::RequestNotFound => ErrorCode::RequestNotFound,
            Self::PromoBatchNotFound => ErrorCode::PromoBatchNotFound,
            Self::CodeVoided => ErrorCode::CodeVoided,
            Self::Unavailable(_) | Self::Overloaded => ErrorCode::ServiceUnavailable,
            Self::NotFound(_) | Self::AlreadyExists(_) | Self::Internal(_) => {
                ErrorCode::InternalError
            }
        })
    }
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Self::Unavailable(err),
            sqlx::Error::Database(ref db) if retryable_database_error(db.as_ref()) => {
                Self::Unavailable(err)
            }
            other => Self::Internal(other.to_string()),
        }
    }
}

/// Whether a database's error means "not done, try again": on SQLite, the database was busy
/// (another process held its write lock past the busy timeout); on PostgreSQL, a
/// [`retryable_sqlstate`]. SQLite's `SQLITE_LOCKED` is not retryable: it is a conflict inside
/// one connection (a statement still open), a fault of the caller's that a retry repeats.
fn retryable_database_error(err: &dyn sqlx::error::DatabaseError) -> bool {
    if let Some(sqlite) = err.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        // The primary result code, under the extended one SQLite reports: SQLITE_BUSY (5),
        // with its variants (BUSY_RECOVERY, BUSY_SNAPSHOT, BUSY_TIMEOUT).
        return sqlx::error::DatabaseError::code(sqlite)
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| code & 0xff == 5);
    }
    err.code().is_some_and(|code| retryable_sqlstate(&code))
}

/// Whether a PostgreSQL SQLSTATE means "not done, try again": the database could not be
/// reached or is going away (connection exceptions, shutdown, too many connections), a
/// failover is under way (read-only transaction: the server is still a standby, or a promoted
/// one not yet writable), or the statement was rolled back and passes if tried again
/// (serialization failure, deadlock, lock or statement timeout).
fn retryable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "53300" | "25006" | "40001" | "40P01" | "55P03" | "57014"
        )
}

/// Shorthand for library results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// A database error with an SQLSTATE, as PostgreSQL reports one.
    #[derive(Debug)]
    struct Sqlstate(&'static str);

    impl std::fmt::Display for Sqlstate {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Sqlstate {}

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            "database error"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn mapped(code: &'static str) -> Option<ErrorCode> {
        Error::from(sqlx::Error::Database(Box::new(Sqlstate(code)))).code()
    }

    /// What a retry can settle answers 503 (retryable, with Retry-After); a database error of
    /// another kind stays internal.
    #[test]
    fn transient_database_errors_are_service_unavailable() {
        for code in [
            "08000", "08003", "08006", "57P01", "57P02", "57P03", "53300", "25006", "40001",
            "40P01", "55P03", "57014",
        ] {
            assert_eq!(mapped(code), Some(ErrorCode::ServiceUnavailable), "{code}");
        }
        for code in ["23503", "23505", "23514", "42P01", "25001", "22P02"] {
            assert_ne!(mapped(code), Some(ErrorCode::ServiceUnavailable), "{code}");
        }
    }

    /// SQLite busy past its timeout (another process holds the write lock) is retryable; a
    /// constraint it refuses is not. Real errors, from a real database file, through the `Any`
    /// driver the store uses.
    #[tokio::test]
    async fn a_busy_sqlite_database_is_service_unavailable() {
        use sqlx::{AnyConnection, Connection};

        sqlx::any::install_default_drivers();
        let dir = partner_billing_testkit::TempDir::new();
        let url = format!("sqlite://{}?mode=rwc", dir.path.join("t.db").display());
        let mut holder = AnyConnection::connect(&url).await.expect("connect");
        sqlx::query("CREATE TABLE t (n INTEGER NOT NULL CHECK (n > 0))")
            .execute(&mut holder)
            .await
            .expect("table");
        let mut other = AnyConnection::connect(&url).await.expect("connect");
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut other)
            .await
            .expect("pragma");
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut holder)
            .await
            .expect("the write lock");

        // Taking the lock, and a write that needs it.
        for statement in ["BEGIN IMMEDIATE", "INSERT INTO t (n) VALUES (1)"] {
            let busy = sqlx::query(statement)
                .execute(&mut other)
                .await
                .expect_err("the lock is held");
            assert_eq!(
                Error::from(busy).code(),
                Some(ErrorCode::ServiceUnavailable),
                "{statement}"
            );
        }

        let refused = sqlx::query("INSERT INTO t (n) VALUES (0)")
            .execute(&mut holder)
            .await
            .expect_err("the check refuses it");
        assert_eq!(Error::from(refused).code(), Some(ErrorCode::InternalError));
    }

    /// A lost connection, an exhausted or closed pool: retryable, whatever the backend.
    #[test]
    fn lost_connections_are_service_unavailable() {
        let lost = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection reset");
        for err in [
            sqlx::Error::Io(lost),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::WorkerCrashed,
        ] {
            assert_eq!(Error::from(err).code(), Some(ErrorCode::ServiceUnavailable));
        }
        assert_eq!(
            Error::from(sqlx::Error::RowNotFound).code(),
            Some(ErrorCode::InternalError)
        );
    }
}
