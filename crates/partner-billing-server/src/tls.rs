//! `--tls-cert` / `--tls-key`: the PEM files are read and checked before serving, so a missing
//! flag, an unreadable file or one that holds no certificate or key stops the start with one
//! line naming it (docs/operations.md).

use std::path::Path;

use anyhow::{anyhow, bail};
use poem::http::uri::Scheme;
use poem::listener::{Acceptor, RustlsCertificate, RustlsConfig};
use poem::web::{LocalAddr, RemoteAddr};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS configuration of the flags: `None` for plain HTTP (neither flag).
pub fn load(cert: Option<&Path>, key: Option<&Path>) -> anyhow::Result<Option<RustlsConfig>> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => bail!("--tls-cert needs --tls-key (the certificate's private key)"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert (the certificate chain)"),
        (Some(cert), Some(key)) => (cert, key),
    };
    let cert_pem = std::fs::read(cert)
        .map_err(|e| anyhow!("cannot read TLS certificate file {}: {e}", cert.display()))?;
    let key_pem = std::fs::read(key)
        .map_err(|e| anyhow!("cannot read TLS key file {}: {e}", key.display()))?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .ok()
        .filter(|certs| !certs.is_empty());
    if certs.is_none() {
        bail!(
            "TLS certificate file {} holds no PEM certificate",
            cert.display()
        );
    }
    // The key's bytes are never quoted in the error: only the file is named.
    if PrivateKeyDer::from_pem_slice(&key_pem).is_err() {
        bail!("TLS key file {} holds no PEM private key", key.display());
    }
    Ok(Some(RustlsConfig::new().fallback(
        RustlsCertificate::new().cert(cert_pem).key(key_pem),
    )))
}

/// Lets poem's TLS acceptor load its configuration before it takes the first connection.
///
/// `RustlsAcceptor` waits on its configuration and on the next connection at once and picks
/// either; a connection that comes first (one already waiting when the server starts) is
/// dropped with "no valid tls config". This acceptor answers its first `accept` with one
/// `Pending` turn, so the configuration, which is ready at once, always wins that race.
pub struct ConfigFirst<A> {
    inner: A,
    started: bool,
}

impl<A> ConfigFirst<A> {
    pub fn new(inner: A) -> Self {
        Self {
            inner,
            started: false,
        }
    }
}

impl<A: Acceptor> Acceptor for ConfigFirst<A> {
    type Io = A::Io;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> std::io::Result<(Self::Io, LocalAddr, RemoteAddr, Scheme)> {
        if !self.started {
            self.started = true;
            tokio::task::yield_now().await;
        }
        self.inner.accept().await
    }
}
