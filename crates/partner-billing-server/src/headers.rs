//! Response headers that keep answers out of caches and browsers' guesses (docs/security.md):
//! every `/v1` answer is `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`;
//! `/docs` (Swagger UI, every script and style of it inline in the page, nothing from another
//! origin) gets a Content-Security-Policy that allows exactly those inline pieces, by hash.
//! When browsers reach the app over HTTPS, every answer has `Strict-Transport-Security`.

use base64::Engine as _;
use poem::http::{HeaderMap, HeaderValue, header};
use sha2::{Digest, Sha256};

/// One year; no `preload` (that is the operator's choice, made at the browsers' list).
pub const HSTS: &str = "max-age=31536000";

/// Marks a request of an app reached over HTTPS (for the panel's `Secure` cookies).
#[derive(Clone, Copy, Debug)]
pub struct Https;

/// Adds the headers of an answer to a request for `path`.
pub fn add(headers: &mut HeaderMap, path: &str, docs_csp: &HeaderValue, https: bool) {
    if https {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    if path == "/v1" || path.starts_with("/v1/") {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    } else if path == "/docs" || path.starts_with("/docs/") {
        headers.insert(header::CONTENT_SECURITY_POLICY, docs_csp.clone());
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
}

/// The policy of the Swagger UI page: its inline scripts by SHA-256, its inline styles (the
/// UI also sets `style` attributes), images from itself or `data:` (its icons), requests
/// ("Try it out") to this origin only, no frames, no plugins, no form posts elsewhere.
pub fn docs_csp(html: &str) -> HeaderValue {
    let scripts = inline_blocks(html, "script")
        .map(|body| format!("'sha256-{}'", sha256_base64(body)))
        .collect::<Vec<_>>()
        .join(" ");
    let policy = format!(
        "default-src 'none'; script-src {scripts}; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; font-src 'self' data:; connect-src 'self'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
    );
    HeaderValue::from_str(&policy)
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
}

fn sha256_base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
}

/// The contents of each inline `<tag …>…</tag>` element of `html`.
fn inline_blocks<'a>(html: &'a str, tag: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut rest = html;
    std::iter::from_fn(move || {
        let start = rest.find(&open)?;
        let after_open = &rest[start..];
        let body_start = after_open.find('>')? + 1;
        let body = &after_open[body_start..];
        let end = body.find(&close)?;
        rest = &body[end + close.len()..];
        Some(&body[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_every_inline_script() {
        let html = "<html><script charset=\"UTF-8\">a()</script><body><script>b()</script></body>";
        let blocks: Vec<&str> = inline_blocks(html, "script").collect();
        assert_eq!(blocks, ["a()", "b()"]);
        let csp = docs_csp(html);
        let csp = csp.to_str().unwrap();
        assert!(csp.contains(&format!("'sha256-{}'", sha256_base64("a()"))));
        assert!(csp.contains(&format!("'sha256-{}'", sha256_base64("b()"))));
        assert!(!csp.contains("unsafe-eval"));
    }
}
