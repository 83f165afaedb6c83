//! The one rule for "does this request come from another site?" (docs/design.md, panel), used by
//! the JSON panel API (in the guard, before credentials) and by the HTML panel's forms.

use poem::Request;
use poem::http::header;

/// What the request is, which decides whether `Sec-Fetch-Site: none` may come from the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// A call to the JSON panel API: `none` (a request the user made directly, not from a page)
    /// passes unless it names a foreign `Origin`.
    ByApiCall,
    /// A form of the HTML panel: a browser posts it from a page, so only `same-origin` is ours.
    ByForm,
}

/// Cross-site when `Sec-Fetch-Site` is present and not `same-origin` (for an API call, `none`
/// too is let through to the `Origin` test); without it, when an `Origin` is present and is
/// not the panel's own (`http://` or `https://` and the request's host).
///
/// `same-origin` decides alone: Chromium sends `Origin: null` with `Sec-Fetch-Site:
/// same-origin` on a same-origin form POST from a page with `Referrer-Policy: no-referrer`,
/// and that request is same-origin.
pub fn is_cross_site(req: &Request, sent: Sent) -> bool {
    match req.header("sec-fetch-site") {
        Some("same-origin") => false,
        Some("none") if sent == Sent::ByApiCall => foreign_origin(req),
        Some(_) => true,
        None => foreign_origin(req),
    }
}

/// Whether the request names an `Origin` that is not the panel's own.
fn foreign_origin(req: &Request) -> bool {
    let Some(origin) = req.header(header::ORIGIN) else {
        return false;
    };
    let host = req
        .header(header::HOST)
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default();
    host.is_empty() || (origin != format!("http://{host}") && origin != format!("https://{host}"))
}

#[cfg(test)]
mod tests {
    use poem::Request;

    use super::{Sent, is_cross_site};

    #[test]
    fn the_table_of_cases() {
        /// (Sec-Fetch-Site, Origin, Host, cross-site?)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
            bool,
        );
        let cases: [Case; 15] = [
            (None, None, Some("panel.example"), false),
            (None, None, None, false),
            (Some("same-origin"), None, Some("panel.example"), false),
            (Some("same-site"), None, Some("panel.example"), true),
            (Some("cross-site"), None, Some("panel.example"), true),
            (Some("something-new"), None, Some("panel.example"), true),
            // Chromium's same-origin form POST under `Referrer-Policy: no-referrer`.
            (
                Some("same-origin"),
                Some("null"),
                Some("panel.example"),
                false,
            ),
            // The browser's own verdict wins over the origin it names.
            (
                Some("cross-site"),
                Some("https://panel.example"),
                Some("panel.example"),
                true,
            ),
            (
                None,
                Some("https://panel.example"),
                Some("panel.example"),
                false,
            ),
            (
                None,
                Some("http://127.0.0.1:8080"),
                Some("127.0.0.1:8080"),
                false,
            ),
            (
                None,
                Some("https://evil.example"),
                Some("panel.example"),
                true,
            ),
            (
                None,
                Some("https://panel.example.evil"),
                Some("panel.example"),
                true,
            ),
            (
                None,
                Some("http://127.0.0.1:8081"),
                Some("127.0.0.1:8080"),
                true,
            ),
            // `Origin: null` without `Sec-Fetch-Site` says nothing of where it came from.
            (None, Some("null"), Some("panel.example"), true),
            (None, Some("https://panel.example"), None, true),
        ];
        for (site, origin, host, expected) in cases {
            let mut builder = Request::builder().method(poem::http::Method::POST);
            if let Some(site) = site {
                builder = builder.header("sec-fetch-site", site);
            }
            if let Some(origin) = origin {
                builder = builder.header("origin", origin);
            }
            if let Some(host) = host {
                builder = builder.header("host", host);
            }
            let req = builder.finish();
            for sent in [Sent::ByApiCall, Sent::ByForm] {
                assert_eq!(
                    is_cross_site(&req, sent),
                    expected,
                    "Sec-Fetch-Site {site:?}, Origin {origin:?}, Host {host:?}, {sent:?}"
                );
            }
        }
    }

    #[test]
    fn the_host_of_an_http2_request_is_its_authority() {
        let req = Request::builder()
            .uri("https://panel.example/panel/logout".parse().unwrap())
            .header("origin", "https://panel.example")
            .finish();
        assert!(!is_cross_site(&req, Sent::ByForm));
    }

    /// `Sec-Fetch-Site: none` is a request the user made directly (a typed address, a tool):
    /// an API call, unless it names a foreign origin; never a form, which a page posts.
    #[test]
    fn none_is_an_api_call_never_a_form() {
        // (Origin, cross-site for an API call?)
        let cases = [
            (None, false),
            (Some("https://panel.example"), false),
            (Some("https://evil.example"), true),
            (Some("null"), true),
        ];
        for (origin, api_cross_site) in cases {
            let mut builder = Request::builder()
                .method(poem::http::Method::POST)
                .header("sec-fetch-site", "none")
                .header("host", "panel.example");
            if let Some(origin) = origin {
                builder = builder.header("origin", origin);
            }
            let req = builder.finish();
            assert_eq!(
                is_cross_site(&req, Sent::ByApiCall),
                api_cross_site,
                "{origin:?}"
            );
            assert!(is_cross_site(&req, Sent::ByForm), "{origin:?}");
        }
    }
}
