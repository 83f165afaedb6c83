//! The core's functions, called directly, each on SQLite and on PostgreSQL (see `kit`).

#[path = "../kit/mod.rs"]
#[macro_use]
mod kit;

mod accounts;
mod fixture;
mod idempotency;
mod keys;
mod license_order;
mod licenses;
mod promo;
mod quota;
