//! The published OpenAPI document: poem-openapi's, completed with what its derives cannot say.
//!
//! - `servers` (this host) and `security: []` on the operations that take no credentials;
//! - the partner API's credential as both headers together (or HTTP Basic);
//! - plain `application/json` (poem-openapi writes `application/json; charset=utf-8`, which
//!   some generators do not take for JSON), and standard integer formats;
//! - request bodies refuse unknown members; response members the server always sends are
//!   `required`, `nullable` where the value may be null, and the problem's `requestId`;
//! - the closed sets of values as `enum`s, and every bound from [`partner_billing::limits`];
//! - one example per error code on each error response.
//!
//! Over 450 lines on purpose: one pass over the document, each step a small function; split,
//! the steps would lose the order they must run in.

use serde_json::{Map, Value, json};

use partner_billing::wire::{
    ACCOUNT_STANDINGS, API_KEY_STATUSES, ErrorCode, LEDGER_KINDS, LICENSE_SOURCES,
    REQUEST_OPERATIONS, REQUEST_STATUSES, WEBHOOK_ENDPOINT_STATUSES, WEBHOOK_EVENT_TYPES,
};
use partner_billing::{audit, limits};

use crate::problem::PROBLEM_JSON;
use crate::text_rule;

/// Response members that are left out when they have no value (`skip_serializing_if`); every
/// other member of a response is always sent, `null` when it has no value.
const SOMETIMES_ABSENT: &[(&str, &str)] = &[
    ("Problem", "field"),
    ("Problem", "orderPublicId"),
    ("Problem", "batchId"),
];

/// Arrays whose length has no bound in the service (each grows with the account's history).
const UNBOUNDED_ARRAYS: &[(&str, &str)] = &[
    ("ApiKeyList", "apiKeys"),
    ("Balances", "balances"),
    ("UserLicenses", "licenses"),
    // One entry per plan the login holds.
    ("Entitlements", "entitlements"),
];

/// Completes poem-openapi's document (its `spec()`), see the module's documentation.
pub fn complete(spec: &str) -> String {
    let mut doc: Value = serde_json::from_str(spec).expect("poem-openapi emits JSON");
    doc["servers"] = json!([{
        "url": "/",
        "description": "This service: the host that serves this document."
    }]);
    let license = env!("CARGO_PKG_LICENSE");
    doc["info"]["license"] = json!({
        "name": license,
        "url": format!("https://spdx.org/licenses/{license}.html"),
    });
    declare_client_secret(&mut doc);
    for operation in operations_mut(&mut doc) {
        // No credentials (health, panel sign-in): say so, instead of leaving it unsaid.
        operation.entry("security").or_insert_with(|| json!([]));
        plain_json(operation);
    }
    let request_schemas = request_schema_names(&doc);
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, schema) in schemas.iter_mut() {
            let Some(schema) = schema.as_object_mut() else {
                continue;
            };
            if request_schemas.contains(name) {
                // Request bodies refuse unknown fields (`deny_unknown_fields`); optional members
                // may be sent as `null`.
                schema.insert("additionalProperties".to_owned(), Value::Bool(false));
                mark_optional_nullable(schema);
            } else {
                mark_always_sent(name, schema);
            }
            declare_members(name, schema);
        }
        if let Some(problem) = schemas.get_mut("Problem") {
            problem["properties"]["requestId"] = json!({
                "type": "string",
                "minLength": 1,
                "maxLength": limits::REQUEST_ID_MAX_CHARS,
                "description": "The request's id, as in the `X-Request-Id` answer header: the \
                    caller's own when it sent 1-64 visible ASCII characters, else a new UUID."
            });
            if let Some(required) = problem["required"].as_array_mut() {
                required.push("requestId".into());
            }
        }
    }
    for operation in operations_mut(&mut doc) {
        bound_parameters(operation);
        add_problem_examples(operation);
    }
    standard_integer_formats(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc).expect("a JSON value serialises");
    text.push('\n');
    text
}

fn operations_mut(doc: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    doc.get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|path| path.values_mut())
        .filter_map(Value::as_object_mut)
}

