//! Binds the master key to its database (docs/security.md): the database records the key's
//! fingerprint on first use, and every start of the server or of an `admin` command compares.
//! A second replica started elsewhere without the key file refuses to start instead of minting
//! a key of its own.

use std::path::{Path, PathBuf};

use crate::crypto::{MasterKey, MasterKeyError};
use crate::store::Store;

/// Whether the key file was named (`--master-key-file`) or is the default one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFile {
    /// Named: it must exist.
    Configured,
    /// The default: created only while the database has no fingerprint yet.
    Default,
    /// The default, never created (the `admin` commands): `Ok(None)` when missing; checked
    /// like the others when present.
    DefaultIfPresent,
}

fn database_error(path: &Path, err: impl std::fmt::Display) -> MasterKeyError {
    MasterKeyError::Database {
        path: path.display().to_string(),
        reason: err.to_string(),
    }
}

async fn recorded(store: &Store, path: &Path) -> Result<Option<String>, MasterKeyError> {
    sqlx::query_scalar("SELECT fingerprint FROM master_key_check WHERE id = 1")
        .fetch_optional(store.pool())
        .await
        .map_err(|e| database_error(path, e))
}

/// A key file read before its database is opened, so that a missing configured file or an
/// unreadable, malformed or exposed one stops the caller before anything is created.
pub struct KeyFileRead {
    path: PathBuf,
    file: KeyFile,
    key: Option<MasterKey>,
}

/// Reads the key at `path`: refuses a file readable by group or others, a malformed one, and a
/// missing configured one. [`open_master_key`] does the rest against the database.
pub fn read_key_file(path: &Path, file: KeyFile) -> Result<KeyFileRead, MasterKeyError> {
    let key = MasterKey::read_private(path)?;
    if key.is_none() && file == KeyFile::Configured {
        return Err(MasterKeyError::Missing {
            path: path.display().to_string(),
        });
    }
    Ok(KeyFileRead {
        path: path.to_owned(),
        file,
        key,
    })
}

/// Checks the key read by [`read_key_file`] against the database's fingerprint, recording the
/// fingerprint when the database has none yet. Refuses a different key, and a missing default
/// file once the database has a key; creates the default file while it has none.
pub async fn open_master_key(
    store: &Store,
    read: KeyFileRead,
) -> Result<Option<MasterKey>, MasterKeyError> {
    let path = read.path.as_path();
    let shown = path.display().to_string();
    let key = match read.key {
        Some(key) => key,
        None => match read.file {
            // Refused by `read_key_file` already.
            KeyFile::Configured => return Err(MasterKeyError::Missing { path: shown }),
            // The admin commands that need no key run without one; those that need it say so.
            KeyFile::DefaultIfPresent => return Ok(None),
            KeyFile::Default => match recorded(store, path).await? {
                Some(_) => return Err(MasterKeyError::MissingForDatabase { path: shown }),
                None => MasterKey::create_file(path)?,
            },
        },
    };
    // First use records the fingerprint; a concurrent first start of another replica with
    // another key loses the race and is refused below.
    sqlx::query(
        "INSERT INTO master_key_check (id, fingerprint, created_utc) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(key.fingerprint())
    .bind(store.now_utc())
    .execute(store.pool())
    .await
    .map_err(|e| database_error(path, e))?;
    match recorded(store, path).await? {
        Some(fingerprint) if fingerprint == key.fingerprint() => Ok(Some(key)),
        _ => Err(MasterKeyError::Mismatch { path: shown }),
    }
}
