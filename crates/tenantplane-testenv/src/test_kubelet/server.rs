//! The test kubelet's HTTPS server: TLS, routing, request recording and container logs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::stream::{self, StreamKind};
use super::{RecordedRequest, Shared};
use crate::{Error, Result};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// rustls (ring), HTTP/1.1 only: upgrades (WebSocket, SPDY) are HTTP/1.1.
pub(super) fn tls_config(cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>> {
    let tls_err = |e: String| Error::TestKubelet(format!("TLS: {e}"));
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(e.to_string()))?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| tls_err(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls_err(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

pub(super) async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    shared: Arc<Shared>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let app = router(shared.clone());
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "test kubelet: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let task = tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "test kubelet: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                .with_upgrades();
            if let Err(err) = conn.await {
                tracing::debug!(%peer, error = %err, "test kubelet: connection ended with an error");
            }
        });
        shared.track(task.abort_handle());
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/exec/{ns}/{pod}/{container}", any(exec))
        .route("/exec/{ns}/{pod}/{uid}/{container}", any(exec_uid))
        .route("/attach/{ns}/{pod}/{container}", any(attach))
        .route("/attach/{ns}/{pod}/{uid}/{container}", any(attach_uid))
        .route("/portForward/{ns}/{pod}", any(port_forward))
        .route("/portForward/{ns}/{pod}/{uid}", any(port_forward_uid))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(resource_metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .layer(middleware::from_fn_with_state(shared.clone(), record))
        .with_state(shared)
}

/// The summary a test set ([`super::TestKubelet::set_stats_summary`]), or 404.
async fn stats_summary(State(shared): State<Arc<Shared>>) -> Response {
    let summary = shared.stats_summary.lock().ok().and_then(|s| s.clone());
    match summary {
        Some(summary) => (
            [(header::CONTENT_TYPE, "application/json")],
            summary.to_string(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no stats summary set\n").into_response(),
    }
}

/// The Prometheus text a test set ([`super::TestKubelet::set_resource_metrics`]), or 404.
async fn resource_metrics(State(shared): State<Arc<Shared>>) -> Response {
    let text = shared.resource_metrics.lock().ok().and_then(|s| s.clone());
    match text {
        Some(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        None => (StatusCode::NOT_FOUND, "no resource metrics set\n").into_response(),
    }
}

/// Headers never recorded: credentials.
const SECRET_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let uri = request.uri().clone();
    let query = uri.query().unwrap_or_default().to_owned();
    let mut entry = RecordedRequest {
        method: request.method().to_string(),
        path: uri.path().to_owned(),
        params: form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        query,
        headers: request
            .headers()
            .iter()
            .filter(|(name, _)| !SECRET_HEADERS.contains(&name.as_str()))
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        status: 0,
        protocol: None,
    };
    let response = next.run(request).await;
    entry.status = response.status().as_u16();
    entry.protocol = response
        .headers()
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    tracing::debug!(method = %entry.method, path = %entry.path, status = entry.status, "test kubelet");
    if let Ok(mut requests) = shared.requests.lock() {
        requests.push(entry);
    }
    response
}

/// A query parameter's values, decoded.
pub(super) fn query_values(request: &Request, key: &str) -> Vec<String> {
    form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

fn query_first(request: &Request, key: &str) -> Option<String> {
    query_values(request, key).into_iter().next()
}

fn query_flag(request: &Request, key: &str) -> bool {
    query_first(request, key).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Line `n` (from 1) of a container's log.
pub fn log_line(ns: &str, pod: &str, container: &str, n: usize, timestamps: bool) -> String {
    let text = format!("log line {n} from {ns}/{pod}/{container}\n");
    if timestamps {
        format!("{} {text}", timestamp(n))
    } else {
        text
    }
}

/// A fixed RFC 3339 time, `n` seconds after 2026-01-01T00:00:00Z (same day).
fn timestamp(n: usize) -> String {
    let secs = n % 86_400;
    format!(
        "2026-01-01T{:02}:{:02}:{:02}.000000000Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

async fn container_logs(
    State(shared): State<Arc<Shared>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let options = &shared.options;
    let timestamps = query_flag(&request, "timestamps");
    let follow = query_flag(&request, "follow");
    let tail = match query_first(&request, "tailLines").map(|v| v.parse::<i64>()) {
        None => None,
        Some(Ok(n)) if n < 0 => None,
        Some(Ok(n)) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(Err(_)) => {
            return (StatusCode::BAD_REQUEST, "tailLines must be an integer\n").into_response();
        }
    };
    let limit_bytes = match query_first(&request, "limitBytes").map(|v| v.parse::<usize>()) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                "limitBytes must be a positive integer\n",
            )
                .into_response();
        }
    };
    let first = tail.map_or(1, |t| options.log_lines.saturating_sub(t) + 1);
    let headers = [(header::CONTENT_TYPE, "text/plain")];
    if !follow {
        let mut body: String = (first..=options.log_lines)
            .map(|n| log_line(&ns, &pod, &container, n, timestamps))
            .collect();
        if let Some(limit) = limit_bytes {
            let mut cut = limit.min(body.len());
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
        }
        return (headers, body).into_response();
    }
    // Follow: the log so far, then one line per interval, each its own chunk.
    let interval = options.follow_interval;
    let last = options.follow_limit;
    let initial = options.log_lines;
    let state = FollowState {
        next: first,
        sent_bytes: 0,
    };
    let stream = futures::stream::unfold(state, move |mut state| {
        let (ns, pod, container) = (ns.clone(), pod.clone(), container.clone());
        async move {
            if last.is_some_and(|last| state.next > last) {
                return None;
            }
            if limit_bytes.is_some_and(|limit| state.sent_bytes >= limit) {
                return None;
            }
            if state.next > initial {
                tokio::time::sleep(interval).await;
            }
            let mut line = log_line(&ns, &pod, &container, state.next, timestamps);
            if let Some(limit) = limit_bytes {
                let room = limit.saturating_sub(state.sent_bytes);
                let mut cut = room.min(line.len());
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            state.next += 1;
            state.sent_bytes += line.len();
            Some((Ok::<_, Infallible>(Bytes::from(line)), state))
        }
    });
    (headers, Body::from_stream(stream)).into_response()
}

struct FollowState {
    next: usize,
    sent_bytes: usize,
}

async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    stream::remote_command(shared, StreamKind::Exec, ns, pod, container, request)
}

async fn exec_uid(
    State(shared): State<Arc<Shared>>,
    Path((ns, pod, _uid, container)): Path<(String, String, String, String)>,
    request: Request,
) -> Response {
    stream::remote_command(shared, StreamKind::Exec, ns, pod, container, request)
}

async fn attach(
    State(shared): State<Arc<Shared>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    stream::remote_command(shared, StreamKind::Attach, ns, pod, container, request)
}

async fn attach_uid(
    State(shared): State<Arc<Shared>>,
    Path((ns, pod, _uid, container)): Path<(String, String, String, String)>,
    request: Request,
) -> Response {
    stream::remote_command(shared, StreamKind::Attach, ns, pod, container, request)
}

async fn port_forward(
    State(shared): State<Arc<Shared>>,
    Path((_ns, _pod)): Path<(String, String)>,
    request: Request,
) -> Response {
    stream::port_forward(shared, request)
}

async fn port_forward_uid(
    State(shared): State<Arc<Shared>>,
    Path((_ns, _pod, _uid)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    stream::port_forward(shared, request)
}
