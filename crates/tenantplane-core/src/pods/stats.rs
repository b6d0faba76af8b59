//! A host kubelet's `/stats/summary` as a tenant may see it: only the tenant's
//! synced Pods, under their tenant names, on the tenant Node. The host node's own
//! figures (its usage, system containers, filesystems, rlimits, boot time) describe
//! every tenant's load and never cross, in any node mode: the tenant Node shows
//! capacity and allocatable only. Its node figures are the sum of its own Pods'.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::node::NodeView;

/// A tenant Pod a host Pod stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsPod {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

/// The host Pods whose figures may cross: host name → (host UID, tenant Pod).
pub type StatsPods = BTreeMap<String, (Option<String>, StatsPod)>;

/// Pod-level fields copied (the others, unknown to us, are dropped).
const POD_FIELDS: &[&str] = &[
    "startTime",
    "containers",
    "cpu",
    "memory",
    "network",
    "volume",
    "ephemeral-storage",
    "process_stats",
    "swap",
];

/// Node usage figures summed over the tenant's Pods.
const CPU_SUMS: &[&str] = &["usageNanoCores", "usageCoreNanoSeconds"];
const MEMORY_SUMS: &[&str] = &[
    "usageBytes",
    "workingSetBytes",
    "rssBytes",
    "pageFaults",
    "majorPageFaults",
];

/// The tenant's summary from host summary `host`: Pods of `host_namespace` listed
/// in `pods` (by name, and by UID when both have one) renamed to their tenant
/// Pods, every other Pod dropped; the node named `tenant_node`.
pub fn tenant_summary(
    host: &Value,
    host_namespace: &str,
    pods: &StatsPods,
    tenant_node: &str,
) -> Value {
    let tenant_pods: Vec<Value> = host
        .get("pods")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|pod| tenant_pod_stats(pod, host_namespace, pods))
        .collect();
    let mut node = Map::new();
    node.insert("nodeName".into(), Value::String(tenant_node.to_owned()));
    for (field, sums) in [("cpu", CPU_SUMS), ("memory", MEMORY_SUMS)] {
        if let Some(total) = summed(&tenant_pods, field, sums) {
            node.insert(field.into(), total);
        }
    }
    json!({"node": node, "pods": tenant_pods})
}

/// One Pod's figures under its tenant name, or `None` when it is not the tenant's.
fn tenant_pod_stats(pod: &Value, host_namespace: &str, pods: &StatsPods) -> Option<Value> {
    let reference = pod.get("podRef")?;
    let field = |f: &str| reference.get(f).and_then(Value::as_str);
    if field("namespace") != Some(host_namespace) {
        return None;
    }
    let (host_uid, tenant) = pods.get(field("name")?)?;
    if let (Some(expected), Some(reported)) = (host_uid, field("uid").filter(|u| !u.is_empty()))
        && expected != reported
    {
        return None;
    }
    let mut out = Map::new();
    let mut pod_ref = json!({"name": tenant.name, "namespace": tenant.namespace});
    if let Some(uid) = &tenant.uid {
        pod_ref["uid"] = Value::String(uid.clone());
    }
    out.insert("podRef".into(), pod_ref);
    for key in POD_FIELDS {
        if let Some(value) = pod.get(*key) {
            out.insert((*key).into(), value.clone());
        }
    }
    // A volume's PVC reference names the host copy of the claim: keep the volume
    // (its name is the Pod's own) without it.
    if let Some(volumes) = out.get_mut("volume").and_then(Value::as_array_mut) {
        for volume in volumes.iter_mut().filter_map(Value::as_object_mut) {
            volume.remove("pvcRef");
        }
    }
    Some(Value::Object(out))
}

/// `{time, <each of sums>}` summed over `pods[*][field]`; `None` when no Pod
/// reports `field`. The time is the latest a Pod reports.
fn summed(pods: &[Value], field: &str, sums: &[&str]) -> Option<Value> {
    let reported: Vec<&Value> = pods.iter().filter_map(|p| p.get(field)).collect();
    if reported.is_empty() {
        return None;
    }
    let mut out = Map::new();
    if let Some(time) = reported
        .iter()
        .filter_map(|r| r.get("time").and_then(Value::as_str))
        .max()
    {
        out.insert("time".into(), Value::String(time.to_owned()));
    }
    for key in sums {
        let values: Vec<u64> = reported
            .iter()
            .filter_map(|r| r.get(*key).and_then(Value::as_u64))
            .collect();
        if !values.is_empty() {
            let total = values.iter().fold(0u64, |a, b| a.saturating_add(*b));
            out.insert((*key).into(), json!(total));
        }
    }
    Some(Value::Object(out))
}

/// Which host node a node-level call (`/stats/summary`, `/metrics/resource`) of a
/// TenantCluster is about. Its tenant Nodes all share one endpoint, so the path
/// does not say; the tenant API server's node proxy does, in `X-Forwarded-Uri`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeChoice {
    /// Tenant Node `tenant_node`, which stands for host node `host_node`.
    Host {
        tenant_node: String,
        host_node: String,
    },
    /// A tenant Node none of the tenant's Pods runs on: nothing of the host to show.
    NoPods { tenant_node: String },
    /// No Node named, and the tenant's Pods run on several.
    Ambiguous,
    /// No Node named, and none of the tenant's Pods runs on a node.
    Nowhere,
}

/// The node a call is about, from the host nodes the tenant's Pods run on (named
/// by `view`) and the proxied URI. A name matching none of them never reaches
/// another host node.
pub fn choose_node<'a>(
    view: &NodeView,
    host_nodes: impl IntoIterator<Item = &'a str>,
    forwarded_uri: Option<&str>,
) -> NodeChoice {
    let by_tenant_name: BTreeMap<String, &str> = host_nodes
        .into_iter()
        .map(|host| (view.tenant_node_name(host), host))
        .collect();
    if let Some(asked) = forwarded_uri.and_then(proxied_node_name) {
        return match by_tenant_name.get(asked) {
            Some(host) => NodeChoice::Host {
                tenant_node: asked.to_owned(),
                host_node: (*host).to_owned(),
            },
            None => NodeChoice::NoPods {
                tenant_node: asked.to_owned(),
            },
        };
    }
    let mut nodes = by_tenant_name.into_iter();
    match (nodes.next(), nodes.next()) {
        (Some((tenant_node, host)), None) => NodeChoice::Host {
            tenant_node,
            host_node: host.to_owned(),
        },
        (Some(_), Some(_)) => NodeChoice::Ambiguous,
        (None, _) => NodeChoice::Nowhere,
    }
}

/// The tenant Node a node-proxy call named: the API server forwards
/// `/api/v1/nodes/{node}[:port]/proxy/...` in `X-Forwarded-Uri`.
pub fn proxied_node_name(forwarded_uri: &str) -> Option<&str> {
    let rest = forwarded_uri.strip_prefix("/api/v1/nodes/")?;
    let (node, tail) = rest.split_once('/')?;
    let node = node.split(':').next().unwrap_or_default();
    (tail.starts_with("proxy") && !node.is_empty()).then_some(node)
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
