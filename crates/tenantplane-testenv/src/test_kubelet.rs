//! A stand-in kubelet for tests: an in-process HTTPS server a real test API server
//! proxies `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward` to, with no
//! root and no container runtime.
//!
//! [`TestKubelet::start`] serves on `127.0.0.1:<ephemeral>` (a certificate from a
//! throwaway [`TestCa`]) and registers a host Node whose only address is
//! `InternalIP 127.0.0.1` and whose `daemonEndpoints.kubeletEndpoint.Port` is that
//! port, Ready. The test API server's default flags are enough for it to call the
//! node: `--kubelet-preferred-address-types` falls through to `InternalIP`, and with
//! no `--kubelet-certificate-authority` it does not verify the kubelet's serving
//! certificate (nor presents a client certificate, so this kubelet asks for none).
//!
//! It answers for any Pod name; the API server only needs the Pod object to exist
//! and be bound to the node: [`TestKubelet::bind_pod`] does that and marks it Running.
//! What it serves (every request is recorded, see [`TestKubelet::requests`]):
//! - `GET /containerLogs/{ns}/{pod}/{container}`: lines
//!   `log line N from {ns}/{pod}/{container}` (N from 1), honouring `tailLines`,
//!   `timestamps`, `limitBytes` and `follow` (more lines, one per chunk, until the
//!   client goes away or [`TestKubeletOptions::follow_limit`] lines were written);
//! - `/exec/{ns}/{pod}/{container}` and `/attach/...`: WebSocket, channel protocols
//!   `v5.channel.k8s.io`, `v4.channel.k8s.io` and `channel.k8s.io` (see [`stream`]);
//! - `/portForward/{ns}/{pod}`: WebSocket port-forward (`v4.channel.k8s.io` or
//!   `portforward.k8s.io`), an echo server on every port;
//! - `GET /stats/summary`: the JSON a test set with [`TestKubelet::set_stats_summary`]
//!   (404 until then); `GET /metrics/resource` likewise, the text of
//!   [`TestKubelet::set_resource_metrics`];
//! - `GET /healthz`: `ok`; anything else: 404.
//!
//! SPDY (what kubectl falls back to, and tunnels for port-forward) is refused with
//! 400 `SPDY not supported by the test kubelet`.
//!
//! Dropping the kubelet stops the server and every stream it serves; the Node stays
//! (the test API server goes away with the test).

mod server;
pub mod stream;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::task::AbortHandle;

use crate::certs::TestCa;
use crate::server::ApiServer;
use crate::{Error, Result, io_err};

/// How the test kubelet behaves.
#[derive(Clone, Debug)]
pub struct TestKubeletOptions {
    /// Lines a container's log holds before `follow` adds more.
    pub log_lines: usize,
    /// The pause between two lines `follow` adds.
    pub follow_interval: Duration,
    /// With `follow`, the stream ends (as when the container exits) after this many
    /// lines in all; `None` streams until the client disconnects.
    pub follow_limit: Option<usize>,
}

impl Default for TestKubeletOptions {
    fn default() -> Self {
        Self {
            log_lines: 10,
            follow_interval: Duration::from_millis(100),
            follow_limit: None,
        }
    }
}

/// One request the kubelet received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, not decoded: `/exec/ns/pod/container`.
    pub path: String,
    /// The raw query string, empty when there is none.
    pub query: String,
    /// The query, decoded, in order (repeated keys such as `command` repeat).
    pub params: Vec<(String, String)>,
    /// Request headers (lower-case names), except credentials
    /// (`authorization`, `proxy-authorization`, `cookie`).
    pub headers: Vec<(String, String)>,
    /// The status the kubelet answered (101 for an accepted upgrade).
    pub status: u16,
    /// The protocol it agreed on: the answered `Sec-WebSocket-Protocol`, if any.
    pub protocol: Option<String>,
}

impl RecordedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of query parameter `key`, in order.
    pub fn param_values(&self, key: &str) -> Vec<&str> {
        self.params
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.param_values(key).into_iter().next()
    }

    /// The WebSocket subprotocols the caller offered, in its order.
    pub fn offered_protocols(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "sec-websocket-protocol")
            .flat_map(|(_, v)| v.split(','))
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()
    }
}

/// State shared by the server's tasks.
pub(crate) struct Shared {
    pub(crate) options: TestKubeletOptions,
    pub(crate) requests: Mutex<Vec<RecordedRequest>>,
    /// What `/stats/summary` answers.
    pub(crate) stats_summary: Mutex<Option<serde_json::Value>>,
    /// What `/metrics/resource` answers.
    pub(crate) resource_metrics: Mutex<Option<String>>,
    /// Every task the server spawned (connections, streams): aborted on drop.
    pub(crate) tasks: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    pub(crate) fn track(&self, handle: AbortHandle) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(handle);
        }
    }
}

