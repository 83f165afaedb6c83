//! `GET /panel/webhooks`: the account's webhook endpoints (docs/webhooks.md): add one (its signing
//! secret shown once), send a test event, delete, and the newest delivery attempts.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{Request, Response, handler};

use serde::de::IgnoredAny;

use partner_billing::Error;
use partner_billing::limits::WEBHOOK_DESCRIPTION_MAX_CHARS;
use partner_billing::webhooks;
use partner_billing::wire::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, WEBHOOK_EVENT_TYPES, WebhookEndpoint,
};

use super::flash::{self, Flash, FlashPage, NewWebhookEndpoint};
use super::layout::{self, Utc};
use super::session::{SignedIn, SignedInForm};
use crate::AppState;

/// How many of the newest delivery attempts the page shows, all endpoints together.
const DELIVERIES_ON_PAGE: usize = 20;

/// An endpoint as its table row shows it.
struct EndpointRow {
    webhook_endpoint_id: String,
    url: String,
    event_types: String,
    description: String,
    status: String,
    created: Utc,
}

impl From<WebhookEndpoint> for EndpointRow {
    fn from(endpoint: WebhookEndpoint) -> Self {
        Self {
            webhook_endpoint_id: endpoint.webhook_endpoint_id,
            url: endpoint.url,
            event_types: endpoint.event_types.join(", "),
            description: endpoint.description.unwrap_or_default(),
            status: endpoint.status,
            created: Utc::new(endpoint.created_utc),
        }
    }
}

/// One delivery attempt as the deliveries table shows it.
struct DeliveryRow {
    attempted_utc: i64,
    attempted: Utc,
    url: String,
    event_type: String,
    event_id: String,
    attempt: i64,
    outcome: String,
    delivered: bool,
    /// A failed attempt that will be tried again: when.
    retry: Option<Utc>,
}

/// One event type checkbox of the form.
struct EventChoice {
    event_type: &'static str,
    checked: bool,
}

/// What the "Add endpoint" form holds: kept when it is refused.
#[derive(Default)]
struct AddForm {
    url: String,
    event_types: Vec<String>,
    description: String,
}

#[derive(Template)]
#[template(path = "webhooks.html")]
struct WebhooksPage {
    csrf: String,
    current: &'static str,
    endpoints: Vec<EndpointRow>,
    deliveries: Vec<DeliveryRow>,
    new_secret: Option<NewWebhookEndpoint>,
    choices: Vec<EventChoice>,
    url: String,
    description: String,
    notice: Option<String>,
    error: Option<String>,
    max_endpoints: i64,
}

async fn render_page(
    state: &AppState,
    who: SignedIn,
    status: StatusCode,
    new_secret: Option<NewWebhookEndpoint>,
    form: AddForm,
    notice: Option<String>,
    error: Option<String>,
) -> Response {
    let account_id = who.account.account_id;
    let endpoints = match webhooks::list_endpoints(&state.store, account_id).await {
        Ok(list) => list.webhook_endpoints,
        Err(err) => return layout::failure_for(&who, err),
    };
    let mut deliveries = Vec::new();
    let now = state.store.now_utc();
    for endpoint in &endpoints {
        let list = match webhooks::list_deliveries(
            &state.store,
            account_id,
            &endpoint.webhook_endpoint_id,
        )
        .await
        {
            Ok(list) => list.deliveries,
            Err(err) => return layout::failure_for(&who, err),
        };
        deliveries.extend(list.into_iter().map(|d| DeliveryRow {
            attempted_utc: d.attempted_utc,
            attempted: Utc::new(d.attempted_utc),
            url: endpoint.url.clone(),
            event_type: d.event_type,
            event_id: d.event_id,
            attempt: d.attempt,
            delivered: d.status_code.is_some_and(|c| (200..300).contains(&c)),
            // Only while it is due: a past attempt's retry has been made (or dropped).
            retry: Utc::optional(d.next_attempt_utc.filter(|next| *next > now)),
            outcome: match (d.status_code, d.error) {
                (Some(code), _) => format!("HTTP {code}"),
                (None, Some(error)) => error,
                (None, None) => "no answer".to_owned(),
            },
        }));
    }
    deliveries.sort_by_key(|d| std::cmp::Reverse(d.attempted_utc));
    deliveries.truncate(DELIVERIES_ON_PAGE);
    let choices = WEBHOOK_EVENT_TYPES
        .iter()
        .map(|&event_type| EventChoice {
            event_type,
            checked: form.event_types.iter().any(|t| t == event_type),
        })
        .collect();
    layout::render(
        status,
        &WebhooksPage {
            csrf: who.csrf,
            current: "webhooks",
            endpoints: endpoints.into_iter().map(EndpointRow::from).collect(),
            deliveries,
            new_secret,
            choices,
            url: form.url,
            description: form.description,
            notice,
            error,
            max_endpoints: webhooks::MAX_ENDPOINTS,
        },
    )
}

