//! Liveness of the service and its database.

use poem::web::Data;
use poem_openapi::{ApiResponse, Object, OpenApi};

use crate::ApiTags;
use crate::AppState;
use crate::answer::Json;
use crate::errors;
use crate::problem::{ApiError, OpResult};
use partner_billing::wire::ErrorCode;

/// `GET /healthz`.
pub struct HealthApi;

/// The service's state.
#[derive(Object, serde::Serialize)]
pub struct Health {
    /// `ok` when the database answers.
    pub status: String,
}

#[derive(ApiResponse)]
pub enum HealthResponse {
    /// The service and its database answer.
    #[oai(status = 200)]
    Ok(Json<Health>),
}

#[OpenApi(tag = "ApiTags::Operations")]
impl HealthApi {
    /// Health check: 200 when the database answers, else 503 `Service.Unavailable`.
    #[oai(path = "/healthz", method = "get", operation_id = "health")]
    async fn health(&self, state: Data<&AppState>) -> OpResult<HealthResponse, errors::Health> {
        match state.store.ping().await {
            Ok(()) => Ok(HealthResponse::Ok(Json(Health {
                status: "ok".to_owned(),
            }))),
            Err(err) => {
                tracing::warn!(error = %err, "health check failed");
                Err(ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "The database does not answer.",
                )
                .into())
            }
        }
    }
}
