//! The tenant's view of the host nodes its Pods run on: a tenant Node per host
//! node, mirrored by tenantplane and removed when no tenant Pod is bound to it.

use serde_json::{Map, Value, json};

use crate::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE, is_reserved_key};
use crate::transform::string_map;

use super::status::copy_fields;

/// Node status fields the tenant sees.
const NODE_STATUS_FIELDS: &[&str] = &[
    "addresses",
    "capacity",
    "allocatable",
    "conditions",
    "nodeInfo",
    "daemonEndpoints",
];

/// The tenant Node mirroring host node `name` (`host_node` when the host lets us
/// read it): its labels, marked as tenantplane's. Nothing else of the host leaks.
pub fn tenant_node(name: &str, host_node: Option<&Value>) -> Value {
    let mut labels: Map<String, Value> =
        string_map(host_node.and_then(|n| n.pointer("/metadata/labels")))
            .into_iter()
            .filter(|(k, _)| !is_reserved_key(k))
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
}

/// The tenant Node's status for the host node's, or `None` when it already shows it.
pub fn node_status_update(
    tenant_status: Option<&Value>,
    host_status: Option<&Value>,
) -> Option<Value> {
    copy_fields(tenant_status, host_status, NODE_STATUS_FIELDS)
}

/// Whether a tenant Node is one tenantplane mirrors (and may therefore remove).
pub fn is_mirrored_node(node: &Value) -> bool {
    node.pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .and_then(Value::as_str)
        == Some(MANAGED_BY_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirrored_node_carries_host_labels_and_status_once() {
        let host = json!({"metadata": {"name": "n1", "labels": {"zone": "a", "tenantplane.io/tenant": "x"}},
                          "spec": {"podCIDR": "10.0.0.0/24"},
                          "status": {"capacity": {"cpu": "4"}, "addresses": [{"type": "InternalIP", "address": "10.1.0.4"}], "images": ["big"]}});
        let node = tenant_node("n1", Some(&host));
        assert_eq!(
            node["metadata"]["labels"],
            json!({"zone": "a", "app.kubernetes.io/managed-by": "tenantplane"})
        );
        assert!(node.get("spec").is_none());
        assert!(is_mirrored_node(&node));
        let status = node_status_update(None, host.get("status")).unwrap();
        assert_eq!(
            status,
            json!({"capacity": {"cpu": "4"}, "addresses": [{"type": "InternalIP", "address": "10.1.0.4"}]})
        );
        assert_eq!(node_status_update(Some(&status), host.get("status")), None);
        assert_eq!(node_status_update(None, None), None);
        assert!(!is_mirrored_node(&json!({"metadata": {"name": "real"}})));
        assert_eq!(
            tenant_node("n2", None)["metadata"]["labels"],
            json!({"app.kubernetes.io/managed-by": "tenantplane"})
        );
    }
}
