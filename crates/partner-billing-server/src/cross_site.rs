//! The one rule for "does this request come from another site?" (docs/design.md, panel), used by
//! the JSON panel API (in the guard, before credentials) and by the HTML panel's forms.

use poem::Request;
use poem::http::header;

/// Cross-site when `Sec-Fetch-Site` is present and neither `same-origin` nor `none` (a typed
/// address or a bookmark); without it, when an `Origin` is present and is not the panel's own
/// (`http://` or `https://` and the request's host).
///
/// When `Sec-Fetch-Site` is present it decides alone: Chromium sends `Origin: null` with
/// `Sec-Fetch-Site: same-origin` on a same-origin form POST from a page with
/// `Referrer-Policy: no-referrer`, and that request is same-origin.
pub fn is_cross_site(req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site") {
        return site != "same-origin" && site != "none";
    }
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

    use super::is_cross_site;

    #[test]
    fn the_table_of_cases() {
        /// (Sec-Fetch-Site, Origin, Host, cross-site?)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
            bool,
        );
        let cases: [Case; 16] = [
            (None, None, Some("panel.example"), false),
            (None, None, None, false),
            (Some("same-origin"), None, Some("panel.example"), false),
            (Some("none"), None, Some("panel.example"), false),
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
            assert_eq!(
                is_cross_site(&req),
                expected,
                "Sec-Fetch-Site {site:?}, Origin {origin:?}, Host {host:?}"
            );
        }
    }

    #[test]
    fn the_host_of_an_http2_request_is_its_authority() {
        let req = Request::builder()
            .uri("https://panel.example/panel/logout".parse().unwrap())
            .header("origin", "https://panel.example")
            .finish();
        assert!(!is_cross_site(&req));
    }
}
