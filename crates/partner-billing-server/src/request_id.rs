//! Request ids: `X-Request-Id` is taken from the request when it is 1–64 visible ASCII
//! characters, else a new UUID is made. The id is echoed on every response, is carried by every
//! log line of the request (`partner_billing::request_scope`), and is member `requestId` of
//! every problem body.

use std::sync::Arc;

use poem::http::HeaderValue;
use poem::{Request, Response};

use crate::problem::PROBLEM_JSON;

/// The header that carries the id, in and out.
pub const HEADER: &str = "x-request-id";

/// Whether a caller's id is taken as it is: 1–64 visible ASCII characters (0x21–0x7E).
pub fn acceptable(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// The id of a request: the caller's when it is acceptable, else a new UUID.
pub fn of(req: &Request) -> Arc<str> {
    req.header(HEADER)
        .filter(|id| acceptable(id))
        .map(Arc::from)
        .unwrap_or_else(|| {
            // Encoded in place: one allocation (the `Arc`), not a `String` copied into one.
            let mut buffer = uuid::Uuid::encode_buffer();
            Arc::from(&*uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buffer))
        })
}

/// The answer with its request id: in the `X-Request-Id` header, and in a problem body.
pub async fn finish(response: Response, id: &str) -> Response {
    let mut response = add_to_problem(response, id).await;
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

/// Adds member `requestId` to a problem body; any other response passes unchanged.
async fn add_to_problem(response: Response, id: &str) -> Response {
    let is_problem = response
        .content_type()
        .is_some_and(|t| t.starts_with(PROBLEM_JSON));
    if !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = body.into_bytes().await else {
        return Response::from_parts(parts, poem::Body::empty());
    };
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(mut problem)) => {
            problem.insert("requestId".to_owned(), id.into());
            serde_json::to_vec(&problem).map_or(bytes, Into::into)
        }
        _ => bytes,
    };
    parts.headers.remove(poem::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, poem::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::acceptable;

    #[test]
    fn takes_visible_ascii_up_to_64() {
        assert!(acceptable("a"));
        assert!(acceptable(&"x".repeat(64)));
        assert!(acceptable("req-123_ABC:/~!"));
    }

    #[test]
    fn refuses_empty_long_spaces_and_non_ascii() {
        assert!(!acceptable(""));
        assert!(!acceptable(&"x".repeat(65)));
        assert!(!acceptable("has space"));
        assert!(!acceptable("tab\there"));
        assert!(!acceptable("é"));
    }
}
