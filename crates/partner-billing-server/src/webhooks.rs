//! The panel's webhook endpoints and low-balance alerts (docs/webhooks.md). Panel session only.

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::{ApiResponse, OpenApi};

use partner_billing::audit::Actor;
use partner_billing::webhooks;
use partner_billing::wire::{
    CreateWebhookEndpointRequest, CreatedWebhookEndpoint, LowBalanceAlert,
    SetLowBalanceAlertRequest, WebhookDeliveryList, WebhookEndpointList,
};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::auth::PanelAuth;
use crate::body::JsonBody;
use crate::errors;
use crate::origin::RequestFacts;
use crate::problem::OpResult;

/// Webhook endpoints and alerts under `/v1/billing/resellers/me`.
pub struct WebhooksApi;

#[derive(ApiResponse)]
pub enum CreateWebhookEndpointResponse {
    /// The new endpoint. Its signing secret is shown here once and never again.
    #[oai(status = 201)]
    Created(Json<CreatedWebhookEndpoint>),
}

#[derive(ApiResponse)]
pub enum DeleteWebhookEndpointResponse {
    /// Deleted: nothing more is sent to it.
    #[oai(status = 204)]
    Deleted,
}

#[derive(ApiResponse)]
pub enum TestWebhookEndpointResponse {
    /// A `webhook.test` event is queued for this endpoint.
    #[oai(status = 202)]
    Queued,
}

#[derive(ApiResponse)]
pub enum LowBalanceAlertResponse {
    /// The alert as it now stands.
    #[oai(status = 200)]
    Ok(Json<LowBalanceAlert>),
}

#[derive(ApiResponse)]
pub enum WebhookEndpointListResponse {
    /// The account's endpoints, oldest first, without their secrets.
    #[oai(status = 200)]
    Ok(Json<WebhookEndpointList>),
}

#[derive(ApiResponse)]
pub enum WebhookDeliveryListResponse {
    /// The last 100 delivery attempts to the endpoint, newest first.
    #[oai(status = 200)]
    Ok(Json<WebhookDeliveryList>),
}

#[OpenApi(prefix_path = "/v1/billing/resellers", tag = "ApiTags::Panel")]
impl WebhooksApi {
    /// Register a webhook endpoint.
    ///
    /// The service POSTs signed events (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`) of the chosen types to the URL, at least once; receivers dedupe on
    /// `webhook-id`. The URL must be `https://` to a public address. At most five per account.
    #[oai(
        path = "/me/webhook-endpoints",
        method = "post",
        operation_id = "createWebhookEndpoint"
    )]
    async fn create_endpoint(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        body: JsonBody<CreateWebhookEndpointRequest>,
    ) -> OpResult<CreateWebhookEndpointResponse, errors::CreateWebhookEndpoint> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        let created =
            webhooks::create_endpoint(&state.store, account.account_id, &body.0, &origin).await?;
        Ok(CreateWebhookEndpointResponse::Created(Json(created)))
    }

    /// The account's webhook endpoints, oldest first (never their secrets).
    #[oai(
        path = "/me/webhook-endpoints",
        method = "get",
        operation_id = "listWebhookEndpoints"
    )]
    async fn list_endpoints(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
    ) -> OpResult<WebhookEndpointListResponse, errors::PanelRead> {
        let account = auth.verify(&state.store).await?;
        Ok(WebhookEndpointListResponse::Ok(Json(
            webhooks::list_endpoints(&state.store, account.account_id).await?,
        )))
    }

    /// Delete a webhook endpoint; nothing more is sent to it.
    #[oai(
        path = "/me/webhook-endpoints/:webhookEndpointId",
        method = "delete",
        operation_id = "deleteWebhookEndpoint"
    )]
    async fn delete_endpoint(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        /// The endpoint (`rwe_…`).
        #[oai(name = "webhookEndpointId")]
        endpoint_id: Path<String>,
    ) -> OpResult<DeleteWebhookEndpointResponse, errors::WebhookEndpointById> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        webhooks::delete_endpoint(&state.store, account.account_id, &endpoint_id.0, &origin)
            .await?;
        Ok(DeleteWebhookEndpointResponse::Deleted)
    }

    /// Send a `webhook.test` event to the endpoint.
    #[oai(
        path = "/me/webhook-endpoints/:webhookEndpointId/test",
        method = "post",
        operation_id = "testWebhookEndpoint"
    )]
    async fn test_endpoint(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        /// The endpoint (`rwe_…`).
        #[oai(name = "webhookEndpointId")]
        endpoint_id: Path<String>,
    ) -> OpResult<TestWebhookEndpointResponse, errors::WebhookEndpointById> {
        let account = auth.verify(&state.store).await?;
        webhooks::send_test_event(&state.store, account.account_id, &endpoint_id.0).await?;
        Ok(TestWebhookEndpointResponse::Queued)
    }

    /// The last 100 delivery attempts to the endpoint, newest first.
    #[oai(
        path = "/me/webhook-endpoints/:webhookEndpointId/deliveries",
        method = "get",
        operation_id = "listWebhookDeliveries"
    )]
    async fn list_deliveries(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        /// The endpoint (`rwe_…`).
        #[oai(name = "webhookEndpointId")]
        endpoint_id: Path<String>,
    ) -> OpResult<WebhookDeliveryListResponse, errors::WebhookEndpointById> {
        let account = auth.verify(&state.store).await?;
        Ok(WebhookDeliveryListResponse::Ok(Json(
            webhooks::list_deliveries(&state.store, account.account_id, &endpoint_id.0).await?,
        )))
    }

    /// Set a product's low-balance alert.
    ///
    /// A `balance.low` event is sent when a charge takes the balance from at least
    /// `lowBalanceThreshold` to below it; once per crossing, re-armed when a credit lifts the
    /// balance back. 0 (the default) turns it off.
    #[oai(
        path = "/me/alerts/:productSlug",
        method = "put",
        operation_id = "setLowBalanceAlert"
    )]
    async fn set_alert(
        &self,
        state: Data<&AppState>,
        auth: PanelAuth,
        facts: RequestFacts,
        /// The product (`productSlug` of the balances).
        #[oai(
            name = "productSlug",
            validator(min_length = 1, max_length = 64, custom = "&crate::text_rule::SLUG")
        )]
        product_slug: Path<String>,
        body: JsonBody<SetLowBalanceAlertRequest>,
    ) -> OpResult<LowBalanceAlertResponse, errors::SetLowBalanceAlert> {
        let account = auth.verify(&state.store).await?;
        let origin = facts.origin(Actor::Panel(account.client_id));
        Ok(LowBalanceAlertResponse::Ok(Json(
            webhooks::set_low_balance_alert(
                &state.store,
                account.account_id,
                &product_slug.0,
                body.0.low_balance_threshold,
                &origin,
            )
            .await?,
        )))
    }
}