/// poem-openapi declares the `X-Client-Id` scheme alone; the secret header is part of the same
/// credential, so the document declares both as one requirement (or HTTP Basic instead).
fn declare_client_secret(doc: &mut Value) {
    if let Some(schemes) = doc
        .pointer_mut("/components/securitySchemes")
        .and_then(Value::as_object_mut)
    {
        schemes.insert(
            "ClientSecret".to_owned(),
            json!({
                "type": "apiKey",
                "in": "header",
                "name": "X-Client-Secret",
                "description": "The API key's secret (`rss_…`); send it with `X-Client-Id`."
            }),
        );
    }
    for operation in operations_mut(doc) {
        let Some(security) = operation.get_mut("security").and_then(Value::as_array_mut) else {
            continue;
        };
        for requirement in security.iter_mut().filter_map(Value::as_object_mut) {
            if requirement.contains_key("ClientId") {
                requirement.insert("ClientSecret".to_owned(), Value::Array(vec![]));
            }
        }
    }
}

/// `application/json; charset=utf-8` → `application/json` in every response.
fn plain_json(operation: &mut Map<String, Value>) {
    let contents = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("content"))
        .filter_map(Value::as_object_mut);
    for content in contents {
        if let Some(media) = content.remove("application/json; charset=utf-8") {
            content.insert("application/json".to_owned(), media);
        }
    }
}

fn request_schema_names(doc: &Value) -> Vec<String> {
    doc["paths"]
        .as_object()
        .into_iter()
        .flat_map(|paths| paths.values())
        .filter_map(Value::as_object)
        .flat_map(|operations| operations.values())
        .filter_map(|operation| operation.pointer("/requestBody/content"))
        .filter_map(Value::as_object)
        .flat_map(|content| content.values())
        .filter_map(|media| media.pointer("/schema/$ref").and_then(Value::as_str))
        .filter_map(|reference| reference.strip_prefix("#/components/schemas/"))
        .map(str::to_owned)
        .collect()
}

fn required_names(schema: &Map<String, Value>) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn mark_optional_nullable(schema: &mut Map<String, Value>) {
    let required = required_names(schema);
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if !required.contains(name)
            && let Some(property) = property.as_object_mut()
        {
            property.insert("nullable".to_owned(), Value::Bool(true));
        }
    }
}

/// A response member poem-openapi calls optional (an `Option`) is always sent, as `null` when
/// it has no value, unless it is one of [`SOMETIMES_ABSENT`]: so it is `required` and
/// `nullable`.
fn mark_always_sent(schema_name: &str, schema: &mut Map<String, Value>) {
    let mut required = required_names(schema);
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if required.contains(name) || SOMETIMES_ABSENT.contains(&(schema_name, name.as_str())) {
            continue;
        }
        if let Some(property) = property.as_object_mut() {
            property.insert("nullable".to_owned(), Value::Bool(true));
        }
        required.push(name.clone());
    }
    let order: Vec<String> = properties.keys().cloned().collect();
    required.sort_by_key(|name| order.iter().position(|o| o == name));
    schema.insert(
        "required".to_owned(),
        Value::Array(required.into_iter().map(Value::String).collect()),
    );
}

/// A string's length, in characters.
#[derive(Clone, Copy)]
struct Length(usize, usize);

/// The closed set of values of a member, if it has one.
fn member_enum(schema: &str, property: &str) -> Option<Vec<&'static str>> {
    Some(match (schema, property) {
        ("Problem", "code") => ErrorCode::ALL.iter().map(|c| c.as_str()).collect(),
        ("ApiKeyInfo", "status") => API_KEY_STATUSES.to_vec(),
        ("ResellerAccount", "standing") => ACCOUNT_STANDINGS.to_vec(),
        ("UserLicense" | "LicenseRecord", "source") => LICENSE_SOURCES.to_vec(),
        ("LedgerEntryRecord", "kind") => LEDGER_KINDS.to_vec(),
        ("RequestStatus", "status") => REQUEST_STATUSES.to_vec(),
        ("RequestStatus", "operation") => REQUEST_OPERATIONS.to_vec(),
        ("RedeemedLicense", "source") => vec!["promo"],
        ("WebhookEndpoint" | "CreatedWebhookEndpoint", "status") => {
            WEBHOOK_ENDPOINT_STATUSES.to_vec()
        }
        ("WebhookDelivery", "eventType") => WEBHOOK_EVENT_TYPES.to_vec(),
        ("Health", "status") => vec!["ok"],
        ("AuditEntry", "action") => audit::Action::ALL.iter().map(|a| a.as_str()).collect(),
        _ => return None,
    })
}

