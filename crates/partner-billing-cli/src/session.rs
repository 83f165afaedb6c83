//! The panel session token on disk: one line in a file only its owner can read (0600, in a
//! 0700 directory), replaced atomically.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::args::usage;

/// Overrides the file: the token itself, e.g. from a secret store.
const TOKEN_ENV: &str = "PARTNER_BILLING_SESSION_TOKEN";

#[derive(Debug)]
pub struct SessionFile {
    path: PathBuf,
}

impl SessionFile {
    /// The given path, else `$HOME/.partner-billing/session`.
    pub fn resolve(given: Option<PathBuf>) -> Result<Self> {
        let path = match given.filter(|p| !p.as_os_str().is_empty()) {
            Some(path) => path,
            None => {
                let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or_else(|| {
                    usage("no home directory: set PARTNER_BILLING_SESSION_FILE or pass --session-file")
                })?;
                PathBuf::from(home).join(".partner-billing").join("session")
            }
        };
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token: `PARTNER_BILLING_SESSION_TOKEN` when set, else the file's first line.
    pub fn token(&self) -> Result<String> {
        if let Some(token) = std::env::var(TOKEN_ENV)
            .ok()
            .filter(|t| !t.trim().is_empty())
        {
            return Ok(token.trim().to_owned());
        }
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                // A missing credential, as a missing secret in the environment: exit 2.
                return Err(usage(format!(
                    "not logged in: run `partner-billing keys login` (no session in {})",
                    self.path.display()
                )));
            }
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read {}", self.path.display()));
            }
        };
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            return Err(usage(format!(
                "not logged in: run `partner-billing keys login` ({} is empty)",
                self.path.display()
            )));
        }
        Ok(token.to_owned())
    }

    /// Deletes the session file; `false` when there was none.
    pub fn remove(&self) -> Result<bool> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err).with_context(|| format!("cannot delete {}", self.path.display())),
        }
    }

    /// Writes the token to a fresh 0600 file beside the target, then renames it over.
    pub fn store(&self, token: &str) -> Result<()> {
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        create_private_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let name = self
            .path
            .file_name()
            .context("the session file path names no file")?;
        let mut tmp_name = name.to_owned();
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let written = write_private(&tmp, token)
            .and_then(|()| fs::rename(&tmp, &self.path))
            .with_context(|| format!("cannot write {}", self.path.display()));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

fn write_private(path: &Path, token: &str) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_privately_and_reads_back() {
        let dir = partner_billing_testkit::TempDir::new();
        let file = SessionFile::resolve(Some(dir.path.join("sub").join("session"))).unwrap();
        file.store("rps_first").unwrap();
        file.store("rps_second").unwrap();
        let text = fs::read_to_string(file.path()).unwrap();
        assert_eq!(text, "rps_second\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}

/// What every panel-session command (`keys`, `account`, `webhooks`, `alerts`) takes: where
/// `keys login` keeps the session token, and the service.
#[derive(Debug, clap::Args)]
pub struct PanelRemote {
    /// Where `keys login` keeps the panel session token [default: $HOME/.partner-billing/session]
    #[arg(
        long,
        global = true,
        env = "PARTNER_BILLING_SESSION_FILE",
        value_name = "PATH"
    )]
    pub session_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub remote: crate::args::Remote,
}
