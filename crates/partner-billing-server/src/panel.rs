//! The reseller panel API: sessions, the account, and API keys. API keys cannot call it.

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::{ApiResponse, OpenApi};

use partner_billing::accounts;
use partner_billing::audit::Actor;
use partner_billing::audit_log;
use partner_billing::domain::Password;
use partner_billing::keys;
use partner_billing::wire::{
    ApiKeyList, AuditEntryList, ChangePasswordRequest, CreateApiKeyRequest, CreatedApiKey,
    ResellerAccount, RollApiKeyRequest, Session, SessionRequest,
};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::auth::PanelAuth;
use crate::body::{JsonBody, OptionalJsonBody};
use crate::errors;
use crate::origin::RequestFacts;
use crate::problem::{ApiError, ApiResult, OpResult};

/// Endpoints under `/v1/billing/resellers`.
pub struct PanelApi;

/// `maxLength` of `SessionRequest.clientId` and `.password` in the document.
const MAX_CLIENT_ID_CHARS: usize = partner_billing::limits::PRESENTED_CLIENT_ID_MAX_CHARS;
const MAX_PASSWORD_CHARS: usize = partner_billing::limits::PRESENTED_PASSWORD_MAX_CHARS;

/// `Request.ValidationFailed` naming `field` when `value` has more than `max` characters.
fn at_most_chars(field: &str, value: &str, max: usize) -> ApiResult<()> {
    if value.chars().nth(max).is_some() {
        return Err(ApiError::validation(
            field,
            format!("`{field}` must be at most {max} characters."),
        ));
    }
    Ok(())
}

#[derive(ApiResponse)]
pub enum SessionResponse {
    /// The session; send its token as `Authorization: Bearer <sessionToken>`.
    #[oai(status = 201)]
    Created(Json<Session>),
}

#[derive(ApiResponse)]
pub enum CreateApiKeyResponse {
    /// The new key. Its secret is shown here once and never again.
    #[oai(status = 201)]
    Created(Json<CreatedApiKey>),
}

#[derive(ApiResponse)]
pub enum RollApiKeyResponse {
    /// The new key (same name as the old one). Its secret is shown here once and never again.
    #[oai(status = 201)]
    Rolled(Json<CreatedApiKey>),
}

#[derive(ApiResponse)]
pub enum RevokeApiKeyResponse {
    /// Revoked (or already revoked); the key is refused from the next request on.
    #[oai(status = 204)]
    Revoked,
}

#[derive(ApiResponse)]
pub enum PasswordChangedResponse {
    /// Changed; every other session of the account has ended.
    #[oai(status = 204)]
    Changed,
}

#[derive(ApiResponse)]
pub enum SignedOutResponse {
    /// The session has ended.
    #[oai(status = 204)]
    SignedOut,
}

#[derive(ApiResponse)]
pub enum AccountResponse {
    /// The account: its client id, name and standing.
    #[oai(status = 200)]
    Ok(Json<ResellerAccount>),
}

#[derive(ApiResponse)]
pub enum ApiKeyListResponse {
    /// Every key of the account, oldest first, revoked and expired ones included.
    #[oai(status = 200)]
    Ok(Json<ApiKeyList>),
}

#[derive(ApiResponse)]
pub enum ActivityResponse {
    /// A page of the account's audit trail, newest first.
    #[oai(status = 200)]
    Ok(Json<AuditEntryList>),
}

#[OpenApi(prefix_path = "/v1/billing/resellers", tag = "ApiTags::Panel")]
impl PanelApi {
    /// Log in to the panel.
    ///
    /// An unknown client id, a wrong password and a suspended account all get the same empty
    /// 401. Sessions last 12 hours. After 10 failures for one client id, or 50 from one
    /// address, within 15 minutes: `429 Request.RateLimited` with `Retry-After`.
    #[oai(path = "/sessions", method = "post", operation_id = "createSession")]
    async fn create_session(
        &self,
        state: Data<&AppState>,
        facts: RequestFacts,
        body: JsonBody<SessionRequest>,
    ) -> OpResult<SessionResponse, errors::CreateSession> {
        // Out of the bounds the document declares: malformed (400), not a failed login.
        at_most_chars("clientId", &body.0.client_id, MAX_CLIENT_ID_CHARS)?;
        at_most_chars("password", &body.0.password, MAX_PASSWORD_CHARS)?;
        let password = Password::presented(body.0.password);
        let session = accounts::create_session(
            &state.store,
            &body.0.client_id,
            password,
            facts.peer(),
            facts.request_id(),
        )
        .await;
        state
            .metrics
            .record_panel_login(crate::metrics::login_outcome(&session));
        Ok(SessionResponse::Created(Json(session?)))
    }

    /// The logged-in account.
    #[oai(path = "/me", method = "get", operation_id = "getAccount")]
    async fn me(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
    ) -> OpResult<AccountResponse, errors::PanelRead> {
        let account = auth.verify(&state.store).await?;
        Ok(AccountResponse::Ok(Json(
            accounts::account_profile(&state.store, account.account_id).await?,
        )))
    }

