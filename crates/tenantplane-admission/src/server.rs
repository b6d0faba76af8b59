//! The HTTPS server: `POST /validate`, `POST /from-host`, `POST /namespaces` (with a client) and
//! `GET /healthz` and `GET /readyz`, over rustls (ring).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::Error;
use crate::ingress_claims::{DEFAULT_CLAIMS_NAMESPACE, IngressClaims};
use crate::namespaces;
use crate::review;
use crate::tenant_resources;
use tenantplane_core::tenant_admission::Admins;

pub const VALIDATE_PATH: &str = "/validate";
pub const HEALTHZ_PATH: &str = "/healthz";
/// Ready to serve admission: answered only over TLS, and nothing listens before the
/// certificate is loaded, so an answer means the certificate is in place.
pub const READYZ_PATH: &str = "/readyz";
pub const NAMESPACES_PATH: &str = "/namespaces";
pub const TENANT_RESOURCES_PATH: &str = "/tenant-resources";
/// Writes to fromHost copies in provisioned tenant control planes.
pub const FROM_HOST_PATH: &str = "/from-host";

/// An AdmissionReview carries the object and the old object, each up to etcd's
/// 1.5 MiB; axum's 2 MiB default would refuse large updates.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// A client that opens a connection and never finishes the handshake gets this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// After shutdown, requests in flight get this long to finish (the API server's
/// own timeout for this webhook is 5 s).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (such as too many open files) instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The routes, without TLS.
pub fn router() -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(validate))
        .route(
            FROM_HOST_PATH,
            post(|body: Bytes| async move {
                let review = crate::from_host::review(&body);
                log_review("fromHost copy admission review", &review);
                Json(review)
            }),
        )
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route(READYZ_PATH, get(|| async { "ok\n" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

/// [`router_with_tenancy`] with the default [`Admins`] (system users,
/// `system:masters` and tenantplane's controller service account).
pub fn router_with_client(client: Client) -> Router {
    router_with_tenancy(client, Admins::default())
}

/// [`router`] plus the namespace-tenant admission, which reads and writes Tenants
/// through `client`: `POST /namespaces` (namespace creations and updates) and
/// `POST /tenant-resources` (writes inside tenant namespaces).
pub fn router_with_tenancy(client: Client, admins: Admins) -> Router {
    router_with_rules(client, admins, DEFAULT_CLAIMS_NAMESPACE.to_owned())
}

/// [`router_with_tenancy`] with Ingress host claims (Leases) in `claims_namespace`
/// (see [`crate::ingress_claims`]). Must be called on a Tokio runtime: it starts
/// the watch that feeds the Ingress host index.
pub fn router_with_rules(client: Client, admins: Admins, claims_namespace: String) -> Router {
    let claims = IngressClaims::start(client.clone(), claims_namespace);
    let state = Arc::new((client, admins, claims));
    let for_resources = state.clone();
    router()
        .route(
            NAMESPACES_PATH,
            post(move |body: Bytes| {
                let state = state.clone();
                async move {
                    let review = namespaces::review(&state.0, &state.1, &body).await;
                    log_review("namespace admission review", &review);
                    Json(review)
                }
            }),
        )
        .route(
            TENANT_RESOURCES_PATH,
            post(move |body: Bytes| {
                let state = for_resources.clone();
                async move {
                    let review =
                        tenant_resources::review(&state.0, &state.1, &state.2, &body).await;
                    log_review("tenant resource admission review", &review);
                    Json(review)
                }
            }),
        )
}

fn log_review(what: &'static str, review: &AdmissionReview<DynamicObject>) {
    if let Some(response) = &review.response {
        tracing::info!(
            uid = %response.uid,
            allowed = response.allowed,
            patched = response.patch.is_some(),
            message = %response.result.message,
            "{what}"
        );
    }
}

async fn validate(body: Bytes) -> Json<AdmissionReview<DynamicObject>> {
    let review = review::review(&body);
    if let Some(response) = &review.response {
        tracing::info!(
            uid = %response.uid,
            allowed = response.allowed,
            message = %response.result.message,
            "admission review"
        );
    }
    Json(review)
}

/// Serves [`router`] over TLS on `listener` until `shutdown` completes; see
/// [`serve_router`].
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    serve_router(listener, tls, router(), shutdown).await
}

/// Serves `app` (such as [`router_with_client`]) over TLS on `listener` until `shutdown` completes. Then it stops
/// accepting, closes the listener, lets requests in flight finish (idle keep-alive
/// connections close at once) and returns: afterwards nothing answers on the port.
pub async fn serve_router(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
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
                        app.clone(),
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
    Ok(())
}

async fn connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
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
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
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
