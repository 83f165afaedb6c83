//! A fresh database seeded for the tests that run the server as child processes (crashes,
//! webhook delivery across restarts): plan `pro`, login `alice`, one reseller with a panel
//! password and credited quota, and a master key in a file the processes are given.

use partner_billing::clock::Clock;
use partner_billing::domain::{Login, Password, PlanSlug};
use partner_billing::plans::{self, NewPlan};
use partner_billing::store::Store;
use partner_billing::{accounts, quota};
use serde_json::Value;

use crate::{DatabaseHome, Db, TempDir, fresh_database, panel_session, write_private};

/// The seeded database, and where its server processes run.
pub struct SeededDatabase {
    /// The database URL.
    pub url: String,
    _home: DatabaseHome,
    /// The working directory of the server processes; holds the master key file.
    pub dir: TempDir,
    /// The master key file (32 random bytes, hex, mode 0600).
    pub key_file: String,
    /// The reseller's client id.
    pub client_id: String,
    /// The reseller's panel password.
    pub password: String,
}

/// A reseller's API key, as the partner endpoints take it.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub client_id: String,
    pub secret: String,
}

impl SeededDatabase {
    /// Plan `pro`, login `alice`, and reseller `name` with `password`, credited `credit` units
    /// of `pro`.
    pub async fn new(db: &Db, name: &str, password: &str, credit: i64) -> Self {
        let (url, home) = fresh_database(db).await;
        let dir = TempDir::new();
        let key_file = dir.path.join("master.key");
        write_private(
            &key_file,
            hex::encode(rand::random::<[u8; 32]>()).as_bytes(),
        );
        let store = Store::connect(&url, Clock::system()).await.unwrap();
        let pro = PlanSlug::parse("slug", "pro").unwrap();
        // 30 days: the scenarios renew one login many times (a perpetual plan is held once).
        let plan = NewPlan::new(pro.clone(), "Pro", Some(30), None, None).unwrap();
        plans::create_plan(&store, plan, &partner_billing::audit::Origin::cli())
            .await
            .unwrap();
        plans::add_user(
            &store,
            &Login::parse("login", "alice").unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        let client_id = accounts::create_reseller(
            &store,
            name,
            Password::parse("p", password).unwrap(),
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        quota::credit(
            &store,
            &partner_billing::quota::Correction {
                client_id: &client_id,
                plan: &pro,
                units: credit,
                reason: "seeded for the test",
                reference: None,
            },
            &partner_billing::audit::Origin::cli(),
        )
        .await
        .unwrap();
        store.close().await;
        Self {
            url,
            _home: home,
            dir,
            key_file: key_file.display().to_string(),
            client_id: client_id.to_string(),
            password: password.to_owned(),
        }
    }

    /// The setting that gives a server process this database's master key file.
    pub fn key_file_env(&self) -> (&'static str, &str) {
        ("PARTNER_BILLING_MASTER_KEY_FILE", &self.key_file)
    }

    /// A panel session of the reseller on the server at `base_url`.
    pub async fn panel_session(&self, base_url: &str) -> String {
        panel_session(
            &reqwest::Client::new(),
            base_url,
            &self.client_id,
            &self.password,
        )
        .await
    }

    /// A new API key of the reseller, created through the panel of the server at `base_url`.
    pub async fn api_key(&self, base_url: &str) -> ApiKey {
        let session = self.panel_session(base_url).await;
        let response = reqwest::Client::new()
            .post(format!("{base_url}/v1/billing/resellers/me/api-keys"))
            .bearer_auth(&session)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "API key created");
        let key: Value = response.json().await.unwrap();
        ApiKey {
            client_id: self.client_id.clone(),
            secret: key["secret"].as_str().unwrap().to_owned(),
        }
    }
}
