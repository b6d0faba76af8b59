//! One accept loop for both servers: TLS handshakes with a deadline, HTTP/1.1 with
//! upgrades, and a graceful shutdown that lets requests in flight finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::{ServerConfig, ServerConnection};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// A client that opens a connection and never finishes the handshake gets this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// After shutdown, requests in flight get this long to finish (the API server's
/// own timeout for the webhook is 5 s).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (such as too many open files) instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// [`serve`] with the same routes for every connection.
pub async fn serve_router(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    serve(
        listener,
        tls,
        move |_: &ServerConnection| app.clone(),
        shutdown,
    )
    .await;
}

/// Serves over TLS on `listener` until `shutdown` completes, each connection with
/// the routes `app_for` makes from its finished handshake (the kubelet endpoint
/// adds the caller's client certificate). Then it stops accepting, closes the
/// listener, lets requests in flight finish (idle keep-alive connections close at
/// once) and returns: afterwards nothing answers on the port.
pub async fn serve<A>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app_for: A,
    shutdown: impl Future<Output = ()>,
) where
    A: Fn(&ServerConnection) -> Router + Clone + Send + 'static,
{
    let acceptor = TlsAcceptor::from(tls);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    connections.spawn(connection(
                        acceptor.clone(),
                        tcp,
                        peer,
                        app_for.clone(),
                        stop_rx.clone(),
                    ));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Reap finished connections so the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    stop_tx.send_replace(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "requests still in flight after the grace period were cut off"
        );
        connections.shutdown().await;
    }
}

async fn connection<A>(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    app_for: A,
    mut stop: watch::Receiver<bool>,
) where
    A: Fn(&ServerConnection) -> Router,
{
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            tracing::debug!(%peer, error = %err, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let app = app_for(tls.get_ref().1);
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        // The block drops the watch guard (not Send) before the branch awaits.
        _ = async { stop.wait_for(|stopping| *stopping).await.is_ok() } => {
            // Finish the request in flight, if any, then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(err) = result {
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "serve_tests.rs"]
mod tests;
