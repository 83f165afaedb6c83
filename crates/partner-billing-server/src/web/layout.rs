//! Shared pieces of the panel's pages: rendering, redirects, error pages and times.

use askama::Template;
use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Response};

use crate::problem::ApiError;
use crate::web::session::SignedIn;

/// A rendered page with its status.
pub fn render<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(html) => Response::builder()
            .status(status)
            .content_type("text/html; charset=utf-8")
            .body(html),
        Err(err) => {
            tracing::error!(error = %err, "panel template failed to render");
            Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .content_type("text/plain; charset=utf-8")
                .body("Internal error")
        }
    }
}

/// `303 See Other` to a panel path.
pub fn see_other(location: &str) -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, location)
        .finish()
}

pub fn set_cookie(response: &mut Response, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage<'a> {
    title: &'a str,
    message: &'a str,
    /// Signed in: the session's form token, for the page's "Sign out" button.
    csrf: Option<&'a str>,
}

/// Says when a refused attempt may be made again (`429` pages), as the JSON API's problems do.
pub fn set_retry_after(response: &mut Response, seconds: u64) {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
}

/// A small page saying what happened, outside the signed-in layout.
pub fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    render(
        status,
        &MessagePage {
            title,
            message,
            csrf: None,
        },
    )
}

/// As [`message_page`], for a signed-in reseller: with its "Sign out" button, as on every page.
pub fn signed_in_message(
    who: &SignedIn,
    status: StatusCode,
    title: &str,
    message: &str,
) -> Response {
    message_with_sign_out(&who.csrf, status, title, message)
}

/// As [`message_page`], with the "Sign out" button of the session whose form token is `csrf`.
pub fn message_with_sign_out(
    csrf: &str,
    status: StatusCode,
    title: &str,
    message: &str,
) -> Response {
    render(
        status,
        &MessagePage {
            title,
            message,
            csrf: Some(csrf),
        },
    )
}

/// A list page's `?cursor=`: an empty one (a link or form that left it blank) is the first
/// page, like none; any other is the list's to read.
pub fn page_cursor<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let cursor: Option<String> = serde::Deserialize::deserialize(deserializer)?;
    Ok(cursor.filter(|c| !c.is_empty()))
}

/// The list page a form came from, by its cursor, when the form carries one that could be a
/// cursor (the list reads it, and refuses one it cannot); never text that would change the
/// address it is put in.
pub fn way_back(cursor: &str) -> Option<&str> {
    let url_safe = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    (!cursor.is_empty() && cursor.len() <= 512 && cursor.bytes().all(url_safe)).then_some(cursor)
}

/// As [`failure`], for a signed-in reseller: with its "Sign out" button.
pub fn failure_for(who: &SignedIn, err: partner_billing::Error) -> Response {
    let (status, title, message) = failure_text(err);
    signed_in_message(who, status, title, message)
}

/// The page for a core failure: the same status as the JSON API would give, never details.
pub fn failure(err: partner_billing::Error) -> Response {
    let (status, title, message) = failure_text(err);
    message_page(status, title, message)
}

fn failure_text(err: partner_billing::Error) -> (StatusCode, &'static str, &'static str) {
    let status = ApiError::from(err).into_response().status();
    let (title, message) = status_text(status);
    (status, title, message)
}

/// The title and message of a failure page with `status`.
pub fn status_text(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => (
            "Not available",
            "The service is briefly unavailable. Try again in a moment.",
        ),
        // A page address or form the panel did not make (a cursor of another list, say).
        StatusCode::BAD_REQUEST => (
            "Not a valid request",
            "This page address or form is not one the panel made (a link to another page of a list that was altered, say). Go back and start again.",
        ),
        StatusCode::NOT_FOUND => ("Not found", "There is no such item in this account."),
        _ => (
            "Not available",
            "Something went wrong on our side. Try again; if it persists, contact support.",
        ),
    }
}

/// A Unix time as the panel shows it: `2026-11-23 06:00 UTC`, with the machine-readable form
/// for `<time datetime="…">`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utc {
    pub datetime: String,
    pub text: String,
}

impl Utc {
    /// `datetime` in RFC 3339, `text` as a person reads it (the core's `utc` routines).
    pub fn new(unix_seconds: i64) -> Self {
        use partner_billing::utc;
        match (utc::rfc3339(unix_seconds), utc::minutes(unix_seconds)) {
            (Some(datetime), Some(text)) => Self { datetime, text },
            // Outside years 0-9999: no time the service writes; shown as stored.
            _ => Self {
                datetime: String::new(),
                text: unix_seconds.to_string(),
            },
        }
    }

    pub fn optional(unix_seconds: Option<i64>) -> Option<Self> {
        unix_seconds.map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::Utc;

    #[test]
    fn times_read_as_the_design_shows() {
        let t = Utc::new(1_795_413_600);
        assert_eq!(t.text, "2026-11-23 06:00 UTC");
        assert_eq!(t.datetime, "2026-11-23T06:00:00Z");
        assert_eq!(Utc::new(0).text, "1970-01-01 00:00 UTC");
        assert_eq!(Utc::new(951_782_400).text, "2000-02-29 00:00 UTC");
        assert_eq!(Utc::new(-1).datetime, "1969-12-31T23:59:59Z");
        assert_eq!(Utc::new(253_402_300_800).text, "253402300800", "year 10000");
    }
}