/// The length of a string member (every string member but the enums has one).
fn string_length(schema: &str, property: &str) -> Option<Length> {
    let id = Length(limits::ID_CHARS, limits::ID_CHARS);
    let uuid = Length(limits::UUID_CHARS, limits::UUID_CHARS);
    Some(match (schema, property) {
        (_, "planSlug" | "productSlug") => Length(1, limits::PLAN_SLUG_MAX_CHARS),
        (_, "login") => Length(1, limits::LOGIN_MAX_CHARS),
        (_, "idempotencyKey") => Length(
            limits::IDEMPOTENCY_KEY_MIN_CHARS,
            limits::IDEMPOTENCY_KEY_MAX_CHARS,
        ),
        ("Problem", "orderPublicId" | "batchId") => uuid,
        (_, "licenseId" | "batchId" | "orderPublicId") => uuid,
        ("SessionRequest", "clientId") => Length(0, limits::PRESENTED_CLIENT_ID_MAX_CHARS),
        (_, "apiKeyId" | "clientId" | "webhookEndpointId" | "eventId") => id,
        ("CreatedApiKey", "secret") | ("Session", "sessionToken") => {
            Length(limits::SECRET_CHARS, limits::SECRET_CHARS)
        }
        ("CreatedWebhookEndpoint", "secret") => {
            Length(limits::WEBHOOK_SECRET_CHARS, limits::WEBHOOK_SECRET_CHARS)
        }
        ("ResellerAccount", "name") => Length(1, limits::ACCOUNT_NAME_MAX_CHARS),
        (_, "name") => Length(0, limits::KEY_NAME_MAX_CHARS),
        ("PromoCode", "code") => Length(limits::PROMO_CODE_CHARS, limits::PROMO_CODE_CHARS),
        ("RedeemPromoCodeRequest", "code") => Length(0, limits::PROMO_CODE_INPUT_MAX_CHARS),
        ("SessionRequest", "password") | ("ChangePasswordRequest", "currentPassword") => {
            Length(0, limits::PRESENTED_PASSWORD_MAX_CHARS)
        }
        ("ChangePasswordRequest", "newPassword") => {
            Length(limits::PASSWORD_MIN_CHARS, limits::PASSWORD_MAX_CHARS)
        }
        (_, "url") => Length(0, limits::WEBHOOK_URL_MAX_CHARS),
        (_, "cursor" | "nextCursor") => Length(1, limits::CURSOR_MAX_CHARS),
        ("LedgerEntryRecord", "reference") => Length(0, limits::LEDGER_REFERENCE_MAX_CHARS),
        // A code as it was sent: anything the request could hold.
        ("VoidPromoCodesRequest" | "VoidPromoCodesResult", _) => {
            Length(0, limits::VOID_CODES_MAX_BODY_BYTES)
        }
        (_, "description") => Length(0, limits::WEBHOOK_DESCRIPTION_MAX_CHARS),
        ("WebhookDelivery", "error") => Length(0, limits::WEBHOOK_DELIVERY_ERROR_MAX_CHARS),
        ("AuditEntry", "actor") => Length(1, limits::AUDIT_ACTOR_MAX_CHARS),
        ("AuditEntry", "sourceAddress") => Length(1, limits::AUDIT_SOURCE_ADDRESS_MAX_CHARS),
        ("AuditEntry", "requestId") => Length(1, limits::REQUEST_ID_MAX_CHARS),
        // Problem texts: the type URI and title are fixed per code; the detail and `field` may
        // name an unknown member of the request, which is at most the body's size.
        ("Problem", "type") => Length(1, 256),
        ("Problem", "title") => Length(1, 256),
        ("Problem", "field") => Length(0, limits::BODY_MAX_BYTES),
        ("Problem", "detail") => Length(1, limits::BODY_MAX_BYTES + 256),
        _ => return None,
    })
}

