//! One address per Service on both sides. The host copy is created from the tenant
//! Service with its allocations stripped, so the host allocates; the tenant
//! Service is then made to carry the host's `clusterIP(s)` (re-created: ClusterIP
//! cannot change after creation) and `nodePort`s (updated in place), so the address
//! a tenant Pod reads is the one that routes.

use serde_json::{Map, Value};

/// Metadata the tenant API server populates; a re-created object must not carry
/// it (a `resourceVersion` or `uid` on create is refused).
const SERVER_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// What to do with a tenant Service so it carries its host copy's allocations.
#[derive(Clone, Debug, PartialEq)]
pub enum AddressPlan {
    /// Nothing to align: same address, no address at all (ExternalName,
    /// headless), or the host has not allocated yet.
    InSync,
    /// The ClusterIP differs: delete the tenant Service and create `object` (the
    /// tenant Service with the host's `clusterIP(s)` and `nodePort`s).
    Recreate { object: Value, reason: String },
    /// Only node ports differ (they may change): replace the tenant Service with
    /// `object`.
    Update { object: Value, reason: String },
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// A Service's ClusterIP, when it has one (not headless, not ExternalName).
pub fn cluster_ip(service: &Value) -> Option<&str> {
    if str_at(service, "/spec/type") == Some("ExternalName") {
        return None;
    }
    str_at(service, "/spec/clusterIP").filter(|ip| !ip.is_empty() && *ip != "None")
}

/// The port a `nodePort` belongs to: `(port, protocol)` identifies it in a Service.
fn port_key(port: &Map<String, Value>) -> (Option<i64>, String) {
    (
        port.get("port").and_then(Value::as_i64),
        port.get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            .to_owned(),
    )
}

/// The tenant Service's ports with the host's node ports; `None` when they already
/// match (or the Service has no node ports on the host).
fn ports_with_host_node_ports(tenant: &Value, host: &Value) -> Option<Vec<Value>> {
    let host_ports = host.pointer("/spec/ports").and_then(Value::as_array)?;
    let tenant_ports = tenant.pointer("/spec/ports").and_then(Value::as_array)?;
    let mut changed = false;
    let ports = tenant_ports
        .iter()
        .map(|port| {
            let Some(map) = port.as_object() else {
                return port.clone();
            };
            let key = port_key(map);
            let host_node_port = host_ports
                .iter()
                .filter_map(Value::as_object)
                .find(|h| port_key(h) == key)
                .and_then(|h| h.get("nodePort"))
                .filter(|n| n.as_i64().is_some_and(|n| n > 0));
            let mut map = map.clone();
            if let Some(node_port) = host_node_port
                && map.get("nodePort") != Some(node_port)
            {
                map.insert("nodePort".into(), node_port.clone());
                changed = true;
            }
            Value::Object(map)
        })
        .collect();
    changed.then_some(ports)
}

/// How the tenant Service must change to carry its host copy's allocations.
pub fn plan_address(tenant: &Value, host: &Value) -> AddressPlan {
    let Some(host_ip) = cluster_ip(host) else {
        return AddressPlan::InSync;
    };
    // A tenant Service without an address of its own (headless, ExternalName) keeps
    // none: its host copy was made from it and has none either once synced.
    let Some(tenant_ip) = cluster_ip(tenant) else {
        return AddressPlan::InSync;
    };
    let ports = ports_with_host_node_ports(tenant, host);
    if tenant_ip != host_ip {
        let mut object = for_create(tenant);
        if let Some(spec) = object.pointer_mut("/spec").and_then(Value::as_object_mut) {
            spec.insert("clusterIP".into(), Value::String(host_ip.to_owned()));
            let ips = host
                .pointer("/spec/clusterIPs")
                .cloned()
                .unwrap_or_else(|| Value::Array(vec![Value::String(host_ip.to_owned())]));
            spec.insert("clusterIPs".into(), ips);
            if let Some(ports) = ports {
                spec.insert("ports".into(), Value::Array(ports));
            }
        }
        return AddressPlan::Recreate {
            object,
            reason: format!(
                "the tenant Service had ClusterIP {tenant_ip}, its host copy {host_ip}; \
                 re-created the tenant Service with the host's address (ClusterIP cannot \
                 change after creation), keeping its labels, annotations and spec"
            ),
        };
    }
    match ports {
        Some(ports) => {
            let mut object = tenant.clone();
            if let Some(spec) = object.pointer_mut("/spec").and_then(Value::as_object_mut) {
                spec.insert("ports".into(), Value::Array(ports));
            }
            AddressPlan::Update {
                object,
                reason: "the tenant Service now carries its host copy's node ports".into(),
            }
        }
        None => AddressPlan::InSync,
    }
}

/// The tenant Service as it can be created again: no server metadata, no status.
pub fn for_create(tenant: &Value) -> Value {
    let mut object = tenant.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = object
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
    {
        for field in SERVER_METADATA {
            meta.remove(*field);
        }
    }
    object
}

/// [`AddressPlan::Recreate`]'s object without the host's allocations: what is
/// created back when the tenant API server refuses the host's address, so the
/// tenant keeps its Service (with an address of its own).
pub fn without_allocations(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(spec) = object.pointer_mut("/spec").and_then(Value::as_object_mut) {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
        spec.remove("healthCheckNodePort");
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    object
}

/// What a refusal of the host's address is remembered by: the tenant Service's
/// own spec (without allocations) and the host's address. While both hold the
/// re-create is not tried again.
pub fn refusal_fingerprint(tenant: &Value, host: &Value) -> String {
    let spec = without_allocations(tenant)
        .get("spec")
        .cloned()
        .unwrap_or(Value::Null);
    format!("{}|{spec}", cluster_ip(host).unwrap_or_default())
}

/// Whether a refusal of the tenant API server says the address lies outside its
/// service CIDR (rather than, say, being taken by another tenant Service).
pub fn is_out_of_range(message: &str) -> bool {
    message.contains("not in the valid range") || message.contains("not within the service CIDR")
}

/// The tenant Service's status with the host copy's load balancer, when it differs.
pub fn load_balancer_status(tenant: &Value, host: &Value) -> Option<Value> {
    let host_lb = host
        .pointer("/status/loadBalancer")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let tenant_lb = tenant
        .pointer("/status/loadBalancer")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    if normalize(&host_lb) == normalize(&tenant_lb) {
        return None;
    }
    let mut status = tenant
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    if let Some(map) = status.as_object_mut() {
        map.insert("loadBalancer".into(), host_lb);
    }
    Some(status)
}

/// `{}` and `{"ingress": []}` say the same.
fn normalize(lb: &Value) -> Value {
    match lb.get("ingress").and_then(Value::as_array) {
        Some(ingress) if !ingress.is_empty() => Value::Array(ingress.clone()),
        _ => Value::Null,
    }
}

/// A re-create of a tenant Service in flight, as far as deciding goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replacing {
    /// The UID of the tenant Service being replaced.
    pub replaced_uid: Option<String>,
    /// The UID of the replacement, once created.
    pub created_uid: Option<String>,
}

/// What to do for a tenant Service key, given what the tenant cache holds
/// (`None`: no object; `Some(uid)`) and a re-create in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceStep {
    /// The tenant Service is gone and no re-create of ours is in flight: collect
    /// the host copy.
    Collect,
    /// Our re-create deleted the tenant Service and its create has not succeeded
    /// yet: create it (again). Never a reason to collect the host copy.
    CreateReplacement,
    /// The cache does not show the replacement yet: its watch event brings it.
    Wait,
    /// Sync the tenant Service; `replaced` when a re-create in flight is over (its
    /// replacement, or a Service the tenant made meanwhile, is in the cache).
    Sync { replaced: bool },
}

