//! Endpoints fromHost: the host's endpoints controller fills the Endpoints of a
//! Service's host copy; the tenant sees them as its Service's Endpoints, with every
//! address's `targetRef` naming the tenant Pod behind the host Pod.
//!
//! Only addresses of this tenant's Pods in the Service's own virtual namespace
//! cross: an address without a Pod, or of a Pod that maps elsewhere, is dropped.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The tenant Pod a host Pod stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPodRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

/// Whether the tenant's Endpoints of this Service come from the host: only for a
/// Service with a selector. Without one the tenant writes its own Endpoints (as on
/// any cluster), and they are never overwritten.
pub fn endpoints_from_host(tenant_service: &Value) -> bool {
    tenant_service
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .is_some_and(|s| !s.is_empty())
        && tenant_service.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
}

/// The tenant Endpoints for `tenant_service` from its host copy's Endpoints.
/// `tenant_pod` maps a host Pod name to the tenant Pod it stands for (`None`
/// for a Pod that is not this tenant's).
pub fn tenant_endpoints(
    tenant_service: &Value,
    host_endpoints: Option<&Value>,
    tenant_pod: &dyn Fn(&str) -> Option<TenantPodRef>,
) -> Value {
    let namespace = tenant_service
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = tenant_service
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let labels = tenant_service
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut subsets = Vec::new();
    for subset in host_endpoints
        .and_then(|e| e.get("subsets"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut out = Map::new();
        for field in ["addresses", "notReadyAddresses"] {
            let addresses: Vec<Value> = subset
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|a| tenant_address(a, namespace, tenant_pod))
                .collect();
            if !addresses.is_empty() {
                out.insert(field.into(), Value::Array(addresses));
            }
        }
        if out.is_empty() {
            continue;
        }
        if let Some(ports) = subset.get("ports") {
            out.insert("ports".into(), ports.clone());
        }
        subsets.push(Value::Object(out));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "subsets": subsets,
    })
}

/// One host address as the tenant sees it, if it is a Pod of this tenant in
/// `namespace`.
fn tenant_address(
    address: &Value,
    namespace: &str,
    tenant_pod: &dyn Fn(&str) -> Option<TenantPodRef>,
) -> Option<Value> {
    let target = address.get("targetRef")?;
    if target.get("kind").and_then(Value::as_str) != Some("Pod") {
        return None;
    }
    let pod = tenant_pod(target.get("name").and_then(Value::as_str)?)?;
    if pod.namespace != namespace {
        return None;
    }
    let mut out = Map::new();
    out.insert("ip".into(), address.get("ip")?.clone());
    if let Some(hostname) = address.get("hostname") {
        out.insert("hostname".into(), hostname.clone());
    }
    let mut target_ref = json!({"kind": "Pod", "namespace": pod.namespace, "name": pod.name});
    if let Some(uid) = pod.uid {
        target_ref["uid"] = Value::String(uid);
    }
    out.insert("targetRef".into(), target_ref);
    Some(Value::Object(out))
}

/// Whether the observed tenant Endpoints already say what `desired` says (its
/// subsets and labels; what the API server adds, such as a targetRef's
/// resourceVersion, is not compared).
pub fn endpoints_hold(desired: &Value, observed: &Value) -> bool {
    let labels = |v: &Value| -> BTreeMap<String, Value> {
        v.pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    };
    let subsets = |v: &Value| -> Value {
        match v.get("subsets") {
            Some(Value::Array(a)) if !a.is_empty() => Value::Array(a.clone()),
            _ => Value::Array(Vec::new()),
        }
    };
    labels(desired) == labels(observed) && subsets(desired) == subsets(observed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
               "spec": {"selector": {"app": "web"}}})
    }

    fn lookup(host_pod: &str) -> Option<TenantPodRef> {
        match host_pod {
            "web-1-x-shop-x-dev" => Some(TenantPodRef {
                namespace: "shop".into(),
                name: "web-1".into(),
                uid: Some("t-uid".into()),
            }),
            "other-x-dev" => Some(TenantPodRef {
                namespace: "other".into(),
                name: "web-2".into(),
                uid: None,
            }),
            _ => None,
        }
    }

    #[test]
    fn addresses_name_the_tenant_pods_and_ports_stay_as_on_the_host() {
        let host = json!({"subsets": [{
            "addresses": [
                {"ip": "10.2.0.9", "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "team-dev", "name": "web-1-x-shop-x-dev", "uid": "h-uid", "resourceVersion": "5"}},
                {"ip": "10.2.0.10", "targetRef": {"kind": "Pod", "namespace": "team-dev", "name": "someone-elses"}},
                {"ip": "10.2.0.11", "targetRef": {"kind": "Pod", "namespace": "team-dev", "name": "other-x-dev"}},
                {"ip": "10.2.0.12"}],
            "notReadyAddresses": [{"ip": "10.2.0.13", "targetRef": {"kind": "Node", "name": "web-1-x-shop-x-dev"}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]});
        let tenant = tenant_endpoints(&svc(), Some(&host), &lookup);
        assert_eq!(
            tenant["metadata"],
            json!({"name": "web", "namespace": "shop", "labels": {"app": "web"}})
        );
        assert_eq!(
            tenant["subsets"],
            json!([{"addresses": [{"ip": "10.2.0.9", "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "t-uid"}}],
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}])
        );
    }

    #[test]
    fn no_host_endpoints_is_no_subsets_and_settles_against_an_empty_object() {
        let tenant = tenant_endpoints(&svc(), None, &lookup);
        assert_eq!(tenant["subsets"], json!([]));
        let observed =
            json!({"metadata": {"name": "web", "labels": {"app": "web"}, "resourceVersion": "3"}});
        assert!(endpoints_hold(&tenant, &observed));
        let changed = json!({"metadata": {"labels": {"app": "web"}}, "subsets": [{"addresses": [{"ip": "1.2.3.4"}]}]});
        assert!(!endpoints_hold(&tenant, &changed));
    }

    #[test]
    fn only_services_with_a_selector_take_their_endpoints_from_the_host() {
        assert!(endpoints_from_host(&svc()));
        assert!(!endpoints_from_host(
            &json!({"spec": {"ports": [{"port": 80}]}})
        ));
        assert!(!endpoints_from_host(&json!({"spec": {"selector": {}}})));
        assert!(!endpoints_from_host(
            &json!({"spec": {"type": "ExternalName", "selector": {"a": "b"}}})
        ));
    }
}
