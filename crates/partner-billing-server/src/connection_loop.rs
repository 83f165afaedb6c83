//! The API listener's accept loop: each connection served by hyper, each request by the app.
//!
//! poem's `Server` does the same, but boxes the acceptor's streams, and its box splits every
//! connection into a read half and a write half behind a lock, with no vectored writes: a cost
//! on every read and every answer (measured in docs/performance.md, "Reads"). Here each
//! acceptor keeps its own stream type. Stopping is as poem's: no new connection, every open one
//! finishes the request it is serving and closes, and whatever still runs after the drain time
//! is cut off.

use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use poem::Endpoint;
use poem::endpoint::BoxEndpoint;
use poem::http::uri::Scheme;
use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long the loop pauses after an accept fails for want of a resource (out of file
/// descriptors, say), so that a failure that repeats does not spin a core.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Whether an accept failed for one connection only (the client gave up, its TLS was bad), so
/// the loop goes on at once.
fn one_connection_failed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionRefused
            | ErrorKind::Interrupted
            | ErrorKind::InvalidData
    )
}

/// Serves `app` on `acceptor` until `shutdown` resolves, then lets the open connections finish
/// for up to `drain_timeout`.
pub async fn run<A: Acceptor>(
    mut acceptor: A,
    app: BoxEndpoint<'static>,
    shutdown: impl Future<Output = ()>,
    drain_timeout: Duration,
) -> std::io::Result<()> {
    let app = Arc::new(app);
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            // Finished connections leave the set as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = acceptor.accept() => match accepted {
                Ok((io, local, remote, scheme)) => {
                    let app = Arc::clone(&app);
                    let stopped = stopped.clone();
                    connections.spawn(serve(io, local, remote, scheme, app, stopped));
                }
                Err(e) if one_connection_failed(&e) => {
                    tracing::debug!(error = %e, "a connection failed before its first request");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting connections failed; pausing");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
    // No new connections: the listening socket closes here.
    drop(acceptor);
    let _ = stop.send(true);
    tracing::info!(
        connections = connections.len(),
        "no new connections; the open ones finish their requests"
    );
    let drained = tokio::time::timeout(drain_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "the drain time ran out: cutting off the connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Serves one connection (HTTP/1.1 or HTTP/2) until it ends or the server stops; on stop, the
/// request in progress is answered and the connection closed.
async fn serve<Io>(
    io: Io,
    local: LocalAddr,
    remote: RemoteAddr,
    scheme: Scheme,
    app: Arc<BoxEndpoint<'static>>,
    mut stopped: watch::Receiver<bool>,
) where
    Io: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let app = Arc::clone(&app);
        let req = poem::Request::from((req, local.clone(), remote.clone(), scheme.clone()));
        async move { Ok::<_, Infallible>(hyper::Response::from(app.get_response(req).await)) }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lack_of_resources_pauses_the_loop() {
        let aborted = std::io::Error::from(ErrorKind::ConnectionAborted);
        assert!(one_connection_failed(&aborted));
        let bad_tls = std::io::Error::new(ErrorKind::InvalidData, "bad handshake");
        assert!(one_connection_failed(&bad_tls));
        // EMFILE and ENFILE on Linux: out of file descriptors.
        for errno in [24, 23] {
            let exhausted = std::io::Error::from_raw_os_error(errno);
            assert!(!one_connection_failed(&exhausted), "{exhausted}");
        }
    }
}