/// `GET /panel/webhooks`; after "Add endpoint" with its signing secret, once, and after "Send
/// test event" with its notice (see `flash`).
#[handler]
pub async fn page(req: &Request, who: SignedIn, state: Data<&AppState>) -> Response {
    let state: &AppState = &state;
    flash::showing(req, state, who, FlashPage::Webhooks, |who, flash| {
        let notice = flash.as_ref().and_then(Flash::notice);
        let new_secret = match flash {
            Some(Flash::NewWebhookEndpoint(added)) => Some(added),
            _ => None,
        };
        render_page(
            state,
            who,
            StatusCode::OK,
            new_secret,
            AddForm::default(),
            notice,
            None,
        )
    })
    .await
}

/// `POST /panel/webhooks`: "Add endpoint", answered by a `303` to the page, which shows the
/// signing secret once. The form's fields are read as pairs because each checked event type
/// repeats the `event_types` name.
#[handler]
pub async fn create(
    req: &Request,
    SignedInForm { who, form: fields }: SignedInForm<Vec<(String, String)>>,
    state: Data<&AppState>,
) -> Response {
    let mut form = AddForm::default();
    for (name, value) in fields {
        match name.as_str() {
            "url" => form.url = value.trim().to_owned(),
            "description" => form.description = value.trim().to_owned(),
            "event_types" => form.event_types.push(value),
            _ => {}
        }
    }
    let refused = |status, error: String| (status, Some(error));
    let (status, error) = if form.url.is_empty() {
        refused(
            StatusCode::BAD_REQUEST,
            "Enter the URL to send events to.".to_owned(),
        )
    } else if form.event_types.is_empty() {
        refused(
            StatusCode::BAD_REQUEST,
            "Choose at least one event type.".to_owned(),
        )
    } else {
        let request = CreateWebhookEndpointRequest {
            url: form.url.clone(),
            event_types: form.event_types.clone(),
            description: (!form.description.is_empty()).then(|| form.description.clone()),
        };
        match webhooks::create_endpoint(&state.store, who.account.account_id, &request, &who.origin)
            .await
        {
            Ok(CreatedWebhookEndpoint {
                webhook_endpoint_id,
                secret,
                ..
            }) => {
                let flash = Flash::NewWebhookEndpoint(NewWebhookEndpoint {
                    webhook_endpoint_id,
                    secret,
                });
                return flash::see_other(req, &state, &who, flash).await;
            }
            Err(Error::WebhookEndpointLimitReached) => refused(
                StatusCode::CONFLICT,
                format!(
                    "This account already has {} endpoints. Delete one you no longer use, then add the new one.",
                    webhooks::MAX_ENDPOINTS
                ),
            ),
            Err(Error::Validation(invalid)) => {
                let error = match invalid.field {
                    "url" => format!("The URL is refused: {}.", invalid.message),
                    "eventTypes" => "Choose event types from the list.".to_owned(),
                    "description" => format!(
                        "A description is at most {WEBHOOK_DESCRIPTION_MAX_CHARS} characters, \
                         without control characters."
                    ),
                    _ => format!("{} {}.", invalid.field, invalid.message),
                };
                refused(StatusCode::BAD_REQUEST, error)
            }
            Err(err) => return layout::failure_for(&who, err),
        }
    };
    render_page(&state, who, status, None, form, None, error).await
}

/// `POST /panel/webhooks/{webhookEndpointId}/test`: "Send test event", answered by a `303` to
/// the page with its notice (a reload sends no second event).
#[handler]
pub async fn test(
    req: &Request,
    SignedInForm { who, .. }: SignedInForm<IgnoredAny>,
    state: Data<&AppState>,
    Path(endpoint_id): Path<String>,
) -> Response {
    match webhooks::send_test_event(&state.store, who.account.account_id, &endpoint_id).await {
        Ok(()) => flash::see_other(req, &state, &who, Flash::WebhookTestSent).await,
        Err(err) => action_refused(&state, who, err).await,
    }
}

/// `POST /panel/webhooks/{webhookEndpointId}/delete`: "Delete"; nothing more is sent to it.
#[handler]
pub async fn delete(
    SignedInForm { who, .. }: SignedInForm<IgnoredAny>,
    state: Data<&AppState>,
    Path(endpoint_id): Path<String>,
) -> Response {
    match webhooks::delete_endpoint(
        &state.store,
        who.account.account_id,
        &endpoint_id,
        &who.origin,
    )
    .await
    {
        Ok(()) => layout::see_other("/panel/webhooks"),
        Err(err) => action_refused(&state, who, err).await,
    }
}

/// The page after a refused "Send test event" or "Delete".
async fn action_refused(state: &AppState, who: SignedIn, err: Error) -> Response {
    let error = match err {
        Error::WebhookEndpointNotFound => "That endpoint does not exist.".to_owned(),
        err => return layout::failure_for(&who, err),
    };
    render_page(
        state,
        who,
        StatusCode::NOT_FOUND,
        None,
        AddForm::default(),
        None,
        Some(error),
    )
    .await
}