/// The guard that keeps a re-create's own deletion from collecting the host copy.
pub fn service_step(
    tenant_uid: Option<Option<&str>>,
    replacing: Option<&Replacing>,
) -> ServiceStep {
    match (tenant_uid, replacing) {
        (None, Some(r)) if r.created_uid.is_none() => ServiceStep::CreateReplacement,
        (None, Some(_)) => ServiceStep::Wait,
        (None, None) => ServiceStep::Collect,
        (Some(uid), Some(r)) if uid.is_some() && uid == r.replaced_uid.as_deref() => {
            ServiceStep::Wait
        }
        (Some(_), Some(_)) => ServiceStep::Sync { replaced: true },
        (Some(_), None) => ServiceStep::Sync { replaced: false },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tenant_service_missing_during_our_re_create_never_collects_the_host_copy() {
        let deleted = Replacing {
            replaced_uid: Some("old".into()),
            created_uid: None,
        };
        let created = Replacing {
            created_uid: Some("new".into()),
            ..deleted.clone()
        };
        // Deleted, create failed or not yet done: create again, never collect.
        assert_eq!(
            service_step(None, Some(&deleted)),
            ServiceStep::CreateReplacement
        );
        // Created, but the cache has not seen it yet.
        assert_eq!(service_step(None, Some(&created)), ServiceStep::Wait);
        // The cache still shows the replaced Service.
        assert_eq!(
            service_step(Some(Some("old")), Some(&created)),
            ServiceStep::Wait
        );
        assert_eq!(
            service_step(Some(Some("new")), Some(&created)),
            ServiceStep::Sync { replaced: true }
        );
        // Only without a re-create in flight is a missing Service a deletion.
        assert_eq!(service_step(None, None), ServiceStep::Collect);
        assert_eq!(
            service_step(Some(Some("old")), None),
            ServiceStep::Sync { replaced: false }
        );
    }

    use serde_json::json;

    use super::*;

    fn service(ip: &str, ports: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                            "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "web"},
                            "annotations": {"note": "kept"}},
               "spec": {"type": "NodePort", "clusterIP": ip, "clusterIPs": [ip], "selector": {"app": "web"}, "ports": ports},
               "status": {"loadBalancer": {}}})
    }

    #[test]
    fn a_different_cluster_ip_is_a_recreate_with_the_hosts_addresses_and_the_tenants_metadata() {
        let tenant = service(
            "10.0.0.245",
            json!([{"port": 80, "protocol": "TCP", "nodePort": 30001}]),
        );
        let host = service(
            "10.0.0.142",
            json!([{"port": 80, "protocol": "TCP", "nodePort": 31002}]),
        );
        let AddressPlan::Recreate { object, reason } = plan_address(&tenant, &host) else {
            panic!("expected a re-create");
        };
        assert_eq!(object["spec"]["clusterIP"], "10.0.0.142");
        assert_eq!(object["spec"]["clusterIPs"], json!(["10.0.0.142"]));
        assert_eq!(object["spec"]["ports"][0]["nodePort"], 31002);
        assert_eq!(object["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(object["metadata"]["annotations"], json!({"note": "kept"}));
        assert_eq!(object["spec"]["selector"], json!({"app": "web"}));
        for gone in ["uid", "resourceVersion", "creationTimestamp"] {
            assert!(object["metadata"].get(gone).is_none(), "{gone}");
        }
        assert!(object.get("status").is_none());
        assert!(
            reason.contains("10.0.0.245") && reason.contains("10.0.0.142"),
            "{reason}"
        );
        let restored = without_allocations(&object);
        assert!(restored["spec"].get("clusterIP").is_none());
        assert!(restored["spec"]["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn equal_addresses_and_node_ports_are_in_sync() {
        let ports = json!([{"port": 80, "nodePort": 31002}]);
        let tenant = service("10.0.0.142", ports.clone());
        assert_eq!(plan_address(&tenant, &tenant.clone()), AddressPlan::InSync);
    }

    #[test]
    fn only_node_ports_differing_is_an_update_in_place() {
        let tenant = service(
            "10.0.0.142",
            json!([{"port": 80, "nodePort": 30001}, {"port": 53, "protocol": "UDP", "nodePort": 30002}]),
        );
        let host = service(
            "10.0.0.142",
            json!([{"port": 53, "protocol": "UDP", "nodePort": 31053}, {"port": 80, "nodePort": 30001}]),
        );
        let AddressPlan::Update { object, .. } = plan_address(&tenant, &host) else {
            panic!("expected an update");
        };
        assert_eq!(object["spec"]["ports"][0]["nodePort"], 30001);
        assert_eq!(object["spec"]["ports"][1]["nodePort"], 31053);
        // Kept as observed: the update is conditional on the resourceVersion.
        assert_eq!(object["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn services_without_an_address_are_left_alone() {
        let headless = service("None", json!([]));
        let host = service("10.0.0.9", json!([]));
        assert_eq!(plan_address(&headless, &host), AddressPlan::InSync);
        let mut external = service("", json!([]));
        external["spec"] = json!({"type": "ExternalName", "externalName": "example.com"});
        assert_eq!(plan_address(&external, &host), AddressPlan::InSync);
        // The host has not allocated yet.
        let mut unallocated = host.clone();
        unallocated["spec"]["clusterIP"] = json!("");
        assert_eq!(
            plan_address(&service("10.0.0.1", json!([])), &unallocated),
            AddressPlan::InSync
        );
    }

    #[test]
    fn load_balancer_ingress_flows_back_only_when_it_differs() {
        let tenant = service("10.0.0.1", json!([]));
        let mut host = tenant.clone();
        assert_eq!(load_balancer_status(&tenant, &host), None);
        host["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}});
        let status = load_balancer_status(&tenant, &host).unwrap();
        assert_eq!(status["loadBalancer"]["ingress"][0]["ip"], "192.0.2.10");
        let mut settled = tenant.clone();
        settled["status"] = status;
        assert_eq!(load_balancer_status(&settled, &host), None);
    }

    #[test]
    fn a_refusal_is_remembered_per_tenant_spec_and_host_address() {
        let tenant = service("10.200.0.5", json!([{"port": 80}]));
        let host = service("10.96.0.7", json!([{"port": 80}]));
        let first = refusal_fingerprint(&tenant, &host);
        // The tenant API server gave the restored Service another address: same fingerprint.
        assert_eq!(
            first,
            refusal_fingerprint(&service("10.200.0.9", json!([{"port": 80}])), &host)
        );
        assert_ne!(
            first,
            refusal_fingerprint(&service("10.200.0.5", json!([{"port": 81}])), &host)
        );
        assert!(is_out_of_range(
            "Service \"web\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.7\"}: failed to allocated ip:10.96.0.7 with error:provided IP is not in the valid range. The range of valid IPs is 10.200.0.0/16"
        ));
    }
}
