//! Promo codes (the promo batch endpoint): the code format ([`code`]), charging a batch of them
//! ([`batch`]) and recovering a batch's codes on a retry ([`recovery`]).
//!
//! Codes are drawn from the OS CSPRNG, hashed (HMAC under the master key) and sealed (AEAD)
//! before the transaction; the transaction then debits `count` units and stores the hashes,
//! the ledger entry, the idempotency record and the sealed recovery payload together, or none
//! of them. Plaintext codes exist only in the response and, sealed, for 72 hours.

pub mod batch;
pub mod code;
pub mod recovery;

pub use batch::{GeneratePromoBatch, MAX_CODES_PER_BATCH, generate_promo_batch};
pub use code::{display_code, normalize_code};
pub use recovery::purge_expired;
