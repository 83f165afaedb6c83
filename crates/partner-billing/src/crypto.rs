//! The master key: HMAC for promo-code lookups, AEAD for the 72-hour recovery payloads (and
//! the other sealed values: panel messages, list cursors), the synthetic nonces of
//! deterministic seals, and the permutation behind public ids.
//!
//! Each use has its own subkey, derived from the one master key (HMAC-SHA256 with distinct
//! labels), so no two uses share key material.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use rand::rngs::OsRng;
use sha2::Sha256;

/// 32 secret bytes, kept in a file beside the database (mode 0600).
#[derive(Clone)]
pub struct MasterKey {
    /// HMAC keyed with the lookup subkey, cloned per hash (saves the key schedule each time).
    lookup: Hmac<Sha256>,
    sealing: [u8; 32],
    /// HMAC keyed with the synthetic-nonce subkey ([`MasterKey::seal_deterministic`]).
    nonces: Hmac<Sha256>,
    /// HMAC keyed with the public-id subkey: the round function of [`MasterKey::public_id`].
    ids: Hmac<Sha256>,
    /// HMAC-SHA256(key, "partner-billing master key check"), hex: recorded in the database
    /// the key belongs to (docs/security.md). Reveals nothing of the key.
    fingerprint: String,
}

/// Why the master key could not be used; stops the server at start.
#[derive(Debug, thiserror::Error)]
pub enum MasterKeyError {
    #[error("master key file {path} does not exist")]
    Missing { path: String },
    #[error("master key file {path} cannot be read or written: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "master key file {path} is malformed: it must hold 32 bytes (raw, or as 64 hex digits)"
    )]
    Malformed { path: String },
    #[error(
        "master key file {path} is readable by group or others (mode {mode:o}): run `chmod 600 {path}`"
    )]
    Exposed { path: String, mode: u32 },
    #[error(
        "master key file {path} holds another key than the one this database was set up with: \
         use that key's file"
    )]
    Mismatch { path: String },
    #[error(
        "master key file {path} does not exist, and this database already has a master key: \
         pass its file with --master-key-file"
    )]
    MissingForDatabase { path: String },
    #[error("master key file {path} could not be checked against the database: {reason}")]
    Database { path: String, reason: String },
}

/// Bits permuted in a public id ([`MasterKey::public_id`]); the bit above marks it public, and
/// the whole stays below 2^53, so that a JSON number holds it exactly in every language.
pub const PUBLIC_ID_BITS: u32 = 52;

/// A recovery payload could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
#[error("recovery payload could not be sealed or opened")]
pub struct SealError;

