//! Shared pieces of the panel's pages: rendering, redirects, error pages and times.

use askama::Template;
use poem::http::{HeaderValue, StatusCode, header};
use poem::{IntoResponse, Response};

use crate::problem::ApiError;

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
pub fn see_other(location: &'static str) -> Response {
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
}

/// A small page saying what happened, outside the signed-in layout.
pub fn message_page(status: StatusCode, title: &str, message: &str) -> Response {
    render(status, &MessagePage { title, message })
}

/// The page for a core failure: the same status as the JSON API would give, never details.
pub fn failure(err: partner_billing::Error) -> Response {
    let status = ApiError::from(err).into_response().status();
    let message = if status == StatusCode::SERVICE_UNAVAILABLE {
        "The service is briefly unavailable. Try again in a moment."
    } else {
        "Something went wrong on our side. Try again; if it persists, contact support."
    };
    message_page(status, "Not available", message)
}

/// A Unix time as the panel shows it: `2026-11-23 06:00 UTC`, with the machine-readable form
/// for `<time datetime="…">`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utc {
    pub datetime: String,
    pub text: String,
}

impl Utc {
    pub fn new(unix_seconds: i64) -> Self {
        let days = unix_seconds.div_euclid(86_400);
        let secs = unix_seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let (hour, minute, second) = (secs / 3600, secs % 3600 / 60, secs % 60);
        Self {
            datetime: format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
            text: format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC"),
        }
    }

    pub fn optional(unix_seconds: Option<i64>) -> Option<Self> {
        unix_seconds.map(Self::new)
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    }
}
