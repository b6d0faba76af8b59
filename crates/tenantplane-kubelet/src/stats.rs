//! `GET /stats/summary`: the host kubelet's summary of the host node a tenant Node
//! stands for, read through the HOST API server (`nodes/{node}/proxy/stats/summary`)
//! and cut down to the calling TenantCluster's synced Pods under their tenant names
//! ([`tenantplane_core::pods::stats`]).
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
use tenantplane_core::pods::stats::{StatsPod, StatsPods, proxied_node_name, tenant_summary};
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
    #[error("asking for the summary of host node {node}: {source}")]
    Request {
        node: String,
        #[source]
        source: axum::http::Error,
    },
    #[error("reading the summary of host node {node}: {source}")]
    Summary {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// The synced Pods of a TenantCluster, by host node: host node → its host Pods.
type PodsByNode = BTreeMap<String, StatsPods>;

/// The tenant's summary for the tenant Node the call names.
pub async fn summary(
    host: Client,
    tenant_cluster: &TenantClusterKey,
    forwarded_uri: Option<&str>,
) -> Response {
    match answer(host, tenant_cluster, forwarded_uri).await {
        Ok(response) => response,
        Err(err) => {
            tracing::warn!(tenant = %tenant_cluster, error = %err, "kubelet endpoint: stats summary failed");
            status_response(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                "the host API server did not answer".to_owned(),
            )
        }
    }
}

async fn answer(
    host: Client,
    tenant_cluster: &TenantClusterKey,
    forwarded_uri: Option<&str>,
) -> Result<Response, StatsError> {
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
    };
    let by_node = synced_pods(&host, tenant_cluster).await?;
    // Tenant Node name → host node, for the nodes the tenant's Pods run on.
    let tenant_nodes: BTreeMap<String, &String> = by_node
        .keys()
        .map(|host_node| (view.tenant_node_name(host_node), host_node))
        .collect();
    let asked = forwarded_uri.and_then(proxied_node_name);
    let (tenant_node, host_node) = match asked {
        // A tenant Node none of the tenant's Pods runs on: nothing to show.
        Some(name) => (name.to_owned(), tenant_nodes.get(name).copied()),
        None => match tenant_nodes.iter().next() {
            Some((name, host_node)) if tenant_nodes.len() == 1 => (name.clone(), Some(*host_node)),
            Some(_) => {
                return Ok(status_response(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the Pods of this TenantCluster run on several Nodes, which share this endpoint: \
                     ask through the tenant API server (nodes/{node}/proxy/stats/summary)"
                        .to_owned(),
                ));
            }
            None => {
                return Ok(status_response(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "no Pod of this TenantCluster runs on a node".to_owned(),
                ));
            }
        },
    };
    let empty = StatsPods::new();
    let (host_summary, pods) = match host_node {
        Some(node) => (
            host_node_summary(&host, node).await?,
            by_node.get(node).unwrap_or(&empty),
        ),
        None => (Value::Null, &empty),
    };
    let body = tenant_summary(&host_summary, &tenant_cluster.namespace, pods, &tenant_node);
    let mut response = (StatusCode::OK, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
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

/// `nodes/{node}/proxy/stats/summary` on the host API server.
async fn host_node_summary(host: &Client, node: &str) -> Result<Value, StatsError> {
    let request = axum::http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
        .body(Vec::new())
        .map_err(|source| StatsError::Request {
            node: node.to_owned(),
            source,
        })?;
    host.request::<Value>(request)
        .await
        .map_err(|source| StatsError::Summary {
            node: node.to_owned(),
            source,
        })
}
