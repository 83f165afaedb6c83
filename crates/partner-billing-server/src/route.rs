//! The route template of a request path, e.g. `/v1/billing/resellers/me/api-keys/{apiKeyId}`:
//! what metrics and access logs name a route by, never the raw path or an id in it.

use std::sync::OnceLock;

/// `POST` here issues a license.
pub const LICENSES: &str = "/v1/billing/partner/licenses";
/// `POST` here generates a promo batch.
pub const PROMO_BATCHES: &str = "/v1/billing/partner/promo-batches";
/// Any path that matches no route (a 404): one label value, whatever the path was.
pub const UNMATCHED: &str = "unmatched";

/// Routes served outside the OpenAPI document and the panel's route table: the document itself
/// and its UI.
const EXTRA: &[&str] = &["/openapi.json", "/docs"];

/// The panel's routes as templates, from the table its router is built from (so no route can
/// be added without its label): `/panel` and the path, each `:snake_case` parameter as
/// `{camelCase}` like the API's (`/panel/api-keys/{apiKeyId}/revoke`).
fn panel_templates() -> Vec<String> {
    let mut paths: Vec<String> = crate::web::panel_routes()
        .iter()
        .map(|route| panel_template(route.path))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

fn panel_template(path: &str) -> String {
    let segments: Vec<String> = path
        .split('/')
        .map(|segment| match segment.strip_prefix(':') {
            Some(name) => format!("{{{}}}", camel_case(name)),
            None => segment.to_owned(),
        })
        .collect();
    let joined = format!("/panel{}", segments.join("/"));
    joined.trim_end_matches('/').to_owned()
}

/// `api_key_id` as `apiKeyId`.
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

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
            .chain(panel_templates())
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
    fn every_panel_route_has_its_template() {
        assert_eq!(template("/panel"), "/panel");
        assert_eq!(template("/panel/activity"), "/panel/activity");
        assert_eq!(
            template("/panel/licenses/5f0c7a2e-0000-4000-8000-000000000000/revoke"),
            "/panel/licenses/{licenseId}/revoke"
        );
        assert_eq!(
            template("/panel/promo-batches/5f0c7a2e-0000-4000-8000-000000000000/void"),
            "/panel/promo-batches/{batchId}/void"
        );
        assert_eq!(
            template("/panel/webhooks/rwe_abc/delete"),
            "/panel/webhooks/{webhookEndpointId}/delete"
        );
        for route in crate::web::panel_routes() {
            assert_ne!(
                template(&panel_template(route.path)),
                UNMATCHED,
                "{}",
                route.path
            );
        }
    }

    #[test]
    fn unknown_paths_share_one_value() {
        assert_eq!(template("/v1/billing/partner/nothing-here"), UNMATCHED);
        assert_eq!(template("/wp-admin/secret-path"), UNMATCHED);
    }
}
