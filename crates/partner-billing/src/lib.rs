//! Partner Billing core: resellers hold prepaid quota per product and spend it on licenses and
//! promo codes through API keys.
//!
//! Without feature `db` only [`wire`] and [`domain`] compile, with the values beside them
//! ([`limits`], [`utc`], [`csv`], [`webhook_signature`]): the shapes of the HTTP API and the
//! parsed values, which the SDK shares. With `db` (the default) come the operations, as typed
//! async functions over a [`store::Store`] on SQLite or PostgreSQL.
#![forbid(unsafe_code)]

pub mod csv;
pub mod domain;
pub mod limits;
pub mod utc;
pub mod webhook_signature;
pub mod wire;

#[cfg(feature = "db")]
pub mod accounts;
#[cfg(feature = "db")]
pub mod activity;
#[cfg(feature = "db")]
pub mod audit;
#[cfg(feature = "db")]
pub mod audit_log;
#[cfg(feature = "db")]
pub mod clock;
#[cfg(feature = "db")]
pub mod crypto;
#[cfg(feature = "db")]
pub mod db;
#[cfg(feature = "db")]
pub mod error;
#[cfg(feature = "db")]
pub mod events;
#[cfg(feature = "db")]
pub mod faults;
#[cfg(feature = "db")]
pub mod idempotency;
#[cfg(feature = "db")]
pub mod key_check;
#[cfg(feature = "db")]
pub mod keys;
#[cfg(feature = "db")]
pub mod licenses;
#[cfg(feature = "db")]
pub mod operators;
#[cfg(feature = "db")]
pub mod plans;
#[cfg(feature = "db")]
pub mod promo;
#[cfg(feature = "db")]
pub mod quota;
#[cfg(feature = "db")]
pub mod reads;
#[cfg(feature = "db")]
pub mod redemption;
#[cfg(feature = "db")]
pub mod request_scope;
#[cfg(feature = "db")]
pub mod runtime;
#[cfg(feature = "db")]
pub mod store;
#[cfg(feature = "db")]
pub mod subscriptions;
#[cfg(feature = "db")]
pub mod throttle;
#[cfg(feature = "db")]
pub mod voids;
#[cfg(feature = "db")]
pub mod webhooks;

#[cfg(feature = "db")]
pub use error::{Error, Result};