/// The range of an integer member.
fn integer_range(schema: &str, property: &str) -> Option<(i64, Option<i64>)> {
    Some(match (schema, property) {
        ("GeneratePromoBatchRequest", "count") => (1, Some(limits::PROMO_BATCH_MAX_CODES)),
        ("RollApiKeyRequest", "expiresInSeconds") => (0, Some(limits::ROLL_GRACE_MAX_SECONDS)),
        (_, "lowBalanceThreshold") => (0, Some(limits::LOW_BALANCE_THRESHOLD_MAX)),
        ("Problem", "status") => (400, Some(599)),
        ("WebhookDelivery", "statusCode") => (100, Some(999)),
        ("WebhookDelivery", "attempt") => (1, None),
        ("PromoBatchSummary", "count") => (1, Some(limits::PROMO_BATCH_MAX_CODES)),
        ("PromoBatchSummary", "redeemed") | ("LedgerEntryRecord", "balanceAfter") => (0, None),
        ("LedgerEntryRecord", "entryId") => (1, None),
        // A charge is negative; a credit or an adjustment at most an operator's credit.
        ("LedgerEntryRecord", "units") => {
            (-limits::CREDIT_MAX_UNITS, Some(limits::CREDIT_MAX_UNITS))
        }
        ("VoidPromoCodesResult", "voided") => (0, Some(limits::VOID_CODES_MAX as i64)),
        (_, "remainingBalance") => (0, None),
        (_, name) if name.ends_with("Utc") => (0, None),
        _ => return None,
    })
}

/// The item count of an array member; `None` for [`UNBOUNDED_ARRAYS`].
fn array_items(schema: &str, property: &str) -> Option<(usize, usize)> {
    Some(match (schema, property) {
        ("PromoBatch", "codes") => (1, limits::PROMO_BATCH_MAX_CODES as usize),
        ("CreateWebhookEndpointRequest", "eventTypes") => {
            (1, limits::WEBHOOK_EVENT_TYPES_MAX_ITEMS)
        }
        // Stored without duplicates.
        (_, "eventTypes") => (1, WEBHOOK_EVENT_TYPES.len()),
        ("WebhookEndpointList", "webhookEndpoints") => (0, limits::MAX_WEBHOOK_ENDPOINTS),
        ("WebhookDeliveryList", "deliveries") => (0, limits::WEBHOOK_DELIVERIES_LISTED),
        ("AuditEntryList", "entries") => (0, limits::PAGE_LIMIT_MAX as usize),
        ("LicenseList", "licenses")
        | ("PromoBatchList", "promoBatches")
        | ("LedgerPage", "entries") => (0, limits::PAGE_LIMIT_MAX as usize),
        ("VoidPromoCodesRequest", "codes") => (1, limits::VOID_CODES_MAX),
        ("VoidPromoCodesResult", "unknown") => (0, limits::VOID_CODES_MAX),
        _ => return None,
    })
}

fn set_length(property: &mut Map<String, Value>, Length(min, max): Length) {
    if min > 0 {
        property.insert("minLength".to_owned(), min.into());
    } else {
        property.remove("minLength");
    }
    property.insert("maxLength".to_owned(), max.into());
}

/// Enums and bounds of the members of one schema.
fn declare_members(schema_name: &str, schema: &mut Map<String, Value>) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        let Some(property) = property.as_object_mut() else {
            continue;
        };
        match property.get("type").and_then(Value::as_str) {
            Some("string") => {
                if let Some(values) = member_enum(schema_name, name) {
                    property.insert("enum".to_owned(), json!(values));
                } else if let Some(length) = string_length(schema_name, name) {
                    set_length(property, length);
                } else {
                    panic!("{schema_name}.{name}: declare its length in `string_length`");
                }
            }
            Some("integer") => {
                if let Some((min, max)) = integer_range(schema_name, name) {
                    property.insert("minimum".to_owned(), min.into());
                    if let Some(max) = max {
                        property.insert("maximum".to_owned(), max.into());
                    }
                }
            }
            Some("array") => {
                if let Some((min, max)) = array_items(schema_name, name) {
                    if min > 0 {
                        property.insert("minItems".to_owned(), min.into());
                    }
                    property.insert("maxItems".to_owned(), max.into());
                } else {
                    assert!(
                        UNBOUNDED_ARRAYS.contains(&(schema_name, name.as_str())),
                        "{schema_name}.{name}: declare its size in `array_items`"
                    );
                }
                if name == "eventTypes"
                    && let Some(items) = property.get_mut("items").and_then(Value::as_object_mut)
                {
                    items.insert("enum".to_owned(), json!(WEBHOOK_EVENT_TYPES));
                }
                let length = string_length(schema_name, name);
                if name != "eventTypes"
                    && let Some(items) = property.get_mut("items").and_then(Value::as_object_mut)
                    && items.get("type").and_then(Value::as_str) == Some("string")
                    && let Some(length) = length
                {
                    set_length(items, length);
                }
            }
            _ => {}
        }
    }
}

