//! The HTTPS server: kubelet API paths, each authenticated by the caller's client
//! certificate and authorized against the host Pod before anything is forwarded.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use kube::{Api, Client};
use rustls::{ServerConfig, ServerConnection};
use serde_json::json;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_engine::decisions::DecisionRoutes;
use tokio::net::TcpListener;

use crate::authz::{PodTarget, check_host_pod};
use crate::portforward;
use crate::registry::{SharedRegistry, TenantClusterKey, fingerprint_der};
use crate::stats::NodePath;
use crate::stream::{self, StreamKind, StreamOptions};

pub const HEALTHZ_PATH: &str = "/healthz";

/// What every request is served with.
#[derive(Clone)]
pub struct KubeletState {
    /// The host API server, with the controller's own identity.
    pub host: Client,
    pub registry: SharedRegistry,
    /// Where refusals are recorded as Skip decisions of the calling TenantCluster.
    pub decisions: DecisionRoutes,
}

/// An answer that ends a request early (boxed: a Response is large).
type Refusal = Box<Response>;

/// The caller's leaf certificate fingerprint, set per connection.
#[derive(Clone, Debug)]
struct Caller(Option<String>);

/// The routes, without TLS (a connection's caller is added by [`serve`]).
pub fn router(state: KubeletState) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/exec/{ns}/{pod}/{container}", any(exec))
        .route("/attach/{ns}/{pod}/{container}", any(attach))
        .route("/portForward/{ns}/{pod}", any(port_forward))
        .route("/run/{ns}/{pod}/{container}", post(run))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(resource_metrics))
        .fallback(|| async {
            status_response(
                StatusCode::NOT_FOUND,
                "NotFound",
                "no such kubelet path".to_owned(),
            )
        })
        .with_state(state)
}

/// A `metav1.Status` answer, as the kubelet gives.
pub(crate) fn status_response(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The TenantCluster calling, or the 401 answer.
fn caller(state: &KubeletState, fingerprint: Option<String>) -> Result<TenantClusterKey, Refusal> {
    let unauthorized = |message: &str| {
        Box::new(status_response(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            message.to_owned(),
        ))
    };
    let Some(fingerprint) = fingerprint else {
        return Err(unauthorized("a client certificate is required"));
    };
    state.registry.lookup(&fingerprint).ok_or_else(|| {
        tracing::info!(%fingerprint, "kubelet endpoint: unknown client certificate");
        unauthorized("the client certificate is not registered by any TenantCluster")
    })
}

/// Authenticates, then checks that the path names a synced Pod of the caller.
/// Returns the host Pod's name, or the answer (401, 403 with a Skip decision, 502).
/// The caller's fingerprint, as the connection recorded it.
fn fingerprint(request: &Request) -> Option<String> {
    request
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.0.clone())
}

async fn authorize(
    state: &KubeletState,
    fingerprint: Option<String>,
    operation: &str,
    namespace: String,
    pod: String,
    container: Option<String>,
) -> Result<(PodTarget, String), Refusal> {
    let tenant_cluster = caller(state, fingerprint)?;
    let target = PodTarget {
        tenant_cluster,
        namespace,
        pod,
        container,
    };
    let refuse =
        |host_name: &str, why: String| Box::new(refuse(state, &target, operation, host_name, why));
    let host_name = match target.host_name() {
        Ok(name) => name,
        Err(why) => return Err(refuse("", why)),
    };
    let pods: Api<Pod> = Api::namespaced(state.host.clone(), &target.tenant_cluster.namespace);
    match pods.get_opt(&host_name).await {
        Ok(Some(host_pod)) => match check_host_pod(&target, &host_name, &host_pod) {
            Ok(()) => Ok((target, host_name)),
            Err(why) => Err(refuse(&host_name, why)),
        },
        Ok(None) => Err(refuse(
            &host_name,
            "no such Pod is synced to the host".to_owned(),
        )),
        Err(err) => {
            tracing::warn!(error = %err, "kubelet endpoint: reading the host Pod failed");
            Err(Box::new(status_response(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                "the host API server did not answer".to_owned(),
            )))
        }
    }
}

/// 403 and a Skip decision for the calling TenantCluster.
fn refuse(
    state: &KubeletState,
    target: &PodTarget,
    operation: &str,
    host_name: &str,
    why: String,
) -> Response {
    let tc = &target.tenant_cluster;
    let reason = format!(
        "kubelet endpoint refused {operation} of Pod {}/{}: {why}",
        target.namespace, target.pod
    );
    tracing::info!(tenant = %tc, %reason, "kubelet request refused");
    match state.decisions.get(&tc.namespace, &tc.name) {
        Some(sender) => sender.send(
            DecisionAction::Skip,
            "v1",
            "Pod",
            TenantObjectRef {
                namespace: target.namespace.clone(),
                name: target.pod.clone(),
                uid: None,
            },
            HostTarget {
                namespace: tc.namespace.clone(),
                name: host_name.to_owned(),
            },
            reason.clone(),
        ),
        None => {
            tracing::warn!(tenant = %tc, "no engine runs for the TenantCluster; the refusal is only logged")
        }
    }
    status_response(StatusCode::FORBIDDEN, "Forbidden", reason)
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogQuery {
    follow: Option<String>,
    previous: Option<String>,
    timestamps: Option<String>,
    tail_lines: Option<String>,
    since_seconds: Option<String>,
    limit_bytes: Option<String>,
}

fn flag(value: &Option<String>) -> bool {
    matches!(value.as_deref(), Some("true" | "1" | "True" | "TRUE"))
}

fn number(name: &str, value: &Option<String>) -> Result<Option<i64>, Refusal> {
    match value.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => text.parse::<i64>().map(Some).map_err(|_| {
            Box::new(status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("{name} must be an integer"),
            ))
        }),
    }
}

