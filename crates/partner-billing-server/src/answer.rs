//! JSON answers, published as poem-openapi's `Json` publishes them (the same content type, the
//! type's schema) but written with serde.
//!
//! poem-openapi's `Json` first builds a `serde_json::Value` tree of the whole answer (a map node
//! and an owned key for every member of every item), then writes the tree: a third of the
//! server's instructions on a 20-row list page (docs/performance.md, "Answers written with
//! serde"). The wire types derive both serde and poem-openapi's `Object` with the same names;
//! debug builds, so every test run, check each answer against poem-openapi's rendering of it.

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::payload::Payload;
use poem_openapi::registry::{MetaSchemaRef, Registry};
use poem_openapi::types::{ToJSON, Type};
use serde::Serialize;

/// A JSON answer, the payload of a response variant (`Ok(Json<LicenseList>)`): the variant's
/// derive sets its status and headers once the body is written.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: Type> Payload for Json<T> {
    const CONTENT_TYPE: &'static str = "application/json; charset=utf-8";

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Serialize + ToJSON> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        // Compared, not printed: an answer may carry a secret shown once.
        #[cfg(debug_assertions)]
        assert!(
            serde_json::to_value(&self.0).ok() == self.0.to_json(),
            "serde and the published schema disagree on {}",
            T::name()
        );
        match serde_json::to_vec(&self.0) {
            Ok(body) => Response::builder()
                .content_type(<Self as Payload>::CONTENT_TYPE)
                .body(body),
            // Unreachable: the wire types hold strings, numbers and string-keyed maps, nothing
            // serde cannot write. Should it happen, the variant's derive still sets its own
            // status over this one (as it did over poem-openapi's `Json`): the log says why the
            // body is empty.
            Err(err) => {
                tracing::error!(error = %err, answer = %T::name(), "an answer could not be written");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer written with serde reads as poem-openapi's rendering of it, members that are
    /// null included, with the same content type.
    #[tokio::test]
    async fn an_answer_is_written_as_the_schema_renders_it() {
        use partner_billing::wire::{LicenseList, LicenseRecord};
        let record = |batch: Option<&str>, expires: Option<i64>| LicenseRecord {
            license_id: "7c1f4a52-0d0e-4d39-9a7e-3f5a1f0f2b1a".into(),
            plan_slug: "pro".into(),
            login: "alice \"quoted\" é".into(),
            source: "promo".into(),
            batch_id: batch.map(str::to_owned),
            created_utc: 1_700_000_000,
            starts_utc: 1_700_000_000,
            expires_utc: expires,
            revoked_utc: None,
        };
        let list = LicenseList {
            licenses: vec![record(Some("b-1"), Some(1_702_592_000)), record(None, None)],
            next_cursor: None,
        };
        let ours = Json(list.clone()).into_response();
        let theirs = poem_openapi::payload::Json(list).into_response();
        assert_eq!(ours.status(), StatusCode::OK);
        assert_eq!(ours.content_type(), theirs.content_type());
        let read = |body: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&body).unwrap();
        let ours = read(ours.into_body().into_vec().await.unwrap());
        assert_eq!(ours, read(theirs.into_body().into_vec().await.unwrap()));
        assert_eq!(ours["nextCursor"], serde_json::Value::Null);
        assert_eq!(ours["licenses"][1]["batchId"], serde_json::Value::Null);
    }
}
