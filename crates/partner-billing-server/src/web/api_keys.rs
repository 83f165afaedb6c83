//! `GET /panel/api-keys`: list, create (the secret shown once) and revoke API keys.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Form, Path};
use poem::{Request, Response, handler};
use serde::Deserialize;

use partner_billing::Error;
use partner_billing::keys;
use partner_billing::wire::{ApiKeyInfo, CreatedApiKey};

use super::layout::{self, Utc};
use super::session::{self, SignedIn};
use crate::AppState;

/// A key as its table row shows it.
struct KeyRow {
    name: String,
    api_key_id: String,
    active: bool,
    status: String,
    created: Utc,
    last_used: Option<Utc>,
}

impl From<ApiKeyInfo> for KeyRow {
    fn from(key: ApiKeyInfo) -> Self {
        Self {
            name: key.name.unwrap_or_default(),
            active: key.status == "active",
            status: key.status,
            api_key_id: key.api_key_id,
            created: Utc::new(key.created_utc),
            last_used: Utc::optional(key.last_used_utc),
        }
    }
}

/// The secret of a key just created: in this one response and nowhere else.
struct NewSecret {
    client_id: String,
    api_key_id: String,
    secret: String,
}

#[derive(Template)]
#[template(path = "api_keys.html")]
struct ApiKeysPage {
    csrf: String,
    current: &'static str,
    client_id: String,
    keys: Vec<KeyRow>,
    new_secret: Option<NewSecret>,
    name: String,
    error: Option<String>,
}

async fn render_page(
    state: &AppState,
    who: SignedIn,
    status: StatusCode,
    new_secret: Option<NewSecret>,
    name: String,
    error: Option<String>,
) -> Response {
    let keys = match keys::list_api_keys(&state.store, who.account.account_id).await {
        Ok(list) => list.api_keys.into_iter().map(KeyRow::from).collect(),
        Err(err) => return layout::failure(err),
    };
    layout::render(
        status,
        &ApiKeysPage {
            csrf: who.csrf,
            current: "api-keys",
            client_id: who.account.client_id.to_string(),
            keys,
            new_secret,
            name,
            error,
        },
    )
}

#[handler]
pub async fn page(req: &Request, state: Data<&AppState>) -> Response {
    match session::signed_in(&state.store, req).await {
        Ok(who) => render_page(&state, who, StatusCode::OK, None, String::new(), None).await,
        Err(response) => response,
    }
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
}

/// `POST /panel/api-keys`: "Create key". The page answering it shows the secret once; it is
/// `no-store`, and a reload never shows that secret again.
#[handler]
pub async fn create(
    req: &Request,
    state: Data<&AppState>,
    Form(form): Form<CreateForm>,
) -> Response {
    let who = match session::signed_in_form(&state.store, req, &form.csrf).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let name = form.name.trim().to_owned();
    let requested = (!name.is_empty()).then_some(name.as_str());
    match keys::create_api_key(&state.store, who.account.account_id, requested).await {
        Ok(CreatedApiKey {
            api_key_id,
            client_id,
            secret,
            ..
        }) => {
            let new_secret = NewSecret {
                client_id,
                api_key_id,
                secret,
            };
            render_page(
                &state,
                who,
                StatusCode::OK,
                Some(new_secret),
                String::new(),
                None,
            )
            .await
        }
        Err(Error::ApiKeyLimitReached) => {
            let error = format!(
                "{} keys are already active. Revoke one you no longer use, then create a new one.",
                keys::MAX_ACTIVE_KEYS
            );
            render_page(&state, who, StatusCode::CONFLICT, None, name, Some(error)).await
        }
        Err(Error::Validation(_)) => {
            let error = "A name is at most 64 characters, without control characters.".to_owned();
            render_page(
                &state,
                who,
                StatusCode::BAD_REQUEST,
                None,
                name,
                Some(error),
            )
            .await
        }
        Err(err) => layout::failure(err),
    }
}

#[derive(Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /panel/api-keys/{apiKeyId}/revoke`: the key is refused from the next request on.
#[handler]
pub async fn revoke(
    req: &Request,
    state: Data<&AppState>,
    Path(api_key_id): Path<String>,
    Form(form): Form<RevokeForm>,
) -> Response {
    let who = match session::signed_in_form(&state.store, req, &form.csrf).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    match keys::revoke_api_key(&state.store, who.account.account_id, &api_key_id).await {
        Ok(()) => layout::see_other("/panel/api-keys"),
        Err(Error::ApiKeyNotFound) => {
            let error = "That key does not exist.".to_owned();
            render_page(
                &state,
                who,
                StatusCode::NOT_FOUND,
                None,
                String::new(),
                Some(error),
            )
            .await
        }
        Err(err) => layout::failure(err),
    }
}
