//! End-to-end tests: the real server, driven over HTTP, on SQLite and (with
//! `PARTNER_BILLING_TEST_POSTGRES_URL`) PostgreSQL.

mod abuse;
mod auth;
mod browser;
mod cli;
mod concurrency;
mod contract;
mod crash;
mod hygiene;
mod isolation;
mod key_roll;
mod keys;
mod licenses;
mod master_key;
mod operations;
mod outage;
mod panel;
mod panel_browser;
mod panel_routes;
mod panel_sessions;
mod panel_webhooks;
mod product;
mod promo;
mod redemption;
mod redemption_limits;
mod replicas;
mod slow_clients;
mod startup;
mod subscription_races;
mod subscriptions;
mod tls;
mod webhook_reliability;
mod webhooks;
