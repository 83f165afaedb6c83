//! `GET /panel/api-keys`: list, create and roll (the new secret shown once), and revoke API
//! keys.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{Request, Response, handler};
use serde::Deserialize;
use serde::de::IgnoredAny;

use partner_billing::Error;
use partner_billing::keys;
use partner_billing::limits::{KEY_NAME_MAX_CHARS, ROLL_GRACE_MAX_SECONDS};
use partner_billing::wire::{ApiKeyInfo, CreatedApiKey};

use super::flash::{self, Flash, FlashPage, NewApiKey};
use super::layout::{self, Utc};
use super::session::{SignedIn, SignedInForm};
use crate::AppState;

/// A key as its table row shows it.
#[derive(Clone)]
struct KeyRow {
    name: String,
    api_key_id: String,
    active: bool,
    status: String,
    created: Utc,
    last_used: Option<Utc>,
    expires: Option<Utc>,
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
            expires: Utc::optional(key.expires_utc),
        }
    }
}

#[derive(Template)]
#[template(path = "api_keys.html")]
struct ApiKeysPage {
    csrf: String,
    current: &'static str,
    client_id: String,
    keys: Vec<KeyRow>,
    new_secret: Option<NewApiKey>,
    /// After "Roll": the key the new one replaces, as its row shows it.
    replaced: Option<KeyRow>,
    /// What the last form did, once ("Revoke").
    notice: Option<String>,
    /// "Create key": the name typed, and why it was refused.
    name: String,
    error: Option<String>,
    /// "Roll" or "Revoke" refused on a listed key: shown in that key's row, the choice kept.
    key_error: Option<KeyError>,
    /// Such a refusal about a key the list does not hold: shown above the list.
    page_error: Option<String>,
    grace_periods: &'static [(i64, &'static str)],
}

impl ApiKeysPage {
    /// The grace period a key's "Roll" offers first: the one just refused, else 24 hours.
    fn chosen_grace(&self, api_key_id: &str) -> i64 {
        self.key_error
            .as_ref()
            .filter(|e| e.api_key_id == api_key_id)
            .and_then(|e| e.grace)
            .unwrap_or(DEFAULT_GRACE_SECONDS)
    }
}

/// A form of a key's row that was refused, and why.
struct KeyError {
    api_key_id: String,
    message: String,
    /// The grace period a refused "Roll" asked for, when it is one the form offers.
    grace: Option<i64>,
}

/// What a refused form gives the page to show beside it.
enum Refused {
    Nothing,
    /// "Create key": the name typed, and why.
    Create {
        name: String,
        error: String,
    },
    /// "Roll" or "Revoke" on a key's row.
    Key(KeyError),
}

/// The grace period "Roll" offers first: the API's default.
const DEFAULT_GRACE_SECONDS: i64 = partner_billing::limits::ROLL_GRACE_DEFAULT_SECONDS;

/// The grace periods "Roll" offers the old key: now, 1 hour, 24 hours, 7 days.
const GRACE_PERIODS: [(i64, &str); 4] = [
    (0, "now"),
    (3600, "1 hour"),
    (DEFAULT_GRACE_SECONDS, "24 hours"),
    (ROLL_GRACE_MAX_SECONDS, "7 days"),
];

async fn render_page(
    state: &AppState,
    who: SignedIn,
    status: StatusCode,
    flash: Option<Flash>,
    refused: Refused,
) -> Response {
    let notice = flash.as_ref().and_then(Flash::notice);
    let new_secret = match flash {
        Some(Flash::NewApiKey(created)) => Some(created),
        _ => None,
    };
    let keys: Vec<KeyRow> = match keys::list_api_keys(&state.store, who.account.account_id).await {
        Ok(list) => list.api_keys.into_iter().map(KeyRow::from).collect(),
        Err(err) => return layout::failure_for(&who, err),
    };
    let replaced = new_secret
        .as_ref()
        .and_then(|created| created.replaces.as_deref())
        .and_then(|old| keys.iter().find(|key| key.api_key_id == old))
        .cloned();
    let (name, error, key_error, page_error) = match refused {
        Refused::Nothing => (String::new(), None, None, None),
        Refused::Create { name, error } => (name, Some(error), None, None),
        Refused::Key(e)
            if keys
                .iter()
                .any(|k| k.active && k.api_key_id == e.api_key_id) =>
        {
            (String::new(), None, Some(e), None)
        }
        Refused::Key(e) => (String::new(), None, None, Some(e.message)),
    };
    layout::render(
        status,
        &ApiKeysPage {
            csrf: who.csrf,
            current: "api-keys",
            client_id: who.account.client_id.to_string(),
            keys,
            new_secret,
            replaced,
            notice,
            name,
            error,
            key_error,
            page_error,
            grace_periods: &GRACE_PERIODS,
        },
    )
}

/// The answer to "Create key" or "Roll" that made `created`: a `303` to the page, which shows
/// the new key's secret once (see `flash`).
/// `replaces` is the key a "Roll" replaced.
async fn show_new_key(
    req: &Request,
    state: &AppState,
    who: &SignedIn,
    created: CreatedApiKey,
    replaces: Option<String>,
) -> Response {
    let flash = Flash::NewApiKey(NewApiKey {
        api_key_id: created.api_key_id,
        secret: created.secret,
        replaces,
    });
    flash::see_other(req, state, who, flash).await
}

