//! End-to-end tests: the real server, driven over HTTP, on SQLite and (with
//! `PARTNER_BILLING_TEST_POSTGRES_URL`) PostgreSQL.

mod abuse;
mod audit_trail;
mod audit_trail_rules;
mod auth;
mod browser;
mod cli;
mod concurrency;
mod contract;
mod corrections;
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
mod reads;
mod redemption;
mod redemption_limits;
mod replicas;
mod slow_clients;
mod startup;
mod tls;
mod voids;
mod webhook_reliability;
mod webhooks;
