//! A host Pod resolves through its tenant's DNS server: `dnsPolicy: None` with
//! the tenant's nameserver and search path, as the kubelet would configure a Pod
//! of a cluster whose DNS Service is that server.

use serde_json::{Map, Value, json};

/// How a host Pod resolves names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PodDns {
    /// Leave the Pod's DNS settings alone (no tenant DNS server configured).
    #[default]
    Unchanged,
    /// Through the tenant's DNS server.
    Tenant {
        /// The ClusterIP of the tenant's DNS Service.
        nameserver: String,
        /// Such as `cluster.local`.
        cluster_domain: String,
    },
}

/// The API server's limits for `dnsConfig` (1.20: 3 nameservers, 6 searches).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 6;
/// The kubelet's `ndots` for cluster DNS.
const NDOTS: &str = "5";

/// Rewrites `spec` for the tenant's DNS server. `dnsPolicy: Default` keeps the
/// node's resolver and `None` keeps the Pod's own `dnsConfig`, as on a real cluster;
/// `ClusterFirst` (the default) and `ClusterFirstWithHostNet` become `None` with our
/// nameserver and search path first, then the Pod's own extra nameservers, searches
/// and options (an option of the Pod's overrides ours of the same name, as the
/// kubelet merges them). Beyond the API server's limits, the Pod's extras are cut.
pub fn apply_pod_dns(spec: &mut Map<String, Value>, virtual_namespace: &str, dns: &PodDns) {
    let PodDns::Tenant {
        nameserver,
        cluster_domain,
    } = dns
    else {
        return;
    };
    match spec.get("dnsPolicy").and_then(Value::as_str) {
        Some("Default") | Some("None") => return,
        _ => {}
    }
    let own = spec.get("dnsConfig").cloned().unwrap_or(Value::Null);
    let strings = |field: &str| -> Vec<String> {
        own.get(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let mut nameservers = vec![nameserver.clone()];
    extend_unique(&mut nameservers, strings("nameservers"), MAX_NAMESERVERS);
    let mut searches = vec![
        format!("{virtual_namespace}.svc.{cluster_domain}"),
        format!("svc.{cluster_domain}"),
        cluster_domain.clone(),
    ];
    extend_unique(&mut searches, strings("searches"), MAX_SEARCHES);
    let own_options: Vec<Value> = own
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|o| o.get("name").and_then(Value::as_str).is_some())
        .cloned()
        .collect();
    let mut options = Vec::new();
    if !own_options.iter().any(|o| o["name"] == "ndots") {
        options.push(json!({"name": "ndots", "value": NDOTS}));
    }
    options.extend(own_options);
    spec.insert("dnsPolicy".into(), json!("None"));
    spec.insert(
        "dnsConfig".into(),
        json!({"nameservers": nameservers, "searches": searches, "options": options}),
    );
}

fn extend_unique(list: &mut Vec<String>, extra: Vec<String>, max: usize) {
    for item in extra {
        if list.len() >= max {
            break;
        }
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_dns() -> PodDns {
        PodDns::Tenant {
            nameserver: "10.0.0.53".into(),
            cluster_domain: "cluster.local".into(),
        }
    }

    fn rewritten(spec: Value) -> Value {
        let mut spec = spec.as_object().cloned().unwrap_or_default();
        apply_pod_dns(&mut spec, "shop", &tenant_dns());
        Value::Object(spec)
    }

    #[test]
    fn cluster_first_resolves_through_the_tenant_server() {
        let want = json!({
            "dnsPolicy": "None",
            "dnsConfig": {
                "nameservers": ["10.0.0.53"],
                "searches": ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"],
                "options": [{"name": "ndots", "value": "5"}],
            },
        });
        assert_eq!(rewritten(json!({})), want);
        assert_eq!(rewritten(json!({"dnsPolicy": "ClusterFirst"})), want);
        assert_eq!(
            rewritten(json!({"dnsPolicy": "ClusterFirstWithHostNet"})),
            want
        );
    }

    #[test]
    fn the_pods_own_config_is_kept_after_ours() {
        let got = rewritten(json!({"dnsConfig": {
            "nameservers": ["1.1.1.1", "10.0.0.53"],
            "searches": ["corp.example", "svc.cluster.local"],
            "options": [{"name": "edns0"}, {"name": "timeout", "value": "2"}],
        }}));
        assert_eq!(
            got["dnsConfig"]["nameservers"],
            json!(["10.0.0.53", "1.1.1.1"])
        );
        assert_eq!(
            got["dnsConfig"]["searches"],
            json!([
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example"
            ])
        );
        assert_eq!(
            got["dnsConfig"]["options"],
            json!([{"name": "ndots", "value": "5"}, {"name": "edns0"}, {"name": "timeout", "value": "2"}])
        );
        // The Pod's own ndots wins, as the kubelet merges options.
        let got = rewritten(json!({"dnsConfig": {"options": [{"name": "ndots", "value": "2"}]}}));
        assert_eq!(
            got["dnsConfig"]["options"],
            json!([{"name": "ndots", "value": "2"}])
        );
    }

    #[test]
    fn limits_of_the_api_server_hold() {
        let got = rewritten(json!({"dnsConfig": {
            "nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"],
            "searches": ["a", "b", "c", "d", "e"],
        }}));
        assert_eq!(got["dnsConfig"]["nameservers"].as_array().unwrap().len(), 3);
        assert_eq!(got["dnsConfig"]["searches"].as_array().unwrap().len(), 6);
    }

    #[test]
    fn default_and_none_policies_and_no_tenant_dns_are_kept() {
        for spec in [
            json!({"dnsPolicy": "Default"}),
            json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["9.9.9.9"]}}),
        ] {
            assert_eq!(rewritten(spec.clone()), spec);
        }
        let mut spec = Map::new();
        apply_pod_dns(&mut spec, "shop", &PodDns::Unchanged);
        assert!(spec.is_empty());
    }
}
