//! The route template of a request path, e.g. `/v1/billing/resellers/me/api-keys/{apiKeyId}`:
//! what metrics and access logs name a route by, never the raw path or an id in it; and the
//! methods the route takes, for the `Allow` header of a 405 (RFC 9110).

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

/// The panel's routes as templates with their methods, from the table its router is built
/// from (so no route can be added without its label): `/panel` and the path, each
/// `:snake_case` parameter as `{camelCase}` like the API's (`/panel/api-keys/{apiKeyId}/revoke`).
fn panel_templates() -> Vec<(String, Vec<String>)> {
    let mut templates: Vec<(String, Vec<String>)> = Vec::new();
    for route in crate::web::panel_routes() {
        let text = panel_template(route.path);
        let method = route.method.as_str().to_owned();
        match templates.iter_mut().find(|(t, _)| *t == text) {
            Some((_, methods)) => methods.push(method),
            None => templates.push((text, vec![method])),
        }
    }
    templates
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
    /// The methods the route takes, e.g. `GET, POST`.
    allow: String,
}

fn templates() -> &'static [Template] {
    static TEMPLATES: OnceLock<Vec<Template>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let doc: serde_json::Value =
            serde_json::from_str(&crate::openapi_document()).unwrap_or_default();
        let documented =
            doc["paths"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(path, operations)| {
                    let methods = operations
                        .as_object()
                        .into_iter()
                        .flat_map(|operations| operations.keys())
                        .map(|method| method.to_ascii_uppercase())
                        .collect();
                    (path.clone(), methods)
                });
        let extra = EXTRA
            .iter()
            .map(|t| ((*t).to_owned(), vec!["GET".to_owned()]));
        let mut templates: Vec<Template> = documented
            .chain(extra)
            .chain(panel_templates())
            .map(|(text, mut methods)| {
                let segments: Vec<String> = text
                    .trim_start_matches('/')
                    .split('/')
                    .map(str::to_owned)
                    .collect();
                let parameters = segments.iter().filter(|s| s.starts_with('{')).count();
                methods.sort();
                methods.dedup();
                Template {
                    text,
                    segments,
                    parameters,
                    allow: methods.join(", "),
                }
            })
            .collect();
        // A literal segment wins over a parameter (`sessions/current` over `sessions/{id}`).
        templates.sort_by_key(|t| t.parameters);
        templates
    })
}

/// The route `path` matches.
fn matching(path: &str) -> Option<&'static Template> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    templates().iter().find(|template| {
        template.segments.len() == segments.len()
            && template
                .segments
                .iter()
                .zip(&segments)
                .all(|(t, s)| t.starts_with('{') || t == s)
    })
}

/// The template `path` matches, or [`UNMATCHED`].
pub fn template(path: &str) -> &'static str {
    matching(path).map_or(UNMATCHED, |template| template.text.as_str())
}

/// The methods the route of `path` takes, e.g. `GET, POST`; `None` when no route matches.
pub fn allowed_methods(path: &str) -> Option<&'static str> {
    matching(path).map(|template| template.allow.as_str())
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
    fn each_route_names_its_methods() {
        assert_eq!(
            allowed_methods("/v1/billing/resellers/me/api-keys"),
            Some("GET, POST")
        );
        assert_eq!(allowed_methods("/panel/login"), Some("GET, POST"));
        assert_eq!(allowed_methods("/panel/ledger.csv"), Some("GET"));
        assert_eq!(
            allowed_methods("/panel/promo-batches/5f0c7a2e-0000-4000-8000-000000000000/void"),
            Some("GET, POST")
        );
        assert_eq!(allowed_methods("/openapi.json"), Some("GET"));
        assert_eq!(allowed_methods("/wp-admin"), None);
    }

    #[test]
    fn unknown_paths_share_one_value() {
        assert_eq!(template("/v1/billing/partner/nothing-here"), UNMATCHED);
        assert_eq!(template("/wp-admin/secret-path"), UNMATCHED);
    }
}
