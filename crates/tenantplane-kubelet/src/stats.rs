//! `GET /stats/summary` and `GET /metrics/resource`: the host kubelet's figures of
//! the host node a tenant Node stands for, read through the HOST API server
//! (`nodes/{node}/proxy/...`) and cut down to the calling TenantCluster's synced
//! Pods under their tenant names ([`tenantplane_core::pods::stats`],
//! [`tenantplane_core::pods::resource_metrics`]).
//!
//! Every tenant Node of a TenantCluster advertises this one endpoint, so the path
//! does not say which Node is asked: the tenant API server's node proxy names it in
//! `X-Forwarded-Uri`. Without that header (a caller reaching the endpoint directly)
//! the answer is the one host node the tenant's Pods run on, or 400 when there are
//! several. Whatever the header says, only this tenant's Pods can appear.

use std::collections::BTreeMap;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;
use tenantplane_api::TenantCluster;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_selector;
use tenantplane_core::pods::NodeView;
use tenantplane_core::pods::resource_metrics::tenant_resource_metrics;
use tenantplane_core::pods::stats::{NodeChoice, StatsPod, StatsPods, choose_node, tenant_summary};
use tenantplane_core::provenance::reverse_lookup;

use crate::registry::TenantClusterKey;
use crate::server::status_response;

/// Why the summary could not be made (each a 502). Logged by the controller only:
/// it names host nodes.
#[derive(Debug, thiserror::Error)]
enum StatsError {
    #[error("reading TenantCluster {tenant_cluster}: {source}")]
    TenantCluster {
        tenant_cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing the host Pods of {tenant_cluster}: {source}")]
    Pods {
        tenant_cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("building the request to host node {node}: {source}")]
    Request {
        node: String,
        #[source]
        source: axum::http::Error,
    },
    #[error("reading from host node {node}: {source}")]
    Host {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// The synced Pods of a TenantCluster, by host node: host node → its host Pods.
type PodsByNode = BTreeMap<String, StatsPods>;

/// Which host kubelet path a node-level call reads, and how the tenant sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePath {
    /// `/stats/summary` (JSON).
    Summary,
    /// `/metrics/resource` (Prometheus text).
    ResourceMetrics,
}

impl NodePath {
    fn as_str(self) -> &'static str {
        match self {
            NodePath::Summary => "stats/summary",
            NodePath::ResourceMetrics => "metrics/resource",
        }
    }
}

/// The tenant's view of `path` for the tenant Node the call names.
pub async fn node_path(
    host: Client,
    tenant_cluster: &TenantClusterKey,
    forwarded_uri: Option<&str>,
    path: NodePath,
) -> Response {
    match answer(host, tenant_cluster, forwarded_uri, path).await {
        Ok(response) => response,
        Err(err) => {
            tracing::warn!(tenant = %tenant_cluster, path = path.as_str(), error = %err, "kubelet endpoint: node stats failed");
            status_response(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                "the host API server did not answer".to_owned(),
            )
        }
    }
}

/// The tenant Node asked for, the host node it stands for (`None`: none of the
/// tenant's Pods runs there), and the tenant's Pods on it.
struct NodeTarget {
    tenant_node: String,
    host_node: Option<String>,
    pods: StatsPods,
}

async fn answer(
    host: Client,
    tenant_cluster: &TenantClusterKey,
    forwarded_uri: Option<&str>,
    path: NodePath,
) -> Result<Response, StatsError> {
    let target = match node_target(&host, tenant_cluster, forwarded_uri, path).await? {
        Ok(target) => target,
        Err(refusal) => return Ok(refusal),
    };
    let host_namespace = &tenant_cluster.namespace;
    let (body, content_type) = match path {
        NodePath::Summary => {
            let host_summary = match &target.host_node {
                Some(node) => host_get::<Value>(&host, node, path).await?,
                None => Value::Null,
            };
            let body = tenant_summary(
                &host_summary,
                host_namespace,
                &target.pods,
                &target.tenant_node,
            );
            (body.to_string(), "application/json")
        }
        NodePath::ResourceMetrics => {
            let text = match &target.host_node {
                Some(node) => host_get_text(&host, node, path).await?,
                None => String::new(),
            };
            let body = tenant_resource_metrics(&text, host_namespace, &target.pods);
            (body, "text/plain; version=0.0.4")
        }
    };
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// The node the call is about, or the answer when it cannot be told.
async fn node_target(
    host: &Client,
    tenant_cluster: &TenantClusterKey,
    forwarded_uri: Option<&str>,
    path: NodePath,
) -> Result<Result<NodeTarget, Response>, StatsError> {
    let clusters: Api<TenantCluster> = Api::namespaced(host.clone(), &tenant_cluster.namespace);
    let tc =
        clusters
            .get(&tenant_cluster.name)
            .await
            .map_err(|source| StatsError::TenantCluster {
                tenant_cluster: tenant_cluster.to_string(),
                source,
            })?;
    let view = NodeView {
        mode: tc.spec.nodes.mode,
        salt: tc.metadata.uid.clone().unwrap_or_default(),
        kubelet_endpoint: None,
        caps: Default::default(),
    };
    let mut by_node = synced_pods(host, tenant_cluster).await?;
    let choice = choose_node(&view, by_node.keys().map(String::as_str), forwarded_uri);
    let (tenant_node, host_node) = match choice {
        NodeChoice::Host {
            tenant_node,
            host_node,
        } => (tenant_node, Some(host_node)),
        NodeChoice::NoPods { tenant_node } => (tenant_node, None),
        NodeChoice::Ambiguous => {
            return Ok(Err(status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "the Pods of this TenantCluster run on several Nodes, which share this endpoint: \
                     ask through the tenant API server (nodes/{{node}}/proxy/{})",
                    path.as_str()
                ),
            )));
        }
        NodeChoice::Nowhere => {
            return Ok(Err(status_response(
                StatusCode::NOT_FOUND,
                "NotFound",
                "no Pod of this TenantCluster runs on a node".to_owned(),
            )));
        }
    };
    let pods = host_node
        .as_ref()
        .and_then(|node| by_node.remove(node))
        .unwrap_or_default();
    Ok(Ok(NodeTarget {
        tenant_node,
        host_node,
        pods,
    }))
}