    /// The account's activity: who changed what, newest first.
    ///
    /// Every change made by a person or a tool (keys created, rolled and revoked, sign-ins,
    /// password changes, webhook endpoints, alerts, the operator's credits, adjustments and
    /// suspensions) with its actor, source address and request id; never a secret. Licenses
    /// and promo batches are in the ledger instead. Pages by keyset: pass `nextCursor` as
    /// `cursor`; `limit` 1-500, default 100.
    #[oai(path = "/me/activity", method = "get", operation_id = "listActivity")]
    async fn list_activity(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        /// Entries per page, 1-500 (default 100).
        limit: Query<Option<i64>>,
        /// The `nextCursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> OpResult<ActivityResponse, errors::ListActivity> {
        let account = auth.verify(&state.store).await?;
        let page = audit_log::account_page(
            &state.store,
            account.account_id,
            limit.0,
            cursor.0.as_deref(),
        )
        .await?;
        Ok(ActivityResponse::Ok(Json(page.into())))
    }

    /// Create an API key.
    ///
    /// Existing keys keep working, so keys rotate without downtime: create a new key, deploy
    /// its secret, watch the old key's `lastUsedUtc`, then revoke the old key. At most five
    /// keys may be active at once.
    #[oai(path = "/me/api-keys", method = "post", operation_id = "createApiKey")]
    async fn create_api_key(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        /// Optional: `{"name": "…"}`; the body may be left out.
        body: OptionalJsonBody<CreateApiKeyRequest>,
    ) -> OpResult<CreateApiKeyResponse, errors::CreateApiKey> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        let key = keys::create_api_key(
            &state.store,
            account.account_id,
            body.0.name.as_deref(),
            &origin,
        )
        .await?;
        Ok(CreateApiKeyResponse::Created(Json(key)))
    }

    /// Every API key of the account, oldest first, with its last use.
    #[oai(path = "/me/api-keys", method = "get", operation_id = "listApiKeys")]
    async fn list_api_keys(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
    ) -> OpResult<ApiKeyListResponse, errors::PanelRead> {
        let account = auth.verify(&state.store).await?;
        Ok(ApiKeyListResponse::Ok(Json(
            keys::list_api_keys(&state.store, account.account_id).await?,
        )))
    }

    /// Revoke an API key; it is refused from the very next request.
    #[oai(
        path = "/me/api-keys/:apiKeyId",
        method = "delete",
        operation_id = "revokeApiKey"
    )]
    async fn revoke_api_key(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        /// The key to revoke (`rsk_…`).
        #[oai(name = "apiKeyId")]
        api_key_id: Path<String>,
    ) -> OpResult<RevokeApiKeyResponse, errors::RevokeApiKey> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        keys::revoke_api_key(&state.store, account.account_id, &api_key_id.0, &origin).await?;
        Ok(RevokeApiKeyResponse::Revoked)
    }

    /// Roll an API key: a new key now, the old one refused after a grace period.
    ///
    /// Creates a key with the old key's name and sets the old key's `expiresUtc` to now plus
    /// `expiresInSeconds` (0 to 604800, default 86400). Until then the old key works and is
    /// listed `active`; from then on it is refused with the empty 401 and listed `expired`. The
    /// new key counts toward the five active keys (an expired key does not). Unknown, another
    /// account's, revoked and expired keys are `404 Reseller.ApiKeyNotFound`.
    #[oai(
        path = "/me/api-keys/:apiKeyId/roll",
        method = "post",
        operation_id = "rollApiKey"
    )]
    async fn roll_api_key(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        /// The key to roll (`rsk_…`).
        #[oai(name = "apiKeyId")]
        api_key_id: Path<String>,
        /// Optional: `{"expiresInSeconds": N}`; the body may be left out.
        body: OptionalJsonBody<RollApiKeyRequest>,
    ) -> OpResult<RollApiKeyResponse, errors::RollApiKey> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        let key = keys::roll_api_key(
            &state.store,
            account.account_id,
            &api_key_id.0,
            body.0.expires_in_seconds,
            &origin,
        )
        .await?;
        Ok(RollApiKeyResponse::Rolled(Json(key)))
    }

    /// Sign out: the session of this request ends at once.
    #[oai(
        path = "/sessions/current",
        method = "delete",
        operation_id = "deleteCurrentSession"
    )]
    async fn delete_current_session(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
    ) -> OpResult<SignedOutResponse, errors::PanelRead> {
        let token = auth.token();
        accounts::authenticate_session(&state.store, &token).await?;
        accounts::end_session(&state.store, &token).await?;
        Ok(SignedOutResponse::SignedOut)
    }

    /// Change the panel password (12-128 characters).
    ///
    /// Every other session of the account ends; this one stays. A wrong `currentPassword` is
    /// `400 Request.ValidationFailed` naming that field, and counts as a failed sign-in of the
    /// account: past the sign-in limit, `429 Request.RateLimited` with `Retry-After`.
    #[oai(path = "/me/password", method = "put", operation_id = "changePassword")]
    async fn change_password(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        body: JsonBody<ChangePasswordRequest>,
    ) -> OpResult<PasswordChangedResponse, errors::ChangePassword> {
        at_most_chars(
            "currentPassword",
            &body.0.current_password,
            MAX_PASSWORD_CHARS,
        )?;
        let token = auth.token();
        let account = accounts::authenticate_session(&state.store, &token).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        let body = body.0;
        accounts::change_password(
            &state.store,
            account.account_id,
            &token,
            Password::presented(body.current_password),
            &body.new_password,
            &origin,
        )
        .await?;
        Ok(PasswordChangedResponse::Changed)
    }
}
