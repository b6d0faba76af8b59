//! Pods reach the test API server, which listens on loopback only, through a TCP
//! relay on the node IP that is published as the `default/kubernetes` Service's
//! endpoints. In-cluster config (`KUBERNETES_SERVICE_HOST`, the Service's ClusterIP)
//! then works as on a real cluster; the serving certificate names that ClusterIP.

use std::net::SocketAddr;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::NODE_IP;
use crate::server::ApiServer;
use crate::{Error, Result, io_err};

const FIELD_MANAGER: &str = "tenantplane-testenv";

/// A running relay; stops (with every connection it carries) when dropped.
pub(super) struct ApiRelay {
    task: JoinHandle<()>,
    pub(super) address: SocketAddr,
}

impl Drop for ApiRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays `NODE_IP:<free port>` to the server's loopback port and points the
/// `kubernetes` Service at it.
pub(super) async fn start(server: &ApiServer) -> Result<ApiRelay> {
    let listener = TcpListener::bind((NODE_IP, 0))
        .await
        .map_err(io_err(format!("listen on {NODE_IP}")))?;
    let address = listener
        .local_addr()
        .map_err(io_err("read the relay's address"))?;
    let upstream = SocketAddr::from(([127, 0, 0, 1], server.port()));
    let task = tokio::spawn(async move {
        // Owned here: aborting this task drops the set, which aborts every connection.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((mut inbound, _)) => {
                        connections.spawn(async move {
                            if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                    Err(err) => tracing::warn!(error = %err, "API relay accept failed"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    let relay = ApiRelay { task, address };
    publish(server, address.port()).await?;
    Ok(relay)
}

/// The `kubernetes` Service's Endpoints and EndpointSlice name the relay (the test
/// API server runs no endpoint reconciler; mirroring is skipped so one slice exists).
async fn publish(server: &ApiServer, port: u16) -> Result<()> {
    let client = server.client().await?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": NODE_IP}],
                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes",
                                "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    for (group, version, kind, object) in [
        ("", "v1", "Endpoints", endpoints),
        ("discovery.k8s.io", "v1beta1", "EndpointSlice", slice),
    ] {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        api.patch("kubernetes", &params, &Patch::Apply(object))
            .await
            .map_err(|e| {
                Error::Node(format!(
                    "publish the API relay as {kind} default/kubernetes: {e}"
                ))
            })?;
    }
    Ok(())
}
