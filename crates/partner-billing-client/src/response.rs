//! Maps an HTTP answer to the SDK's types. Pure functions, so every rule is unit-tested
//! without a server.

use std::time::Duration;

use partner_billing::wire::{ErrorCode, Problem};
use serde::de::DeserializeOwned;

use crate::error::Error;

/// How much of an unexpected body an error may quote.
const SNIPPET_CHARS: usize = 200;

/// The error for a non-success answer: the empty 401, a problem body, or an unexpected shape.
///
/// `retry_after` is the raw `Retry-After` header; `sensitive` lists values (the caller's own
/// secret or session token) that must never be quoted back, however unlikely an echo is.
pub(crate) fn error_from_response(
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
    sensitive: &[&str],
) -> Error {
    if status == 401 {
        return Error::Unauthorized;
    }
    match serde_json::from_slice::<Problem>(body) {
        Ok(problem) => match ErrorCode::parse(&problem.code) {
            Some(code) => Error::from_problem(code, problem, parse_retry_after(retry_after)),
            None => Error::UnrecognizedProblem {
                problem: Box::new(problem),
            },
        },
        Err(_) => Error::UnexpectedResponse {
            status,
            body_snippet: snippet(body, sensitive),
        },
    }
}

/// Decodes a success body, or explains why it does not decode.
pub(crate) fn decode_success<T: DeserializeOwned>(
    status: u16,
    body: &[u8],
    sensitive: &[&str],
) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|err| Error::UnexpectedResponse {
        status,
        body_snippet: format!("{err}; body: {}", snippet(body, sensitive)),
    })
}

/// `Retry-After` in delta-seconds. An HTTP-date (which this API never sends) is ignored and
/// the policy's own backoff applies.
pub(crate) fn parse_retry_after(value: Option<&str>) -> Option<Duration> {
    value?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The start of a body as printable text, with any sensitive value blanked out.
pub(crate) fn snippet(body: &[u8], sensitive: &[&str]) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    for value in sensitive.iter().filter(|value| !value.is_empty()) {
        text = text.replace(value, "[redacted]");
    }
    let mut out: String = text
        .chars()
        .take(SNIPPET_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > SNIPPET_CHARS {
        out.push('…');
    }
    if out.trim().is_empty() {
        "(empty body)".to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem_body(code: &str, status: u16) -> Vec<u8> {
        serde_json::json!({
            "type": format!("https://partner-billing.dev/problems/{code}"),
            "title": "t",
            "status": status,
            "detail": "d",
            "code": code,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn every_documented_code_maps_to_its_variant() {
        for code in ErrorCode::ALL {
            let error = error_from_response(
                code.status(),
                None,
                &problem_body(code.as_str(), code.status()),
                &[],
            );
            assert_eq!(error.code(), Some(code), "{code}");
            assert_eq!(error.status(), Some(code.status()));
            assert_eq!(
                error.problem().map(|p| p.code.as_str()),
                Some(code.as_str())
            );
            assert!(error.to_string().starts_with(code.as_str()), "{error}");
        }
    }

    #[test]
    fn validation_failure_keeps_the_field() {
        let body = br#"{"type":"x","title":"t","status":400,"detail":"bad","code":"Request.ValidationFailed","field":"planSlug"}"#;
        let error = error_from_response(400, None, body, &[]);
        assert!(
            matches!(&error, Error::ValidationFailed { problem } if problem.field.as_deref() == Some("planSlug"))
        );
        assert!(error.is_definite());
        assert!(!error.is_retryable());
    }

    #[test]
    fn empty_401_is_unauthorized() {
        let error = error_from_response(401, None, b"", &[]);
        assert!(matches!(error, Error::Unauthorized));
        assert_eq!(error.code(), None);
        assert!(error.is_definite());
    }

    #[test]
    fn retry_after_is_read_for_in_progress_and_unavailable() {
        let error = error_from_response(
            409,
            Some("1"),
            &problem_body("Reseller.RequestInProgress", 409),
            &[],
        );
        assert_eq!(error.retry_after(), Some(Duration::from_secs(1)));
        assert!(error.is_retryable());
        assert!(!error.is_definite());

        let error = error_from_response(
            503,
            Some(" 7 "),
            &problem_body("Service.Unavailable", 503),
            &[],
        );
        assert!(matches!(error, Error::ServiceUnavailable { .. }));
        assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
        assert!(error.is_retryable());

        let error = error_from_response(
            503,
            Some("Wed, 21 Oct 2015 07:28:00 GMT"),
            &problem_body("Service.Unavailable", 503),
            &[],
        );
        assert_eq!(error.retry_after(), None);
    }

    #[test]
    fn definite_outcomes_are_not_retried() {
        for code in [
            "Reseller.InsufficientQuota",
            "Reseller.UnknownPlan",
            "Reseller.IdempotencyKeyReused",
            "Reseller.ApiKeyLimitReached",
            "Reseller.PromoGenerationFailed",
        ] {
            let code = ErrorCode::parse(code).unwrap();
            let error = error_from_response(
                code.status(),
                None,
                &problem_body(code.as_str(), code.status()),
                &[],
            );
            assert!(error.is_definite(), "{code}");
            assert!(!error.is_retryable(), "{code}");
        }
        let internal = error_from_response(500, None, &problem_body("Internal.Error", 500), &[]);
        assert!(!internal.is_definite());
        assert!(!internal.is_retryable());
    }

    #[test]
    fn unknown_code_and_non_problem_bodies() {
        let error = error_from_response(418, None, &problem_body("Reseller.Teapot", 418), &[]);
        assert!(matches!(error, Error::UnrecognizedProblem { .. }));
        assert_eq!(error.code(), None);
        assert_eq!(error.status(), Some(418));
        assert!(error.is_definite());

        let error = error_from_response(502, None, b"<html>Bad Gateway</html>", &[]);
        assert!(
            matches!(&error, Error::UnexpectedResponse { status: 502, body_snippet } if body_snippet.contains("Bad Gateway"))
        );
        assert!(error.is_retryable());
        assert!(!error.is_definite());

        let error = error_from_response(404, None, b"", &[]);
        assert!(
            matches!(&error, Error::UnexpectedResponse { status: 404, body_snippet } if body_snippet == "(empty body)")
        );
        assert!(error.is_definite());
    }

    #[test]
    fn snippets_are_short_and_never_echo_secrets() {
        let body = format!("echo rss_canary {}", "x".repeat(1000));
        let error = error_from_response(500, None, body.as_bytes(), &["rss_canary"]);
        let text = error.to_string();
        assert!(!text.contains("canary"), "{text}");
        assert!(text.contains("[redacted]"));
        assert!(text.chars().count() < 300);
    }

    #[test]
    fn success_bodies_decode_or_explain() {
        let balances: partner_billing::wire::Balances = decode_success(
            200,
            br#"{"balances":[{"productSlug":"pro","remainingBalance":3}]}"#,
            &[],
        )
        .unwrap();
        assert_eq!(balances.balances[0].remaining_balance, 3);
        let error =
            decode_success::<partner_billing::wire::Balances>(200, b"nope", &[]).unwrap_err();
        assert!(matches!(
            error,
            Error::UnexpectedResponse { status: 200, .. }
        ));
        assert!(!error.is_definite());
    }
}
