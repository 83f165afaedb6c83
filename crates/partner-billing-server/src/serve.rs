//! Running the app: the API listener (with its connection limits), the metrics listener, the
//! background purge, and the graceful stop.

use std::future::Future;
use std::time::Duration;

use poem::Server;
use poem::listener::{AcceptorExt, IntoTlsConfigStream, RustlsConfig, TcpAcceptor};

use partner_billing::store::Store;

use crate::connections::GuardedAcceptor;
use crate::metrics::{self, Metrics};
use crate::{AppOptions, AppState, app_with, purge_periodically};

/// How a server runs beyond its listener and store.
pub struct ServeOptions {
    /// Serves `GET /metrics` here when set (`--metrics-listen`); never on the API's listener.
    pub metrics_listener: Option<tokio::net::TcpListener>,
    /// The app's metrics; a fresh registry unless the caller wants to read it.
    pub metrics: Metrics,
    /// How long requests in flight may run on after the stop signal.
    pub drain_timeout: Duration,
    /// Most connections open at once (`--max-connections`); more wait in the backlog.
    pub max_connections: usize,
    /// Time limits on slow clients.
    pub limits: crate::connections::Limits,
    /// Serve HTTPS with this certificate and key (`--tls-cert`, `--tls-key`) on the same
    /// listener, within the same connection limits.
    pub tls: Option<RustlsConfig>,
    /// Browsers reach the app over HTTPS through a proxy (`--public-url https://…`).
    pub public_https: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            metrics_listener: None,
            metrics: Metrics::new(),
            drain_timeout: Duration::from_secs(30),
            max_connections: 4096,
            limits: crate::connections::Limits::default(),
            tls: None,
            public_https: false,
        }
    }
}

/// Serves the app on a bound listener until `shutdown` resolves, then drains in-flight requests
/// (up to 30 s), with the default [`ServeOptions`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Store,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_with(listener, store, shutdown, ServeOptions::default()).await
}

/// As [`serve`], with options: the metrics listener, the drain time, connection limits.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    store: Store,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> std::io::Result<()> {
    let ServeOptions {
        metrics_listener,
        metrics,
        drain_timeout,
        max_connections,
        limits,
        tls,
        public_https,
    } = options;
    let app_options = AppOptions {
        https: tls.is_some() || public_https,
    };
    {
        let metrics = metrics.clone();
        store.observe_license_groups(move |size| metrics.observe_license_group_size(size));
    }
    {
        let metrics = metrics.clone();
        store.observe_audit_entries(move |action| metrics.record_audit_entry(action));
    }
    let purger = tokio::spawn(purge_periodically(store.clone()));
    let webhook_worker = tokio::spawn(crate::webhook_worker::run(store.clone(), metrics.clone()));
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics_server = match metrics_listener {
        Some(listener) => {
            let acceptor = TcpAcceptor::from_tokio(listener)?;
            let endpoint = metrics::endpoint(metrics.clone(), store.clone());
            Some(tokio::spawn(
                Server::new_with_acceptor(acceptor).run_with_graceful_shutdown(
                    endpoint,
                    async {
                        let _ = metrics_stopped.await;
                    },
                    Some(Duration::from_secs(1)),
                ),
            ))
        }
        None => None,
    };
    // With TLS the guard sits above it: the connection limit counts TLS connections, and the
    // time limits (which look for the end of the headers) read the decrypted bytes; the
    // handshake runs within the first request's header limit.
    let tcp = TcpAcceptor::from_tokio(listener)?;
    let app = app_with(AppState { store, metrics }, app_options);
    // Each acceptor is served as its own type (`connection_loop`).
    let result = match tls {
        Some(config) => {
            let tls = crate::tls::ConfigFirst::new(tcp).rustls(config.into_stream()?);
            let acceptor = GuardedAcceptor::new(tls, max_connections, limits);
            crate::connection_loop::run(acceptor, app, shutdown, drain_timeout).await
        }
        None => {
            let acceptor = GuardedAcceptor::new(tcp, max_connections, limits);
            crate::connection_loop::run(acceptor, app, shutdown, drain_timeout).await
        }
    };
    let _ = stop_metrics.send(());
    if let Some(server) = metrics_server {
        let _ = server.await;
    }
    purger.abort();
    webhook_worker.abort();
    result
}
