//! Path segments that are not text. poem's router decodes each segment's percent-escapes and
//! drops a value that is not UTF-8, then refuses the whole request with a bare `text/plain`
//! 400, before any handler or credential check. Here, before routing, such a segment is read
//! as the one character no parameter accepts (a NUL): the request then takes its normal
//! course — the credentials first, then the parameter refused as malformed, as any malformed
//! value of it is (the 404 of an id's resource, or `400 Request.ValidationFailed` naming it).

use percent_encoding::percent_decode_str;
use poem::Request;
use poem::http::Uri;
use poem::http::uri::PathAndQuery;

/// What a segment that is not text becomes: an escaped NUL.
const NOT_TEXT: &str = "%00";

/// Replaces the request's path's non-text segments by [`NOT_TEXT`].
pub fn text_segments(req: &mut Request) {
    if let Some(path) = as_text(req.uri().path()) {
        let path_and_query = match req.uri().query() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        let mut parts = req.uri().clone().into_parts();
        // The replacement only removes bytes and adds `%00`: it parses whenever the original did.
        if let Ok(path_and_query) = PathAndQuery::try_from(path_and_query) {
            parts.path_and_query = Some(path_and_query);
            if let Ok(uri) = Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
}

/// `path` with every segment whose escapes do not decode to UTF-8 replaced by [`NOT_TEXT`];
/// `None` when every segment decodes (the common case costs one pass over the path).
fn as_text(path: &str) -> Option<String> {
    let is_text = |text: &str| percent_decode_str(text).decode_utf8().is_ok();
    if is_text(path) {
        return None;
    }
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| if is_text(segment) { segment } else { NOT_TEXT })
        .collect();
    Some(segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::as_text;

    #[test]
    fn only_segments_that_are_not_text_change() {
        assert_eq!(as_text("/v1/billing/partner/licenses/abc"), None);
        assert_eq!(as_text("/v1/billing/product/users/%C3%A9/licenses"), None);
        assert_eq!(as_text("/a/%00"), None);
        assert_eq!(
            as_text("/v1/billing/partner/licenses/%FF").as_deref(),
            Some("/v1/billing/partner/licenses/%00")
        );
        assert_eq!(
            as_text("/v1/billing/partner/requests/%FF%FEabcdefgh").as_deref(),
            Some("/v1/billing/partner/requests/%00")
        );
        assert_eq!(
            as_text("/v1/billing/product/users/a%C3b/licenses").as_deref(),
            Some("/v1/billing/product/users/%00/licenses")
        );
    }
}
