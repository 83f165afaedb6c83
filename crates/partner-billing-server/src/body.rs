//! JSON request bodies: at most 16 KiB, unknown fields refused, every failure a
//! `Request.ValidationFailed` problem that names the field.
//!
//! poem-openapi's own `Json` reports parse failures as text without the field; this payload
//! keeps the published schema (from the type's `Object` derive) but parses with serde, so the
//! error can say which field is wrong without echoing its value. Answers are written by
//! [`crate::answer::Json`].

use std::ops::Deref;

use poem::{Request, RequestBody};
use poem_openapi::impl_apirequest_for_payload;
use poem_openapi::payload::{ParsePayload, Payload};
use poem_openapi::registry::{MetaSchemaRef, Registry};
use poem_openapi::types::Type;
use serde::de::DeserializeOwned;

use crate::problem::ApiError;
use partner_billing::limits::BODY_MAX_BYTES;
use partner_billing::wire::ErrorCode;

/// A JSON request body parsed with serde.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T> Deref for JsonBody<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(content_type: &str) -> bool {
        // Content type is checked in `from_request`, where a mismatch becomes a problem body.
        let _ = content_type;
        true
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + DeserializeOwned> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        read_json(request, body, BODY_MAX_BYTES)
            .await
            .map(JsonBody)
            .map_err(Into::into)
    }
}

/// A JSON body of at most `LIMIT` bytes, for the one request that needs more than
/// [`BODY_MAX_BYTES`] (voiding up to 1000 listed promo codes); otherwise as [`JsonBody`].
#[derive(Debug)]
pub struct LargeJsonBody<T, const LIMIT: usize>(pub T);

impl<T: Type, const LIMIT: usize> Payload for LargeJsonBody<T, LIMIT> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(_content_type: &str) -> bool {
        true
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + DeserializeOwned, const LIMIT: usize> ParsePayload for LargeJsonBody<T, LIMIT> {
    const IS_REQUIRED: bool = true;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        read_json(request, body, LIMIT)
            .await
            .map(LargeJsonBody)
            .map_err(Into::into)
    }
}

impl_apirequest_for_payload!(LargeJsonBody<T, LIMIT>, T: Type + DeserializeOwned, const LIMIT: usize);

/// Reads a JSON body of at most `limit` bytes and parses it with [`parse_json`].
async fn read_json<T: DeserializeOwned>(
    request: &Request,
    body: &mut RequestBody,
    limit: usize,
) -> Result<T, ApiError> {
    if !is_json(request) {
        return Err(not_json());
    }
    parse_json(read_bytes(body, limit).await?.as_ref())
}

/// Whether the request says its body is JSON (`application/json` or `application/…+json`).
fn is_json(request: &Request) -> bool {
    request.content_type().is_some_and(|ct| {
        ct.parse::<mime::Mime>().is_ok_and(|m| {
            m.type_() == "application"
                && (m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json"))
        })
    })
}

fn not_json() -> ApiError {
    ApiError::validation(
        "body",
        "The body must be JSON (Content-Type: application/json).",
    )
}

/// The body's bytes, refused past `limit`.
async fn read_bytes(body: &mut RequestBody, limit: usize) -> Result<impl AsRef<[u8]>, ApiError> {
    body.take()
        .map_err(|_| ApiError::validation("body", "The body could not be read."))?
        .into_bytes_limit(limit)
        .await
        .map_err(|err| match err {
            poem::error::ReadBodyError::PayloadTooLarge => ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("The body is larger than {} KiB.", limit / 1024),
            ),
            _ => ApiError::validation("body", "The body could not be read."),
        })
}

impl_apirequest_for_payload!(JsonBody<T>, T: Type + DeserializeOwned);

/// A JSON body that may be left out: an empty body reads as `T::default()`, whatever its
/// content type says (a client may send `Content-Type: application/json` with no body). A body
/// that is present follows the rules of [`JsonBody`].
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T);

impl<T: Type> Payload for OptionalJsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(_content_type: &str) -> bool {
        true
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type + DeserializeOwned + Default> ParsePayload for OptionalJsonBody<T> {
    const IS_REQUIRED: bool = false;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let bytes = read_bytes(body, BODY_MAX_BYTES).await?;
        if bytes.as_ref().is_empty() {
            return Ok(Self(T::default()));
        }
        if !is_json(request) {
            return Err(not_json().into());
        }
        Ok(Self(parse_json(bytes.as_ref())?))
    }
}

impl<'a, T: Type + DeserializeOwned + Default> poem_openapi::ApiExtractor<'a>
    for OptionalJsonBody<T>
{
    const TYPES: &'static [poem_openapi::ApiExtractorType] =
        &[poem_openapi::ApiExtractorType::RequestObject];

    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <Self as Payload>::register(registry);
    }

    fn request_meta() -> Option<poem_openapi::registry::MetaRequest> {
        Some(poem_openapi::registry::MetaRequest {
            description: None,
            content: vec![poem_openapi::registry::MetaMediaType {
                content_type: <Self as Payload>::CONTENT_TYPE,
                schema: <Self as Payload>::schema_ref(),
            }],
            required: false,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: poem_openapi::ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        <Self as ParsePayload>::from_request(request, body).await
    }
}

/// Parses a body, reporting the failing field without echoing any value.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would also accept a struct written as an array; the API takes objects only.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::validation(
            "body",
            "The body must be a JSON object.",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        describe(&path, err.inner())
    })?;
    // Trailing characters after the JSON value.
    deserializer.end().map_err(|err| describe(".", &err))?;
    Ok(value)
}

