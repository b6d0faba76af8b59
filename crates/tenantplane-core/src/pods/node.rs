//! The tenant's view of the host nodes its Pods run on: a tenant Node per host
//! node (per [`NodeMode`]), rendered by tenantplane from an allow-list of the host
//! node's labels and a scrubbed status, advertising tenantplane's kubelet endpoint
//! (never the host kubelet's), and removed when no tenant Pod is bound to it.
//!
//! Names: in `virtual` and `scheduled` mode a tenant Node is `tenantplane-<hash>`,
//! the hash salted with the TenantCluster's host UID (which the tenant does not
//! see), so the tenant can neither read the host node's name out of it nor check a
//! guess. The reverse lookup ([`host_node_of`]) recomputes the hash for each
//! candidate host node, so it cannot be forged by a Node or annotation the tenant
//! creates itself; nothing on the tenant Node names the host node.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tenantplane_api::NodeMode;

use crate::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::transform::string_map;

use super::status::copy_fields;

/// Where the tenant API server reaches tenantplane's kubelet endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletEndpoint {
    pub address: String,
    pub port: u16,
}

/// How the tenant Nodes of one TenantCluster are named and what they advertise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    pub mode: NodeMode,
    /// Salts the generated names: the TenantCluster's host UID.
    pub salt: String,
    /// `None`: no address and kubelet port 0 (never the host node's).
    pub kubelet_endpoint: Option<KubeletEndpoint>,
    /// Caps on the capacity and allocatable shown (`spec.nodes.capResources`).
    pub caps: NodeCaps,
}

/// Quantities a tenant Node shows at most, per resource (`cpu`, `memory`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCaps {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

impl NodeCaps {
    /// `figures` (a capacity or allocatable map) with each capped resource at most
    /// its cap. A host figure that does not parse shows the cap; one the host does
    /// not report stays absent.
    pub fn apply(&self, figures: &Value) -> Value {
        let mut figures = figures.clone();
        let Some(map) = figures.as_object_mut() else {
            return figures;
        };
        for (resource, cap) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            let Some(cap) = cap else { continue };
            let Some(cap_nanos) = crate::quantity::exact_nanos(cap) else {
                continue;
            };
            // Only what the host reports is shown (capped), never a figure it lacks.
            let Some(host) = map.get(resource) else {
                continue;
            };
            let host = host.as_str().and_then(crate::quantity::exact_nanos);
            if host.is_none_or(|h| h > cap_nanos) {
                map.insert(resource.to_owned(), Value::String(cap.clone()));
            }
        }
        figures
    }
}

