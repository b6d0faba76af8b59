//! Prometheus metrics of the admission webhook server: requests by path and answer
//! (allowed, denied, error) and their latency, served at `/metrics` beside the
//! webhooks. The answer is read from the AdmissionReview the handler returns, so
//! every handler is counted the same way without knowing about metrics.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The paths the webhook serves; anything else is `other`, so a scanner cannot
/// grow the label set.
const PATHS: [&str; 3] = ["/validate", "/namespaces", "/tenant-resources"];
/// An AdmissionReview answer is a few KiB; more is not one.
const MAX_ANSWER_BYTES: usize = 1 << 20;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub path: &'static str,
    /// `true`, `false` (denied) or `error` (no AdmissionReview answer).
    pub allowed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub path: &'static str,
}

pub struct WebhookMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<PathLabels, Histogram>,
}

impl WebhookMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            // 0.5 ms to ~16 s: the API server's own webhook timeout is at most 30 s.
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
        };
        let r = registry.sub_registry_with_prefix("tenantplane");
        r.register(
            "webhook_requests",
            "Admission requests by path and answer (allowed true/false, or error)",
            metrics.requests.clone(),
        );
        r.register(
            "webhook_latency_seconds",
            "Time to answer an admission request, by path",
            metrics.latency.clone(),
        );
        metrics
    }

    async fn observe(&self, request: Request, next: Next) -> Response {
        let Some(path) = PATHS.iter().copied().find(|p| *p == request.uri().path()) else {
            return next.run(request).await;
        };
        let start = Instant::now();
        let (parts, body) = next.run(request).await.into_parts();
        let (allowed, body) = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
            Ok(bytes) => {
                let answer = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|review| review["response"]["allowed"].as_bool());
                let allowed = match answer {
                    Some(true) => "true",
                    Some(false) => "false",
                    None => "error",
                };
                (allowed, Body::from(bytes))
            }
            Err(err) => {
                tracing::warn!(path, error = %err, "reading the admission answer failed");
                self.requests
                    .get_or_create(&RequestLabels {
                        path,
                        allowed: "error",
                    })
                    .inc();
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        self.latency
            .get_or_create(&PathLabels { path })
            .observe(start.elapsed().as_secs_f64());
        self.requests
            .get_or_create(&RequestLabels { path, allowed })
            .inc();
        Response::from_parts(parts, body)
    }
}

/// `app` with every admission path measured, plus `GET /metrics`.
pub fn instrument(app: Router) -> Router {
    let mut registry = Registry::default();
    let metrics = Arc::new(WebhookMetrics::new(&mut registry));
    let registry = Arc::new(registry);
    app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let metrics = Arc::clone(&metrics);
            async move { metrics.observe(request, next).await }
        },
    ))
    .route(
        "/metrics",
        get(move || {
            let registry = Arc::clone(&registry);
            async move { exposition(&registry) }
        }),
    )
}

fn exposition(registry: &Registry) -> Response {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {err}"),
        )
            .into_response(),
    }
}

#[cfg(test)]
#[path = "monitoring_check.rs"]
mod monitoring_check;