/// `GET /panel/api-keys`; after "Create key" or "Roll", with the new key's secret, once;
/// after "Revoke", with its notice, once.
#[handler]
pub async fn page(req: &Request, who: SignedIn, state: Data<&AppState>) -> Response {
    let state: &AppState = &state;
    flash::showing(req, state, who, FlashPage::ApiKeys, |who, flash| {
        render_page(state, who, StatusCode::OK, flash, Refused::Nothing)
    })
    .await
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
}

/// `POST /panel/api-keys`: "Create key". Answered by a `303` to the page, which shows the
/// secret once; a reload never sends the form again nor shows that secret again.
#[handler]
pub async fn create(
    req: &Request,
    SignedInForm { who, form }: SignedInForm<CreateForm>,
    state: Data<&AppState>,
) -> Response {
    let name = form.name.trim().to_owned();
    let requested = (!name.is_empty()).then_some(name.as_str());
    match keys::create_api_key(&state.store, who.account.account_id, requested, &who.origin).await {
        Ok(created) => show_new_key(req, &state, &who, created, None).await,
        Err(Error::ApiKeyLimitReached) => {
            let error = format!(
                "{} keys are already active. Revoke one you no longer use, then create a new one.",
                keys::MAX_ACTIVE_KEYS
            );
            let refused = Refused::Create { name, error };
            render_page(&state, who, StatusCode::CONFLICT, None, refused).await
        }
        Err(Error::Validation(_)) => {
            let error = format!(
                "A name is at most {KEY_NAME_MAX_CHARS} characters, without control characters."
            );
            let refused = Refused::Create { name, error };
            render_page(&state, who, StatusCode::BAD_REQUEST, None, refused).await
        }
        Err(err) => layout::failure_for(&who, err),
    }
}

/// `POST /panel/api-keys/{apiKeyId}/revoke`: the key is refused from the next request on;
/// answered by a `303` to the page, which says so once.
#[handler]
pub async fn revoke(
    req: &Request,
    SignedInForm { who, .. }: SignedInForm<IgnoredAny>,
    state: Data<&AppState>,
    Path(api_key_id): Path<String>,
) -> Response {
    match keys::revoke_api_key(
        &state.store,
        who.account.account_id,
        &api_key_id,
        &who.origin,
    )
    .await
    {
        Ok(()) => flash::see_other(req, &state, &who, Flash::KeyRevoked { api_key_id }).await,
        Err(Error::ApiKeyNotFound) => {
            let refused = Refused::Key(KeyError {
                api_key_id,
                message: "That key does not exist.".to_owned(),
                grace: None,
            });
            render_page(&state, who, StatusCode::NOT_FOUND, None, refused).await
        }
        Err(err) => layout::failure_for(&who, err),
    }
}

#[derive(Deserialize)]
pub struct RollForm {
    /// Seconds the old key keeps working: one of [`GRACE_PERIODS`].
    #[serde(default)]
    expires_in: String,
}

/// `POST /panel/api-keys/{apiKeyId}/roll`: "Roll". A new key with the old one's name, its
/// secret shown once on the page the answer's `303` leads to; the old key works until the
/// chosen grace period ends.
#[handler]
pub async fn roll(
    req: &Request,
    SignedInForm { who, form }: SignedInForm<RollForm>,
    state: Data<&AppState>,
    Path(api_key_id): Path<String>,
) -> Response {
    let grace = form
        .expires_in
        .parse::<i64>()
        .ok()
        .filter(|seconds| GRACE_PERIODS.iter().any(|(s, _)| s == seconds));
    // A refusal is shown in the key's row, the grace period chosen kept.
    let refused = |message: String| {
        Refused::Key(KeyError {
            api_key_id: api_key_id.clone(),
            message,
            grace,
        })
    };
    let Some(grace) = grace else {
        let error = "Choose when the old key stops working: now, 1 hour, 24 hours or 7 days.";
        let refused = refused(error.to_owned());
        return render_page(&state, who, StatusCode::BAD_REQUEST, None, refused).await;
    };
    match keys::roll_api_key(
        &state.store,
        who.account.account_id,
        &api_key_id,
        Some(grace),
        &who.origin,
    )
    .await
    {
        Ok(created) => show_new_key(req, &state, &who, created, Some(api_key_id)).await,
        Err(Error::ApiKeyLimitReached) => {
            let error = format!(
                "{} keys are already active: revoke one you no longer use before rolling, or roll with \"now\".",
                keys::MAX_ACTIVE_KEYS
            );
            render_page(&state, who, StatusCode::CONFLICT, None, refused(error)).await
        }
        Err(Error::ApiKeyNotFound) => {
            let error = "That key does not exist or is no longer active.".to_owned();
            render_page(&state, who, StatusCode::NOT_FOUND, None, refused(error)).await
        }
        Err(err) => layout::failure_for(&who, err),
    }
}
