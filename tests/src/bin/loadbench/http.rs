//! The HTTP side: one reqwest client (one keep-alive connection) per worker, the partner API
//! with the dedicated key headers.

use std::sync::Arc;
use std::time::Duration;

use crate::Scenario;
use crate::seed::{Account, PLAN, Seeded};

/// Everything the workers share; cheap to clone.
#[derive(Clone)]
pub struct HttpTarget {
    inner: Arc<Inner>,
}

struct Inner {
    balances_url: String,
    licenses_url: String,
    promo_url: String,
    clients: Vec<reqwest::Client>,
    accounts: Arc<Vec<Account>>,
    logins: Arc<Vec<String>>,
    /// Makes idempotency keys unique across runs over the same database.
    run_tag: String,
}

impl HttpTarget {
    pub fn new(base_url: &str, clients: usize, seeded: &Seeded) -> anyhow::Result<Self> {
        let clients = (0..clients)
            .map(|_| {
                reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(1)
                    .tcp_nodelay(true)
                    .timeout(Duration::from_secs(60))
                    .build()
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                balances_url: format!("{base_url}/v1/billing/partner/balances"),
                licenses_url: format!("{base_url}/v1/billing/partner/licenses"),
                promo_url: format!("{base_url}/v1/billing/partner/promo-batches"),
                clients,
                accounts: Arc::clone(&seeded.accounts),
                logins: Arc::clone(&seeded.logins),
                run_tag: uuid::Uuid::new_v4().simple().to_string()[..10].to_owned(),
            }),
        })
    }

    /// One request of `scenario` by `worker`; a non-2xx answer is an error.
    pub async fn request(
        &self,
        scenario: Scenario,
        worker: usize,
        seq: u64,
    ) -> Result<Option<Duration>, String> {
        let inner = &*self.inner;
        let client = &inner.clients[worker];
        let account = &inner.accounts[scenario.account(worker, inner.accounts.len())];
        let key = format!("lb-{}-{}-{worker}-{seq}", inner.run_tag, scenario.name());
        let request = match scenario {
            Scenario::Balances => client.get(&inner.balances_url),
            Scenario::LicenseSpread | Scenario::LicenseHot => {
                let login = &inner.logins[rand::random::<usize>() % inner.logins.len()];
                client
                    .post(&inner.licenses_url)
                    .header("Content-Type", "application/json")
                    .body(format!(
                        r#"{{"planSlug":"{PLAN}","login":"{login}","idempotencyKey":"{key}"}}"#
                    ))
            }
            Scenario::Promo => client
                .post(&inner.promo_url)
                .header("Content-Type", "application/json")
                .body(format!(
                    r#"{{"planSlug":"{PLAN}","count":1000,"idempotencyKey":"{key}"}}"#
                )),
        };
        let response = request
            .header("X-Client-Id", &account.client_id)
            .header("X-Client-Secret", &account.secret)
            .send()
            .await
            .map_err(|e| format!("transport: {e}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("reading the body: {e}"))?;
        if status.is_success() {
            Ok(None)
        } else {
            let shown = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            Err(format!("HTTP {}: {shown}", status.as_u16()))
        }
    }
}
