//! The panel password: Argon2id hashing and verification, off the async executor and in
//! reused memory, bounded in how many run at once.

use std::cell::RefCell;
use std::sync::OnceLock;

use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use rand::rngs::OsRng;
use subtle::ConstantTimeEq;

use crate::domain::Password;
use crate::error::{Error, Result};
use crate::throttle;

thread_local! {
    /// Argon2's working memory (19 MiB with the defaults), allocated once per hashing thread
    /// and reused: a fresh 19 MiB per run is cached by the allocator in whichever arena served
    /// it, and under concurrent sign-ins that grew the process by hundreds of MiB (measured).
    static ARGON2_MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Runs Argon2 `argon2` on `password` and `salt` into `out`, in this thread's reused memory.
fn argon2_into(
    argon2: &Argon2<'_>,
    params: &Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> bool {
    ARGON2_MEMORY.with(|memory| {
        let mut memory = memory.borrow_mut();
        let blocks = params.block_count();
        if memory.len() < blocks {
            memory.resize(blocks, Block::default());
        }
        argon2
            .hash_password_into_with_memory(password, salt, out, &mut memory[..blocks])
            .is_ok()
    })
}

/// Argon2id with the crate's defaults, off the async executor (bounded: [`throttle::hashing`]).
pub(super) async fn hash_password(password: Password) -> Result<String> {
    throttle::hashing(move || {
        let failed = || Error::Internal("password hashing failed".to_owned());
        let salt = SaltString::generate(&mut OsRng);
        let params = Params::default();
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
        let mut salt_bytes = [0u8; 64];
        let salt_bytes = salt.decode_b64(&mut salt_bytes).map_err(|_| failed())?;
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        if !argon2_into(
            &argon2,
            &params,
            password.expose().as_bytes(),
            salt_bytes,
            &mut out,
        ) {
            return Err(failed());
        }
        let hash = PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::V0x13.into()),
            params: ParamsString::try_from(&params).map_err(|_| failed())?,
            salt: Some(salt.as_salt()),
            hash: Some(Output::new(&out).map_err(|_| failed())?),
        };
        Ok(hash.to_string())
    })
    .await?
}

/// Whether `password` matches the PHC string `encoded` (any Argon2 variant and parameters).
fn matches(password: &[u8], encoded: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(encoded) else {
        return false;
    };
    let (Ok(params), Ok(algorithm), Some(salt), Some(expected)) = (
        Params::try_from(&parsed),
        Algorithm::try_from(parsed.algorithm),
        parsed.salt,
        parsed.hash,
    ) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from) {
        None => Version::default(),
        Some(Ok(version)) => version,
        Some(Err(_)) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let mut out = vec![0u8; expected.len()];
    argon2_into(&argon2, &params, password, salt, &mut out)
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Verifies off the executor. An unknown account is checked against a fixed dummy hash, so
/// that it costs the same time as a wrong password.
pub(super) async fn verify_password(password: Password, stored: Option<String>) -> Result<bool> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = match DUMMY.get() {
        Some(dummy) => dummy.clone(),
        None => {
            let hashed =
                hash_password(Password::presented("dummy password for timing".to_owned())).await?;
            DUMMY.get_or_init(|| hashed).clone()
        }
    };
    throttle::hashing(move || {
        let known = stored.is_some();
        let encoded = stored.unwrap_or(dummy);
        matches(password.expose().as_bytes(), &encoded) && known
    })
    .await
}