/// The host copies of the TenantCluster's Pods that are bound to a node, checked
/// by reverse lookup (a label alone does not make a Pod the tenant's).
async fn synced_pods(
    host: &Client,
    tenant_cluster: &TenantClusterKey,
) -> Result<PodsByNode, StatsError> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), &tenant_cluster.namespace);
    let selector = host_selector(&tenant_cluster.name, &GroupKind::new("", "Pod"));
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| StatsError::Pods {
            tenant_cluster: tenant_cluster.to_string(),
            source,
        })?;
    let mut by_node = PodsByNode::new();
    for pod in list.items {
        let meta = &pod.metadata;
        let Some(name) = meta.name.clone() else {
            continue;
        };
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let labels = meta.labels.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let Ok(identity) = reverse_lookup(&name, &labels, &annotations) else {
            continue;
        };
        if identity.tenant != tenant_cluster.name
            || identity.group_kind != GroupKind::new("", "Pod")
        {
            continue;
        }
        let tenant_pod = StatsPod {
            namespace: identity.virtual_namespace,
            name: identity.name,
            uid: identity.uid,
        };
        by_node
            .entry(node)
            .or_default()
            .insert(name, (meta.uid.clone(), tenant_pod));
    }
    Ok(by_node)
}

/// `nodes/{node}/proxy/<path>` on the host API server.
fn host_request(node: &str, path: NodePath) -> Result<axum::http::Request<Vec<u8>>, StatsError> {
    axum::http::Request::get(format!("/api/v1/nodes/{node}/proxy/{}", path.as_str()))
        .body(Vec::new())
        .map_err(|source| StatsError::Request {
            node: node.to_owned(),
            source,
        })
}

async fn host_get<T: serde::de::DeserializeOwned>(
    host: &Client,
    node: &str,
    path: NodePath,
) -> Result<T, StatsError> {
    host.request::<T>(host_request(node, path)?)
        .await
        .map_err(|source| StatsError::Host {
            node: node.to_owned(),
            source,
        })
}

async fn host_get_text(host: &Client, node: &str, path: NodePath) -> Result<String, StatsError> {
    host.request_text(host_request(node, path)?)
        .await
        .map_err(|source| StatsError::Host {
            node: node.to_owned(),
            source,
        })
}