async fn container_logs(
    State(state): State<KubeletState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    query: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
    request: Request,
) -> Response {
    let Ok(Query(query)) = query else {
        return status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "invalid query".into(),
        );
    };
    let (target, host_name) = match authorize(
        &state,
        fingerprint(&request),
        "containerLogs",
        namespace,
        pod,
        Some(container),
    )
    .await
    {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let params = (|| {
        Ok::<_, Refusal>(LogParams {
            container: target.container.clone(),
            follow: flag(&query.follow),
            previous: flag(&query.previous),
            timestamps: flag(&query.timestamps),
            tail_lines: number("tailLines", &query.tail_lines)?,
            since_seconds: number("sinceSeconds", &query.since_seconds)?,
            limit_bytes: number("limitBytes", &query.limit_bytes)?,
            ..LogParams::default()
        })
    })();
    let params = match params {
        Ok(p) => p,
        Err(answer) => return *answer,
    };
    let pods: Api<Pod> = Api::namespaced(state.host.clone(), &target.tenant_cluster.namespace);
    match pods.log_stream(&host_name, &params).await {
        Ok(reader) => {
            use tokio_util::compat::FuturesAsyncReadCompatExt;
            let stream = tokio_util::io::ReaderStream::new(reader.compat());
            let mut response = Body::from_stream(stream).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            response
        }
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            status_response(code, &status.reason, status.message)
        }
        Err(err) => {
            tracing::warn!(error = %err, "kubelet endpoint: reading logs from the host failed");
            status_response(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                "the host API server did not answer".to_owned(),
            )
        }
    }
}

async fn exec(
    State(state): State<KubeletState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    streaming(state, StreamKind::Exec, namespace, pod, container, request).await
}

async fn attach(
    State(state): State<KubeletState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    streaming(
        state,
        StreamKind::Attach,
        namespace,
        pod,
        container,
        request,
    )
    .await
}

async fn streaming(
    state: KubeletState,
    kind: StreamKind,
    namespace: String,
    pod: String,
    container: String,
    request: Request,
) -> Response {
    let (target, host_name) = match authorize(
        &state,
        fingerprint(&request),
        kind.as_str(),
        namespace,
        pod,
        Some(container),
    )
    .await
    {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let options = match StreamOptions::from_query(request.uri().query().unwrap_or_default()) {
        Ok(o) => o,
        Err(message) => return status_response(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    if kind == StreamKind::Exec && options.command.is_empty() {
        return status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "exec needs a command".to_owned(),
        );
    }
    let pods: Api<Pod> = Api::namespaced(state.host.clone(), &target.tenant_cluster.namespace);
    stream::upgrade(request, pods, host_name, target, kind, options).await
}

async fn port_forward(
    State(state): State<KubeletState>,
    Path((namespace, pod)): Path<(String, String)>,
    request: Request,
) -> Response {
    let (target, host_name) = match authorize(
        &state,
        fingerprint(&request),
        "portForward",
        namespace,
        pod,
        None,
    )
    .await
    {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let allowed = match portforward::allowed_ports(request.uri().query().unwrap_or_default()) {
        Ok(ports) => ports,
        Err(message) => return status_response(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let pods: Api<Pod> = Api::namespaced(state.host.clone(), &target.tenant_cluster.namespace);
    let tenant = target.tenant_cluster.to_string();
    portforward::upgrade(request, pods, host_name, tenant, allowed)
}

async fn run(
    State(state): State<KubeletState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let (target, host_name) = match authorize(
        &state,
        fingerprint(&request),
        "run",
        namespace,
        pod,
        Some(container.clone()),
    )
    .await
    {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let command = match crate::run::run_command(request.uri().query().unwrap_or_default()) {
        Ok(c) => c,
        Err(message) => return status_response(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let pods: Api<Pod> = Api::namespaced(state.host.clone(), &target.tenant_cluster.namespace);
    crate::run::run(pods, &host_name, &container, command).await
}

async fn stats_summary(State(state): State<KubeletState>, request: Request) -> Response {
    node_figures(state, request, NodePath::Summary).await
}

async fn resource_metrics(State(state): State<KubeletState>, request: Request) -> Response {
    node_figures(state, request, NodePath::ResourceMetrics).await
}

/// A node-level path: authenticated like the others; what crosses is filtered to
/// the caller's Pods, so nothing is refused.
async fn node_figures(state: KubeletState, request: Request, path: NodePath) -> Response {
    let tenant_cluster = match caller(&state, fingerprint(&request)) {
        Ok(key) => key,
        Err(answer) => return *answer,
    };
    let forwarded_uri = request
        .headers()
        .get("x-forwarded-uri")
        .and_then(|v| v.to_str().ok());
    crate::stats::node_path(state.host.clone(), &tenant_cluster, forwarded_uri, path).await
}

/// Serves [`router`] over TLS on `listener` until `shutdown` completes; each
/// connection's requests carry the fingerprint of its client certificate.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let app_for = move |connection: &ServerConnection| {
        let fingerprint = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| fingerprint_der(leaf.as_ref()));
        app.clone().layer(axum::Extension(Caller(fingerprint)))
    };
    tenantplane_https::serve(listener, tls, app_for, shutdown).await;
}
