//! The route template of a request path, e.g. `/v1/billing/resellers/me/api-keys/{apiKeyId}`:
//! what metrics and access logs name a route by, never the raw path or an id in it.

use std::sync::OnceLock;

/// `POST` here issues a license.
pub const LICENSES: &str = "/v1/billing/partner/licenses";
/// `POST` here generates a promo batch.
pub const PROMO_BATCHES: &str = "/v1/billing/partner/promo-batches";
/// Any path that matches no route (a 404): one label value, whatever the path was.
pub const UNMATCHED: &str = "unmatched";

/// Routes served outside the OpenAPI document: the document itself, its UI and the HTML
/// panel's pages (docs/design.md).
const EXTRA: &[&str] = &[
    "/openapi.json",
    "/docs",
    "/panel",
    "/panel/login",
    "/panel/logout",
    "/panel/api-keys",
    "/panel/api-keys/{apiKeyId}/revoke",
    "/panel/api-keys/{apiKeyId}/roll",
    "/panel/ledger",
    "/panel/ledger.csv",
    "/panel/promo-batches",
    "/panel/licenses",
    "/panel/webhooks",
    "/panel/webhooks/{webhookEndpointId}/test",
    "/panel/webhooks/{webhookEndpointId}/delete",
    "/panel/settings",
    "/panel/settings/password",
    "/panel/settings/alerts",
    "/panel/assets/{file}",
];

struct Template {
    text: String,
    segments: Vec<String>,
    parameters: usize,
}

fn templates() -> &'static [Template] {
    static TEMPLATES: OnceLock<Vec<Template>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let doc: serde_json::Value =
            serde_json::from_str(&crate::openapi_document()).unwrap_or_default();
        let documented = doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|paths| paths.keys().cloned());
        let mut templates: Vec<Template> = documented
            .chain(EXTRA.iter().map(|t| (*t).to_owned()))
            .map(|text| {
                let segments: Vec<String> = text
                    .trim_start_matches('/')
                    .split('/')
                    .map(str::to_owned)
                    .collect();
                let parameters = segments.iter().filter(|s| s.starts_with('{')).count();
                Template {
                    text,
                    segments,
                    parameters,
                }
            })
            .collect();
        // A literal segment wins over a parameter (`sessions/current` over `sessions/{id}`).
        templates.sort_by_key(|t| t.parameters);
        templates
    })
}

/// The template `path` matches, or [`UNMATCHED`].
pub fn template(path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    templates()
        .iter()
        .find(|template| {
            template.segments.len() == segments.len()
                && template
                    .segments
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s)
        })
        .map_or(UNMATCHED, |template| template.text.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_their_parameter_name() {
        assert_eq!(
            template("/v1/billing/resellers/me/api-keys/rsk_abcdefghijklmnopqrstuvwx"),
            "/v1/billing/resellers/me/api-keys/{apiKeyId}"
        );
        assert_eq!(template(LICENSES), LICENSES);
        assert_eq!(template("/docs"), "/docs");
    }

    #[test]
    fn unknown_paths_share_one_value() {
        assert_eq!(template("/v1/billing/partner/nothing-here"), UNMATCHED);
        assert_eq!(template("/wp-admin/secret-path"), UNMATCHED);
    }
}
