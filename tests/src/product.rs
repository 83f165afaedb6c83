//! Helpers for promo codes and the product API: plans with a promo policy, operator tokens,
//! batches bought through the partner API, and raw redemptions.

use partner_billing::domain::PlanSlug;
use partner_billing::operators;
use partner_billing::plans::{self, NewPlan};

use crate::{Reseller, TestApp};

/// `POST` path of a redemption.
pub const REDEMPTIONS: &str = "/v1/billing/product/promo-redemptions";

impl TestApp {
    /// Creates a plan with its promo policy (`None`: the defaults, 1 redemption per code and
    /// 365 days of validity).
    pub async fn plan_with_policy(
        &self,
        slug: &str,
        days: Option<i64>,
        redemptions_per_code: Option<i64>,
        code_validity_days: Option<i64>,
    ) {
        let slug = PlanSlug::parse("slug", slug).expect("slug");
        let plan = NewPlan::new(
            slug,
            "Test plan",
            days,
            redemptions_per_code,
            code_validity_days,
        )
        .expect("plan");
        plans::create_plan(&self.store, plan, &partner_billing::audit::Origin::cli())
            .await
            .expect("create plan");
    }

    /// Creates an operator token for the product API; returns its plaintext (`rso_…`).
    pub async fn operator_token(&self, name: &str) -> String {
        operators::create_operator_token(&self.store, name, &partner_billing::audit::Origin::cli())
            .await
            .expect("create operator token")
            .token
            .expose()
            .to_owned()
    }

    /// A request builder carrying an operator token, for the product API.
    pub fn product(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
    ) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(token)
    }

    /// Generates a promo batch through the partner API; returns its batch id and codes.
    pub async fn promo_batch(
        &self,
        reseller: &Reseller,
        plan: &str,
        count: i64,
    ) -> (String, Vec<String>) {
        let key = format!("batch-{}", uuid::Uuid::new_v4().simple());
        let response = self
            .partner(
                reqwest::Method::POST,
                "/v1/billing/partner/promo-batches",
                reseller,
            )
            .json(&serde_json::json!({"planSlug": plan, "count": count, "idempotencyKey": key}))
            .send()
            .await
            .expect("generate promo batch");
        assert_eq!(response.status(), 200, "promo batch");
        let batch: serde_json::Value = response.json().await.expect("batch body");
        let codes = batch["codes"]
            .as_array()
            .expect("codes")
            .iter()
            .map(|c| c["code"].as_str().expect("code").to_owned())
            .collect();
        (
            batch["batchId"].as_str().expect("batchId").to_owned(),
            codes,
        )
    }

    /// Redeems a code over raw HTTP with an operator token; the response is left to the test.
    pub async fn redeem(
        &self,
        token: &str,
        code: &str,
        login: &str,
        idempotency_key: &str,
    ) -> reqwest::Response {
        self.product(reqwest::Method::POST, REDEMPTIONS, token)
            .json(&serde_json::json!({
                "code": code,
                "login": login,
                "idempotencyKey": idempotency_key,
            }))
            .send()
            .await
            .expect("redeem")
    }

    /// The one integer a query returns (`SELECT COUNT(*) …`), straight from the database.
    pub async fn count_rows(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(self.store.pool())
            .await
            .expect("count query")
    }
}