/// Path parameters: the same bounds as the members of the same name.
fn bound_parameters(operation: &mut Map<String, Value>) {
    let parameters = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut);
    for parameter in parameters {
        let name = parameter
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let (Some(length), Some(schema)) = (
            string_length("", &name),
            parameter.get_mut("schema").and_then(Value::as_object_mut),
        ) {
            set_length(schema, length);
        }
        // The characters a parameter takes, as the body members of the same name.
        let pattern = match name.as_str() {
            "idempotencyKey" => Some(text_rule::VISIBLE_ASCII.pattern()),
            "planSlug" | "productSlug" => Some(text_rule::SLUG.pattern()),
            "login" => Some(text_rule::NO_CONTROL.pattern()),
            _ => None,
        };
        if let (Some(pattern), Some(schema)) = (
            pattern,
            parameter.get_mut("schema").and_then(Value::as_object_mut),
        ) {
            schema.insert("pattern".to_owned(), pattern.into());
        }
        if name == "limit"
            && let Some(schema) = parameter.get_mut("schema").and_then(Value::as_object_mut)
        {
            schema.insert("minimum".to_owned(), 1.into());
            schema.insert("maximum".to_owned(), limits::PAGE_LIMIT_MAX.into());
            schema.insert("default".to_owned(), limits::PAGE_LIMIT_DEFAULT.into());
        }
    }
    // `Idempotent-Replayed` (poem-openapi writes header names upper-case) is only ever `true`.
    let headers = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("headers"))
        .filter_map(Value::as_object_mut);
    for headers in headers {
        if let Some(header) = headers.remove("IDEMPOTENT-REPLAYED") {
            let mut header = header;
            header["schema"]["enum"] = json!(["true"]);
            header["description"] = json!(
                "`true` when this is the stored answer of an earlier request with the same \
                 idempotency key (nothing was done again); absent otherwise."
            );
            headers.insert("Idempotent-Replayed".to_owned(), header);
        }
    }
}

/// One example per code on each error response. The codes of a response are those its
/// description names (`problem::describe_codes` writes one "`Code`: meaning" line each).
fn add_problem_examples(operation: &mut Map<String, Value>) {
    let responses = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|responses| responses.iter_mut());
    for (status, response) in responses {
        let description = response["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Some(media) = response
            .pointer_mut(&format!("/content/{}", PROBLEM_JSON.replace('/', "~1")))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let examples: Map<String, Value> = ErrorCode::ALL
            .iter()
            .filter(|code| code.status().to_string() == *status)
            .filter(|code| description.contains(&format!("`{}`:", code.as_str())))
            .map(|&code| {
                (
                    code.as_str().replace('.', "-"),
                    json!({ "summary": code.title(), "value": example_problem(code) }),
                )
            })
            .collect();
        if !examples.is_empty() {
            media.insert("examples".to_owned(), Value::Object(examples));
        }
    }
}

/// A problem body as the server sends it for `code`.
fn example_problem(code: ErrorCode) -> Value {
    let mut problem = json!({
        "type": code.type_uri(),
        "title": code.title(),
        "status": code.status(),
        "detail": code.meaning(),
        "code": code.as_str(),
        "requestId": "9b2f6c1e-4d7a-4f0e-8a51-2c3b7e9d0f14",
    });
    match code {
        ErrorCode::ValidationFailed => {
            problem["field"] = "planSlug".into();
            problem["detail"] =
                "`planSlug` must be 1-64 characters of a-z, 0-9, '.', '_' or '-'".into();
        }
        ErrorCode::PromoCodesExpired => {
            problem["orderPublicId"] = "5f0c8a62-3b1d-4e8f-9a27-6d4c1b0e7f35".into();
            problem["batchId"] = "c3a9e4b1-7f2d-4c6a-8e05-1b9d3f7a2e68".into();
        }
        _ => {}
    }
    problem
}

/// `uint16`/`uint64` are no OpenAPI formats: `int32`/`int64` with a minimum of 0 instead.
fn standard_integer_formats(value: &mut Value) {
    match value {
        Value::Object(object) => {
            let format = object.get("format").and_then(Value::as_str).unwrap_or("");
            if let Some(bits) = format.strip_prefix("uint") {
                let standard = if matches!(bits, "8" | "16") {
                    "int32"
                } else {
                    "int64"
                };
                object.insert("format".to_owned(), standard.into());
                object.entry("minimum").or_insert(0.into());
            }
            object.values_mut().for_each(standard_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(standard_integer_formats),
        _ => {}
    }
}