/// A running test kubelet; see the module docs.
pub struct TestKubelet {
    node_name: String,
    addr: SocketAddr,
    ca_pem: String,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

impl std::fmt::Debug for TestKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestKubelet")
            .field("node_name", &self.node_name)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TestKubelet {
    /// Starts a kubelet with default options and registers Node `node_name` on `host`.
    pub async fn start(host: &ApiServer, node_name: &str) -> Result<Self> {
        Self::start_with(host, node_name, TestKubeletOptions::default()).await
    }

    /// [`TestKubelet::start`] with options.
    pub async fn start_with(
        host: &ApiServer,
        node_name: &str,
        options: TestKubeletOptions,
    ) -> Result<Self> {
        let client = host.client().await?;
        let kubelet = Self::serve(node_name, options).await?;
        kubelet
            .register_node(&client)
            .await
            .map_err(|source| Error::Kube {
                server: host.name().to_owned(),
                source,
            })?;
        Ok(kubelet)
    }

    /// Only the server, without registering a Node (for a test that registers its
    /// own, or calls the kubelet directly).
    pub async fn serve(node_name: &str, options: TestKubeletOptions) -> Result<Self> {
        let ca = TestCa::new("tenantplane-test-kubelet-ca")?;
        let cert = ca.issue(&["127.0.0.1", "localhost", node_name])?;
        let tls = server::tls_config(&cert.cert_pem, &cert.key_pem)?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(io_err("bind the test kubelet's port"))?;
        let addr = listener
            .local_addr()
            .map_err(io_err("read the test kubelet's port"))?;
        let shared = Arc::new(Shared {
            options,
            requests: Mutex::new(Vec::new()),
            stats_summary: Mutex::new(None),
            resource_metrics: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
        });
        let accept =
            tokio::spawn(server::accept_loop(listener, tls, shared.clone())).abort_handle();
        Ok(Self {
            node_name: node_name.to_owned(),
            addr,
            ca_pem: ca.cert_pem(),
            shared,
            accept,
        })
    }

    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// `127.0.0.1:<port>`
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `https://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The CA of the kubelet's serving certificate (for a caller that verifies it).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Every request so far, oldest first (an upgrade or a stream is recorded when
    /// the kubelet answered it, not when it ended).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// What `GET /stats/summary` answers from now on (the kubelet's Summary API
    /// JSON, as the test wants it).
    pub fn set_stats_summary(&self, summary: serde_json::Value) {
        if let Ok(mut s) = self.shared.stats_summary.lock() {
            *s = Some(summary);
        }
    }

    /// What `GET /metrics/resource` answers from now on (Prometheus text).
    pub fn set_resource_metrics(&self, text: &str) {
        if let Ok(mut m) = self.shared.resource_metrics.lock() {
            *m = Some(text.to_owned());
        }
    }

    /// Forgets the requests recorded so far.
    pub fn clear_requests(&self) {
        if let Ok(mut r) = self.shared.requests.lock() {
            r.clear();
        }
    }

    /// Creates (or leaves) Node `node_name` and sets its status: address
    /// `InternalIP 127.0.0.1`, kubelet port [`TestKubelet::port`], Ready.
    pub async fn register_node(&self, client: &Client) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }))
        .map_err(kube::Error::SerdeError)?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(err),
        }
        nodes
            .patch_status(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Merge(node_status(self.port())),
            )
            .await?;
        Ok(())
    }

    /// Makes host Pod `ns/name` "run" on this kubelet: binds it to the node (the
    /// `binding` subresource, so the Pod must not be bound yet) and sets its status
    /// Running and Ready, every container running.
    pub async fn bind_pod(&self, client: &Client, ns: &str, name: &str) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": { "name": name, "namespace": ns },
            "target": { "apiVersion": "v1", "kind": "Node", "name": self.node_name },
        });
        let _: serde_json::Value = pods
            .create_subresource("binding", name, &PostParams::default(), &binding)
            .await?;
        let pod = pods.get(name).await?;
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(running_status(&pod)),
        )
        .await?;
        Ok(())
    }
}

impl Drop for TestKubelet {
    fn drop(&mut self) {
        self.accept.abort();
        if let Ok(tasks) = self.shared.tasks.lock() {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

const STARTED: &str = "2026-01-01T00:00:00Z";

fn node_status(port: u16) -> serde_json::Value {
    json!({
        "status": {
            "addresses": [{ "type": "InternalIP", "address": "127.0.0.1" }],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": port } },
            "capacity": { "cpu": "4", "memory": "8Gi", "pods": "110" },
            "allocatable": { "cpu": "4", "memory": "8Gi", "pods": "110" },
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "test kubelet is posting ready status",
                "lastHeartbeatTime": STARTED,
                "lastTransitionTime": STARTED,
            }],
            "nodeInfo": {
                "machineID": "test-kubelet",
                "systemUUID": "test-kubelet",
                "bootID": "test-kubelet",
                "kernelVersion": "test",
                "osImage": "test kubelet",
                "containerRuntimeVersion": "test://1",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

fn running_status(pod: &Pod) -> serde_json::Value {
    let containers: Vec<serde_json::Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": format!("test://{}", c.image.clone().unwrap_or_default()),
                "containerID": format!("test://{}", c.name),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": { "running": { "startedAt": STARTED } },
            })
        })
        .collect();
    let condition = |t: &str| json!({ "type": t, "status": "True", "lastTransitionTime": STARTED });
    json!({
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "startTime": STARTED,
            "conditions": [
                condition("Initialized"),
                condition("Ready"),
                condition("ContainersReady"),
                condition("PodScheduled"),
            ],
            "containerStatuses": containers,
        },
    })
}
