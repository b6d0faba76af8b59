//! The HTTPS server: `POST /validate`, `POST /from-host`, `POST /namespaces` (with a client) and
//! `GET /healthz` and `GET /readyz`, over rustls (ring).

use std::future::Future;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::ServerConfig;
use tokio::net::TcpListener;

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

/// Serves `app` (such as [`router_with_client`]) over TLS on `listener` until
/// `shutdown` completes (see [`tenantplane_https::serve`]): afterwards nothing
/// answers on the port.
pub async fn serve_router(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    tenantplane_https::serve_router(listener, tls, app, shutdown).await;
    Ok(())
}