/// Host node labels a tenant Node may carry (plus `kubernetes.io/hostname`, set to
/// the tenant Node's own name, and tenantplane's managed-by label).
pub const ALLOWED_NODE_LABELS: &[&str] = &[
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// Prefix of generated tenant Node names.
pub const VIRTUAL_NODE_PREFIX: &str = "tenantplane-";

/// `nodeInfo` fields the tenant sees; the others (machineID, systemUUID, bootID,
/// kernelVersion, osImage, kubeProxyVersion) are written empty.
const NODE_INFO_KEPT: &[&str] = &[
    "kubeletVersion",
    "architecture",
    "operatingSystem",
    "containerRuntimeVersion",
];
const NODE_INFO_SCRUBBED: &[&str] = &[
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "kubeProxyVersion",
];

/// Node status fields tenantplane owns on a tenant Node.
const NODE_STATUS_FIELDS: &[&str] = &[
    "addresses",
    "capacity",
    "allocatable",
    "conditions",
    "nodeInfo",
    "daemonEndpoints",
];

impl NodeView {
    /// The tenant Node name for host node `host_node`.
    pub fn tenant_node_name(&self, host_node: &str) -> String {
        match self.mode {
            NodeMode::Mirror => host_node.to_owned(),
            NodeMode::Virtual | NodeMode::Scheduled => {
                let mut hasher = Sha256::new();
                hasher.update(b"tenantplane-node/");
                hasher.update(self.salt.as_bytes());
                hasher.update(b"/");
                hasher.update(host_node.as_bytes());
                let hex = crate::hex::short_hex(hasher.finalize(), 8);
                format!("{VIRTUAL_NODE_PREFIX}{hex}")
            }
        }
    }

    /// The tenant Node for host node `host_name` (`host_node` when the host lets
    /// us read it): metadata only, the status comes from [`NodeView::node_status`].
    pub fn tenant_node(&self, host_name: &str, host_node: Option<&Value>) -> Value {
        let name = self.tenant_node_name(host_name);
        let host_labels = string_map(host_node.and_then(|n| n.pointer("/metadata/labels")));
        let mut labels: Map<String, Value> = host_labels
            .into_iter()
            .filter(|(k, _)| ALLOWED_NODE_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        labels.insert(LABEL_HOSTNAME.into(), Value::String(name.clone()));
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    }

    /// The tenant Node's status for the host node's: capacity, allocatable and
    /// conditions as the host reports them, node info scrubbed, and the kubelet
    /// endpoint's address and port (none and 0 without one).
    pub fn node_status(&self, host_status: Option<&Value>) -> Value {
        let mut status = Map::new();
        for field in ["capacity", "allocatable", "conditions"] {
            if let Some(v) = host_status
                .and_then(|s| s.get(field))
                .filter(|v| !v.is_null())
            {
                let shown = if field == "conditions" {
                    v.clone()
                } else {
                    self.caps.apply(v)
                };
                status.insert(field.into(), shown);
            }
        }
        let host_info = host_status.and_then(|s| s.get("nodeInfo"));
        let mut info = Map::new();
        for field in NODE_INFO_KEPT {
            let value = host_info
                .and_then(|i| i.get(*field))
                .and_then(Value::as_str)
                .unwrap_or_default();
            info.insert((*field).into(), Value::String(value.to_owned()));
        }
        for field in NODE_INFO_SCRUBBED {
            info.insert((*field).into(), Value::String(String::new()));
        }
        status.insert("nodeInfo".into(), Value::Object(info));
        let port = self.kubelet_endpoint.as_ref().map_or(0, |e| e.port);
        if let Some(endpoint) = &self.kubelet_endpoint {
            status.insert(
                "addresses".into(),
                json!([{"type": "InternalIP", "address": endpoint.address}]),
            );
        }
        status.insert(
            "daemonEndpoints".into(),
            json!({"kubeletEndpoint": {"Port": port}}),
        );
        Value::Object(status)
    }

    /// The address a tenant Pod's `status.hostIP` shows: the kubelet endpoint's,
    /// or none (never the host node's).
    pub fn host_ip(&self) -> Option<&str> {
        self.kubelet_endpoint.as_ref().map(|e| e.address.as_str())
    }
}

/// The status to write on a tenant Node that shows `tenant_status` so it shows
/// `desired` ([`NodeView::node_status`]), or `None` when it already does. Empty
/// values the tenant API server fills in (`""`, `0`, `null`, `{}`, `[]`) count as
/// absent, so its defaulting never causes another write.
pub fn node_status_update(tenant_status: Option<&Value>, desired: &Value) -> Option<Value> {
    let same = NODE_STATUS_FIELDS.iter().all(|field| {
        normalized(tenant_status.and_then(|s| s.get(*field))) == normalized(desired.get(*field))
    });
    if same {
        return None;
    }
    copy_fields(tenant_status, Some(desired), NODE_STATUS_FIELDS)
}

/// `value` without empty leaves; `None` when nothing is left.
fn normalized(value: Option<&Value>) -> Option<Value> {
    match value? {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::Bool(false) => None,
        Value::Object(map) => {
            let kept: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| normalized(Some(v)).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(items) => {
            let kept: Vec<Value> = items
                .iter()
                .map(|v| normalized(Some(v)).unwrap_or(Value::Null))
                .collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        other => Some(other.clone()),
    }
}

/// Whether a tenant Node is one tenantplane renders (and may therefore remove).
pub fn is_mirrored_node(node: &Value) -> bool {
    node.pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .and_then(Value::as_str)
        == Some(MANAGED_BY_VALUE)
}

/// The host node behind tenant Node `tenant_node` among `host_nodes`: the one
/// whose tenant Node name it is. Verified by recomputing the name, so a Node the
/// tenant named or annotated itself maps to nothing it was not given.
pub fn host_node_of<'a>(
    view: &NodeView,
    tenant_node: &str,
    host_nodes: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    host_nodes
        .into_iter()
        .find(|h| view.tenant_node_name(h) == tenant_node)
        .map(str::to_owned)
}

/// Tenant Node name → host node name for `host_nodes`.
pub fn tenant_node_names<'a>(
    view: &NodeView,
    host_nodes: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, String> {
    host_nodes
        .into_iter()
        .map(|h| (view.tenant_node_name(h), h.to_owned()))
        .collect()
}

/// Whether the tenant may schedule onto host node `node` in `scheduled` mode:
/// not cordoned, and no NoSchedule/NoExecute taint of the platform's. The
/// `node.kubernetes.io/*` taints follow the node's conditions (not-ready,
/// unreachable, pressure): transient, and shown to the tenant through the mirrored
/// conditions, so a node flapping does not make its tenant Node come and go.
pub fn is_schedulable(node: &Value) -> bool {
    let cordoned = node
        .pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tainted = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|taints| {
            taints.iter().any(|t| {
                let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
                !key.starts_with("node.kubernetes.io/")
                    && matches!(
                        t.get("effect").and_then(Value::as_str),
                        Some("NoSchedule" | "NoExecute")
                    )
            })
        });
    !cordoned && !tainted
}

/// Pins host Pod `pod` to host node `host_node` with a required node affinity on
/// the node's name (added to every node selector term, so the tenant's own terms
/// still apply). The host scheduler still checks resources and taints.
pub fn pin_to_host_node(pod: &mut Value, host_node: &str) {
    let field = json!({"key": "metadata.name", "operator": "In", "values": [host_node]});
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
    if !affinity.is_object() {
        *affinity = json!({});
    }
    let Some(affinity) = affinity.as_object_mut() else {
        return;
    };
    let node_affinity = affinity.entry("nodeAffinity").or_insert_with(|| json!({}));
    if !node_affinity.is_object() {
        *node_affinity = json!({});
    }
    let Some(node_affinity) = node_affinity.as_object_mut() else {
        return;
    };
    let required = node_affinity
        .entry("requiredDuringSchedulingIgnoredDuringExecution")
        .or_insert_with(|| json!({}));
    if !required.is_object() {
        *required = json!({});
    }
    let Some(required) = required.as_object_mut() else {
        return;
    };
    let terms = required
        .entry("nodeSelectorTerms")
        .or_insert_with(|| json!([]));
    if !terms.is_array() {
        *terms = json!([]);
    }
    let Some(terms) = terms.as_array_mut() else {
        return;
    };
    if terms.is_empty() {
        terms.push(json!({}));
    }
    for term in terms.iter_mut() {
        if !term.is_object() {
            *term = json!({});
        }
        let Some(term) = term.as_object_mut() else {
            continue;
        };
        let fields = term.entry("matchFields").or_insert_with(|| json!([]));
        if !fields.is_array() {
            *fields = json!([]);
        }
        if let Some(fields) = fields.as_array_mut()
            && !fields.contains(&field)
        {
            fields.push(field.clone());
        }
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