fn derive(master: &[u8; 32], label: &[u8]) -> [u8; 32] {
    let mut mac = hmac_keyed(master);
    mac.update(label);
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA256 keyed with `key`, ready to clone per use (saves the key schedule each time).
fn hmac_keyed(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length")
}

impl MasterKey {
    fn from_master(master: [u8; 32]) -> Self {
        let subkey = |label: &[u8]| hmac_keyed(&derive(&master, label));
        Self {
            lookup: subkey(b"partner-billing promo-code lookup v1"),
            sealing: derive(&master, b"partner-billing recovery payload v1"),
            nonces: subkey(b"partner-billing synthetic nonce v1"),
            ids: subkey(b"partner-billing public ids v1"),
            fingerprint: hex::encode(derive(&master, b"partner-billing master key check")),
        }
    }

    /// A fresh random key (tests, and first start).
    pub fn generate() -> Self {
        Self::from_master(random_master())
    }

    /// Parses a key file's contents: 32 raw bytes, or 64 hex digits.
    pub fn from_file_contents(bytes: &[u8]) -> Option<Self> {
        if let Ok(master) = <[u8; 32]>::try_from(bytes) {
            return Some(Self::from_master(master));
        }
        let text = std::str::from_utf8(bytes).ok()?.trim();
        let decoded = hex::decode(text).ok()?;
        <[u8; 32]>::try_from(decoded.as_slice())
            .ok()
            .map(Self::from_master)
    }

    /// The key's fingerprint, HMAC-SHA256(key, "partner-billing master key check") in hex.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Reads the key file, refusing one readable by group or others; `Ok(None)` when missing.
    pub fn read_private(path: &Path) -> Result<Option<Self>, MasterKeyError> {
        let shown = path.display().to_string();
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(MasterKeyError::Io {
                    path: shown,
                    source,
                });
            }
        };
        let key = Self::from_file_contents(&bytes).ok_or(MasterKeyError::Malformed {
            path: shown.clone(),
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map_err(|source| MasterKeyError::Io {
                    path: shown.clone(),
                    source,
                })?
                .permissions()
                .mode()
                & 0o777;
            if mode & 0o077 != 0 {
                return Err(MasterKeyError::Exposed { path: shown, mode });
            }
        }
        Ok(Some(key))
    }

    /// Writes a new random key to `path` (mode 0600); fails if the file exists.
    pub fn create_file(path: &Path) -> Result<Self, MasterKeyError> {
        let master = random_master();
        write_private(path, &master).map_err(|source| MasterKeyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        tracing::info!(path = %path.display(), "created a new master key");
        Ok(Self::from_master(master))
    }

    /// Reads the key file; when it is missing and `create_if_missing`, writes a new random key
    /// with mode 0600 first.
    pub fn load_or_create(path: &Path, create_if_missing: bool) -> Result<Self, MasterKeyError> {
        let shown = path.display().to_string();
        match std::fs::read(path) {
            Ok(bytes) => {
                Self::from_file_contents(&bytes).ok_or(MasterKeyError::Malformed { path: shown })
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                if !create_if_missing {
                    return Err(MasterKeyError::Missing { path: shown });
                }
                let master = random_master();
                write_private(path, &master).map_err(|source| MasterKeyError::Io {
                    path: shown,
                    source,
                })?;
                tracing::info!(path = %path.display(), "created a new master key");
                Ok(Self::from_master(master))
            }
            Err(source) => Err(MasterKeyError::Io {
                path: shown,
                source,
            }),
        }
    }

    /// The lookup hash of a normalised promo code: hex HMAC-SHA256.
    pub fn code_hash(&self, normalised_code: &str) -> String {
        let mut mac = self.lookup.clone();
        mac.update(normalised_code.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Encrypts with XChaCha20-Poly1305 under a random nonce; `context` is bound as associated
    /// data. Output: nonce ‖ ciphertext.
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; 24];
        OsRng.try_fill_bytes(&mut nonce).map_err(|_| SealError)?;
        self.seal_under(&nonce, plaintext, context)
    }

    /// nonce ‖ the XChaCha20-Poly1305 encryption of `plaintext` under `nonce`, with `context`
    /// as associated data.
    fn seal_under(
        &self,
        nonce: &[u8],
        plaintext: &[u8],
        context: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let cipher = XChaCha20Poly1305::new_from_slice(&self.sealing).map_err(|_| SealError)?;
        let ciphertext = cipher
            .encrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: plaintext,
                    aad: context,
                },
            )
            .map_err(|_| SealError)?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// As [`seal`](Self::seal), but the same `plaintext` and `context` always give the same
    /// output: the nonce is a MAC of both under a subkey of its own (a synthetic nonce, as SIV
    /// modes make it), so equal inputs show as equal and nothing else is revealed. For values
    /// handed out to be sent back unchanged, such as list cursors; [`open`](Self::open) reads it.
    pub fn seal_deterministic(
        &self,
        plaintext: &[u8],
        context: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let mut mac = self.nonces.clone();
        // The context length-prefixed, so no two (context, plaintext) pairs read as one text.
        mac.update(&(context.len() as u64).to_be_bytes());
        mac.update(context);
        mac.update(plaintext);
        let digest = mac.finalize().into_bytes();
        self.seal_under(&digest[..24], plaintext, context)
    }

    /// The public form of an internal row id, for ids numbered across every account (a
    /// ledger entry's): `2^52` plus a keyed permutation of the id in `0..2^52` (an
    /// eight-round Feistel network whose round function is HMAC under a subkey of its own).
    /// So each id has its own public number, a JSON integer below `2^53` that every client
    /// reads exactly and that never equals a row id (`< 2^52`) shown before public ids; and
    /// the numbers tell nothing of how many rows other accounts made. `domain` keeps the
    /// permutations of two kinds of id apart. `None` for an id outside `0..2^52` (no table
    /// grows that far).
    pub fn public_id(&self, domain: &str, id: i64) -> Option<i64> {
        const HALF_BITS: u32 = PUBLIC_ID_BITS / 2;
        const MASK: u64 = (1 << HALF_BITS) - 1;
        let id = u64::try_from(id)
            .ok()
            .filter(|id| id >> PUBLIC_ID_BITS == 0)?;
        let (mut left, mut right) = (id >> HALF_BITS, id & MASK);
        for round in 0u8..8 {
            let mut mac = self.ids.clone();
            mac.update(&(domain.len() as u64).to_be_bytes());
            mac.update(domain.as_bytes());
            mac.update(&[round]);
            mac.update(&right.to_be_bytes());
            let digest = mac.finalize().into_bytes();
            let f = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) & MASK;
            (left, right) = (right, left ^ f);
        }
        i64::try_from((1 << PUBLIC_ID_BITS) | (left << HALF_BITS) | right).ok()
    }

    /// Decrypts what [`seal`](Self::seal) produced for the same `context`.
    pub fn open(&self, sealed: &[u8], context: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < 24 {
            return Err(SealError);
        }
        let (nonce, ciphertext) = sealed.split_at(24);
        let cipher = XChaCha20Poly1305::new_from_slice(&self.sealing).map_err(|_| SealError)?;
        cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: context,
                },
            )
            .map_err(|_| SealError)
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