fn describe(path: &str, err: &serde_json::Error) -> ApiError {
    let message = err.to_string();
    let quoted = || message.split('`').nth(1).map(str::to_owned);
    if message.starts_with("missing field") {
        let field = quoted().unwrap_or_else(|| "body".to_owned());
        return ApiError::validation(field.clone(), format!("`{field}` is required."));
    }
    if message.starts_with("unknown field") {
        let field = quoted().unwrap_or_else(|| "body".to_owned());
        return ApiError::validation(
            field.clone(),
            format!("`{field}` is not a field of this request."),
        );
    }
    let syntax = matches!(
        err.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    );
    let field = if syntax || path == "." || path == "?" || path.is_empty() {
        "body".to_owned()
    } else {
        path.to_owned()
    };
    let detail = match err.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "The body is not valid JSON.".to_owned()
        }
        _ => match message.split_once(", expected ") {
            // serde's message names the expected type after this marker; the value before it
            // is the caller's input and is not echoed.
            Some((_, expected)) => {
                let expected = expected.split(" at line ").next().unwrap_or(expected);
                format!(
                    "`{field}` has the wrong type or value: expected {}.",
                    in_words(expected)
                )
            }
            None => format!("`{field}` has the wrong type or value."),
        },
    };
    ApiError::validation(field, detail)
}

/// What serde calls an expected type, in a caller's words: a Rust type's name (`i64`) says
/// nothing to a caller in another language.
fn in_words(expected: &str) -> &str {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "isize" | "usize" => {
            "a whole number"
        }
        "f32" | "f64" => "a number",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partner_billing::wire::IssueLicenseRequest;

    fn field_of(body: &str) -> (String, String) {
        match parse_json::<IssueLicenseRequest>(body.as_bytes()).unwrap_err() {
            ApiError::Problem { problem, .. } => {
                (problem.field.unwrap_or_default(), problem.detail)
            }
            ApiError::Unauthorized => panic!("not a problem"),
        }
    }

    #[test]
    fn names_the_failing_field() {
        assert_eq!(
            field_of(r#"{"planSlug":"pro","idempotencyKey":"12345678"}"#).0,
            "login"
        );
        assert_eq!(
            field_of(r#"{"planSlug":"pro","login":"a","idempotencyKey":"12345678","x":1}"#).0,
            "x"
        );
        let (field, detail) =
            field_of(r#"{"planSlug":5,"login":"secret-login","idempotencyKey":"12345678"}"#);
        assert_eq!(field, "planSlug");
        assert!(!detail.contains('5'), "{detail}");
        assert_eq!(field_of("{not json").0, "body");
        assert_eq!(field_of("[]").0, "body");
        assert_eq!(
            field_of(r#"{"planSlug":"pro","login":"a","idempotencyKey":"12345678"} x"#).0,
            "body"
        );
    }

    #[test]
    fn names_the_expected_type_in_words() {
        let refusal =
            |count: &str| match parse_json::<partner_billing::wire::GeneratePromoBatchRequest>(
                format!(r#"{{"planSlug":"pro","count":{count},"idempotencyKey":"12345678"}}"#)
                    .as_bytes(),
            ) {
                Err(ApiError::Problem { problem, .. }) => (problem.field, problem.detail),
                _ => panic!("{count} was taken for a count"),
            };
        for count in ["1.5", "\"3\"", "null"] {
            let (field, detail) = refusal(count);
            assert_eq!(field.as_deref(), Some("count"));
            assert_eq!(
                detail, "`count` has the wrong type or value: expected a whole number.",
                "{count}"
            );
        }
    }

    #[test]
    fn does_not_echo_string_values() {
        let (_, detail) =
            field_of(r#"{"planSlug":"pro","login":"a","idempotencyKey":["rss_canary"]}"#);
        assert!(!detail.contains("canary"), "{detail}");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_get_an_answer_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse_json::<IssueLicenseRequest>(&bytes);
        }

        #[test]
        fn a_failure_never_echoes_a_value(value in "[a-zA-Z0-9]{12,40}") {
            for body in [
                format!(r#"{{"planSlug":5,"login":"{value}","idempotencyKey":"{value}"}}"#),
                format!(r#"{{"planSlug":"pro","login":["{value}"],"idempotencyKey":"12345678"}}"#),
                format!(r#"{{"planSlug":"pro","login":"a","idempotencyKey":{{"k":"{value}"}}}}"#),
                format!(r#"{{"planSlug":"{value}","login":1}}"#),
            ] {
                match parse_json::<IssueLicenseRequest>(body.as_bytes()) {
                    Err(ApiError::Problem { problem, .. }) => {
                        proptest::prop_assert!(!problem.detail.contains(&value), "{}", problem.detail);
                    }
                    other => proptest::prop_assert!(false, "expected a problem, got {other:?}"),
                }
            }
        }
    }
}
