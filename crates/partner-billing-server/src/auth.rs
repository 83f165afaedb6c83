//! Credentials as the published document declares them, and their verification.
//!
//! The security schemes only read headers; the database check happens in the handler through
//! the library, so a database outage is a 503 and not a 401.

use poem::Request;
use poem_openapi::SecurityScheme;
use poem_openapi::auth::{ApiKey, Basic, Bearer};

use partner_billing::accounts::{self, PanelAccount};
use partner_billing::domain::Secret;
use partner_billing::keys::{self, PartnerAccount};
use partner_billing::operators::{self, OperatorIdentity};
use partner_billing::store::Store;
use partner_billing::wire::Balances;

use crate::problem::ApiResult;

/// Header carrying the secret beside `X-Client-Id`.
pub const CLIENT_SECRET_HEADER: &str = "X-Client-Secret";

/// A client id and secret as presented, not yet verified.
pub struct PresentedKey {
    client_id: String,
    secret: Secret,
}

async fn dedicated_headers(req: &Request, client_id: ApiKey) -> Option<PresentedKey> {
    let secret = req.header(CLIENT_SECRET_HEADER)?;
    Some(PresentedKey {
        client_id: client_id.key,
        secret: Secret::from_presented(secret),
    })
}

async fn basic_credentials(_req: &Request, basic: Basic) -> Option<PresentedKey> {
    Some(PresentedKey {
        client_id: basic.username,
        secret: Secret::from_presented(basic.password),
    })
}

/// The client id, in `X-Client-Id`; send the secret in `X-Client-Secret` with it.
#[derive(SecurityScheme)]
#[oai(
    rename = "ClientId",
    ty = "api_key",
    key_name = "X-Client-Id",
    key_in = "header",
    checker = "dedicated_headers"
)]
pub struct ClientIdHeaders(PresentedKey);

/// HTTP Basic: the client id as user name, the secret as password.
#[derive(SecurityScheme)]
#[oai(rename = "Basic", ty = "basic", checker = "basic_credentials")]
pub struct BasicCredentials(PresentedKey);

/// An API key: the dedicated headers are checked first, then HTTP Basic.
#[derive(SecurityScheme)]
pub enum PartnerAuth {
    Headers(ClientIdHeaders),
    Basic(BasicCredentials),
}

impl PartnerAuth {
    /// Verifies the key against the database: any failure is the empty 401.
    pub async fn verify(self, store: &Store) -> ApiResult<PartnerAccount> {
        let key = self.presented();
        Ok(keys::authenticate_api_key(store, &key.client_id, &key.secret).await?)
    }

    /// Verifies the key and reads the account's balances in one statement.
    pub async fn balances(self, store: &Store) -> ApiResult<Balances> {
        let key = self.presented();
        let (_, balances) = keys::balances_with_api_key(store, &key.client_id, &key.secret).await?;
        Ok(balances)
    }

    fn presented(self) -> PresentedKey {
        match self {
            Self::Headers(ClientIdHeaders(key)) | Self::Basic(BasicCredentials(key)) => key,
        }
    }
}

/// A panel session: `Authorization: Bearer <sessionToken>` from `POST /v1/billing/resellers/sessions`.
#[derive(SecurityScheme)]
#[oai(rename = "PanelSession", ty = "bearer", bearer_format = "rps_…")]
pub struct PanelAuth(Bearer);

impl PanelAuth {
    /// The presented session token, not yet verified.
    pub fn token(&self) -> Secret {
        Secret::from_presented(self.0.token.clone())
    }

    pub async fn verify(self, store: &Store) -> ApiResult<PanelAccount> {
        let token = Secret::from_presented(self.0.token);
        Ok(accounts::authenticate_session(store, &token).await?)
    }
}

/// An operator token for the product's backend: `Authorization: Bearer rso_…`, nothing else.
#[derive(SecurityScheme)]
#[oai(rename = "OperatorToken", ty = "bearer", bearer_format = "rso_…")]
pub struct OperatorAuth(Bearer);

impl OperatorAuth {
    /// Verifies the token against the database: any failure is the empty 401.
    pub async fn verify(self, store: &Store) -> ApiResult<OperatorIdentity> {
        let token = Secret::from_presented(self.0.token);
        Ok(operators::authenticate_operator(store, &token).await?)
    }
}