/// The master key file used when none is named: `partner-billing.key` in the directory of the
/// database file (the database layer's `db::sqlite_file_path` of the URL), else (PostgreSQL,
/// or a database file without a directory) in the working directory. The server and the admin
/// CLI share this rule.
pub fn default_master_key_path(database_file: Option<&Path>) -> PathBuf {
    const NAME: &str = "partner-billing.key";
    match database_file.and_then(Path::parent) {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(NAME),
        _ => PathBuf::from(NAME),
    }
}

fn random_master() -> [u8; 32] {
    let mut master = [0u8; 32];
    OsRng.fill_bytes(&mut master);
    master
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_round_trips_and_binds_context() {
        let key = MasterKey::generate();
        let sealed = key.seal(b"codes", b"batch-1").unwrap();
        assert_eq!(key.open(&sealed, b"batch-1").unwrap(), b"codes");
        assert!(key.open(&sealed, b"batch-2").is_err());
        assert!(MasterKey::generate().open(&sealed, b"batch-1").is_err());
        assert_eq!(format!("{key:?}"), "MasterKey([redacted])");
    }

    #[test]
    fn a_deterministic_seal_repeats_for_equal_inputs_only_and_hides_them() {
        let key = MasterKey::generate();
        let sealed = key.seal_deterministic(b"lic.30", b"cursor|1").unwrap();
        assert_eq!(
            key.seal_deterministic(b"lic.30", b"cursor|1").unwrap(),
            sealed
        );
        assert_ne!(
            key.seal_deterministic(b"lic.31", b"cursor|1").unwrap(),
            sealed
        );
        assert_ne!(
            key.seal_deterministic(b"lic.30", b"cursor|2").unwrap(),
            sealed
        );
        assert!(!sealed.windows(6).any(|w| w == b"lic.30"));
        assert_eq!(key.open(&sealed, b"cursor|1").unwrap(), b"lic.30");
        assert!(key.open(&sealed, b"cursor|2").is_err());
        let mut altered = sealed.clone();
        altered[30] ^= 1;
        assert!(key.open(&altered, b"cursor|1").is_err());
        assert!(MasterKey::generate().open(&sealed, b"cursor|1").is_err());
    }

    #[test]
    fn public_ids_are_distinct_below_2_to_the_53_and_keyed() {
        let key = MasterKey::generate();
        let public = |id| key.public_id("ledger", id).unwrap();
        let ids: std::collections::HashSet<i64> = (1..=20_000).map(public).collect();
        assert_eq!(ids.len(), 20_000, "a permutation: no two ids share one");
        // Below 2^53, and never a row id (which stay below 2^52).
        let range = 1 << PUBLIC_ID_BITS..1 << (PUBLIC_ID_BITS + 1);
        assert!(ids.iter().all(|id| range.contains(id)));
        assert!(range.contains(&public(0)));
        assert!(range.contains(&public((1 << PUBLIC_ID_BITS) - 1)));
        // Consecutive ids are not consecutive, nor ordered, in public.
        let (a, b) = (public(41), public(42));
        assert!(b - a != 1);
        assert_eq!(public(42), b, "stable");
        assert_ne!(
            MasterKey::generate().public_id("ledger", 42),
            Some(b),
            "keyed"
        );
        assert_ne!(key.public_id("other", 42), Some(b), "per domain");
        // Outside the domain: no public id, never one shared with another id.
        assert_eq!(key.public_id("ledger", 1 << PUBLIC_ID_BITS), None);
        assert_eq!(key.public_id("ledger", -1), None);
    }

    #[test]
    fn the_default_key_sits_beside_the_sqlite_file() {
        let default_master_key_path =
            |url: &str| super::default_master_key_path(crate::db::sqlite_file_path(url));
        assert_eq!(
            default_master_key_path("sqlite:///var/lib/pb/billing.db?mode=rwc"),
            PathBuf::from("/var/lib/pb/partner-billing.key")
        );
        assert_eq!(
            default_master_key_path("sqlite://data/billing.db"),
            PathBuf::from("data/partner-billing.key")
        );
        assert_eq!(
            default_master_key_path("sqlite://partner-billing.db"),
            PathBuf::from("partner-billing.key")
        );
        assert_eq!(
            default_master_key_path("postgres://db.internal/billing"),
            PathBuf::from("partner-billing.key")
        );
    }

    #[test]
    fn key_files_are_created_private_and_read_back() {
        let dir = partner_billing_testkit::TempDir::new();
        let path = dir.path.join("partner-billing.key");
        assert!(matches!(
            MasterKey::load_or_create(&path, false),
            Err(MasterKeyError::Missing { .. })
        ));
        let created = MasterKey::load_or_create(&path, true).unwrap();
        let again = MasterKey::load_or_create(&path, false).unwrap();
        assert_eq!(created.code_hash("ABC"), again.code_hash("ABC"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        std::fs::write(&path, b"too short").unwrap();
        assert!(matches!(
            MasterKey::load_or_create(&path, true),
            Err(MasterKeyError::Malformed { .. })
        ));
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        assert!(MasterKey::load_or_create(&path, false).is_ok());
    }
}
