//! EndpointSlices fromHost: the tenant Endpoints of a synced Service (see
//! [`super::endpoints`]) rendered a second time as one EndpointSlice, so that
//! consumers reading slices (kube-proxy-like tools, DNS) see the same Pods. One
//! mapping (the Endpoints plan), two renderings.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Label naming the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming the controller that owns a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// tenantplane's value of [`MANAGED_BY_LABEL`]: a slice without it is never touched.
pub const MANAGED_BY_TENANTPLANE: &str = "tenantplane.io";

/// Whether `slice` is one tenantplane writes (and so may replace or delete).
pub fn managed_by_tenantplane(slice: &Value) -> bool {
    slice
        .pointer("/metadata/labels")
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .and_then(Value::as_str)
        == Some(MANAGED_BY_TENANTPLANE)
}

/// The EndpointSlice of a Service, from its tenant Endpoints as
/// [`super::endpoints::tenant_endpoints`] made them. It is named as the Service
/// (a Service name is at most 63 characters, so is the slice's, and no two
/// Services share one). `api_version` is the discovery.k8s.io version the tenant
/// serves (v1 and v1beta1 agree on every field written here).
///
/// A slice has one port list: endpoints of subsets whose ports differ from the
/// first subset's are left out (the endpoints controller makes one subset per
/// distinct port set, so this only drops Pods of Services whose Pods expose
/// different named ports). The address family is the first address's; addresses
/// of the other family are left out.
pub fn tenant_endpoint_slice(tenant_endpoints: &Value, api_version: &str) -> Value {
    let metadata = tenant_endpoints.get("metadata");
    let text = |field: &str| {
        metadata
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (name, namespace) = (text("name"), text("namespace"));
    let mut labels: Map<String, Value> = metadata
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // Ours override whatever the tenant's Service labels say (a forged
    // managed-by or service-name on the Service must not leak onto the slice).
    labels.insert(SERVICE_NAME_LABEL.into(), Value::String(name.clone()));
    labels.insert(
        MANAGED_BY_LABEL.into(),
        Value::String(MANAGED_BY_TENANTPLANE.into()),
    );
    let subsets: Vec<&Value> = tenant_endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let ports = subsets
        .first()
        .and_then(|s| s.get("ports"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    let mut endpoints = Vec::new();
    for subset in subsets
        .iter()
        .filter(|s| s.get("ports").cloned().unwrap_or_else(|| json!([])) == ports)
    {
        for (field, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for address in subset
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(endpoint) = slice_endpoint(address, ready) {
                    endpoints.push(endpoint);
                }
            }
        }
    }
    let address_type = endpoints
        .first()
        .map(|e| family(&e["addresses"][0]))
        .unwrap_or("IPv4");
    endpoints.retain(|e| family(&e["addresses"][0]) == address_type);
    json!({
        "apiVersion": format!("discovery.k8s.io/{api_version}"),
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    })
}

fn family(ip: &Value) -> &'static str {
    if ip.as_str().is_some_and(|ip| ip.contains(':')) {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// One Endpoints address as a slice endpoint.
fn slice_endpoint(address: &Value, ready: bool) -> Option<Value> {
    let ip = address.get("ip")?.as_str()?;
    let mut out = Map::new();
    out.insert("addresses".into(), json!([ip]));
    out.insert("conditions".into(), json!({"ready": ready}));
    for field in ["hostname", "targetRef"] {
        if let Some(value) = address.get(field) {
            out.insert(field.into(), value.clone());
        }
    }
    Some(Value::Object(out))
}

/// Whether the observed slice already says what `desired` says: same labels and
/// addressType, and every field `desired` sets in its endpoints and ports is set
/// alike (what the API server adds, such as defaulted conditions or a
/// targetRef's resourceVersion, is not compared).
pub fn endpoint_slice_holds(desired: &Value, observed: &Value) -> bool {
    let labels = |v: &Value| -> BTreeMap<String, Value> {
        v.pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    };
    let list = |v: &Value, field: &str| v.get(field).cloned().unwrap_or_else(|| json!([]));
    labels(desired) == labels(observed)
        && desired.get("addressType") == observed.get("addressType")
        && ["endpoints", "ports"]
            .iter()
            .all(|f| covers(&list(desired, f), &list(observed, f)))
}

/// `observed` has every field of `desired` with the same value (arrays
/// element by element, of the same length).
fn covers(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| covers(v, ov))),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(d, o)| covers(d, o))
        }
        _ => desired == observed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints() -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop",
                            "labels": {"app": "web", MANAGED_BY_LABEL: "forged"}},
               "subsets": [
                 {"addresses": [{"ip": "10.2.0.9", "hostname": "w1", "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "t-uid"}}],
                  "notReadyAddresses": [{"ip": "10.2.0.10", "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-2"}}],
                  "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
                 {"addresses": [{"ip": "10.2.0.11"}], "ports": [{"name": "other", "port": 1}]}]})
    }

    #[test]
    fn the_slice_lists_the_same_tenant_pods_with_readiness_and_the_hosts_ports() {
        let slice = tenant_endpoint_slice(&endpoints(), "v1beta1");
        assert_eq!(slice["apiVersion"], "discovery.k8s.io/v1beta1");
        assert_eq!(
            slice["metadata"],
            json!({"name": "web", "namespace": "shop", "labels": {"app": "web",
                   SERVICE_NAME_LABEL: "web", MANAGED_BY_LABEL: MANAGED_BY_TENANTPLANE}})
        );
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(
            slice["endpoints"],
            json!([
                {"addresses": ["10.2.0.9"], "conditions": {"ready": true}, "hostname": "w1",
                 "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "t-uid"}},
                {"addresses": ["10.2.0.10"], "conditions": {"ready": false},
                 "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-2"}}])
        );
        assert_eq!(
            slice["ports"],
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
        );
        assert!(managed_by_tenantplane(&slice));
    }

    #[test]
    fn ipv6_addresses_make_an_ipv6_slice_and_no_subsets_an_empty_one() {
        let v6 =
            json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "fd00::9"}]}]});
        let slice = tenant_endpoint_slice(&v6, "v1");
        assert_eq!(slice["addressType"], "IPv6");
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["fd00::9"]));
        let empty = tenant_endpoint_slice(&json!({"metadata": {"name": "web"}}), "v1");
        assert_eq!(
            (&empty["addressType"], &empty["endpoints"], &empty["ports"]),
            (&json!("IPv4"), &json!([]), &json!([]))
        );
    }

    #[test]
    fn a_slice_holds_despite_server_defaults_but_not_after_a_change() {
        let desired = tenant_endpoint_slice(&endpoints(), "v1");
        let mut observed = desired.clone();
        observed["metadata"]["resourceVersion"] = json!("7");
        observed["endpoints"][0]["conditions"]["serving"] = json!(true);
        observed["endpoints"][0]["targetRef"]["resourceVersion"] = json!("3");
        assert!(endpoint_slice_holds(&desired, &observed));
        let mut changed = observed.clone();
        changed["endpoints"][1]["conditions"]["ready"] = json!(true);
        assert!(!endpoint_slice_holds(&desired, &changed));
        let mut extra = observed.clone();
        extra["endpoints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"addresses": ["1.2.3.4"]}));
        assert!(!endpoint_slice_holds(&desired, &extra));
        let empty = tenant_endpoint_slice(&json!({"metadata": {"name": "web"}}), "v1");
        let served =
            json!({"metadata": {"labels": empty["metadata"]["labels"]}, "addressType": "IPv4"});
        assert!(endpoint_slice_holds(&empty, &served));
    }

    #[test]
    fn a_slice_without_tenantplanes_label_is_not_ours() {
        assert!(!managed_by_tenantplane(&json!({"metadata": {"labels": {
            MANAGED_BY_LABEL: "endpointslice-controller.k8s.io"}}})));
        assert!(!managed_by_tenantplane(&json!({"metadata": {}})));
    }
}
