//! Each TenantCluster's DNS server on the host, and host Pods resolving through
//! it, against two real API servers (no kubelet: the DNS Deployment never runs).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::*;
use serde_json::{Value, json};
use tenantplane_engine::tenant_dns::DnsDeployment;

#[tokio::test]
async fn the_controller_runs_the_tenant_dns_and_host_pods_resolve_through_it() {
    let h = Harness::start_on_shared_host().await;
    let pods = h.named("pods");
    create(&h.host, policy(&pods, &[("v1", "Pod")], "2s")).await;
    create_namespace(&h.tenant, "shop").await;
    // A foreign Role under the DNS name is never taken over.
    create(
        &h.host,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenantplane-dns-dev", "namespace": h.ns}, "rules": []}),
    )
    .await;
    let dns = DnsDeployment {
        image: "example.invalid/tenantplane:test".into(),
        cluster_domain: "cluster.local".into(),
    };
    let _controller = Controller::start_for_with_dns(&h, dns).await;
    h.create_dev_with("fast", &pods).await;

    // The DNS objects, owned by the TenantCluster and labelled.
    let name = "tenantplane-dns-dev";
    let service = wait_for(&h.host_api("v1", "Service"), name).await;
    for (version, kind) in [
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("apps/v1", "Deployment"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
    ] {
        let object = wait_for(&h.host_api(version, kind), name).await;
        let owners = object.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.kind == "TenantCluster" && o.name == "dev"),
            "{kind}"
        );
        let labels = object.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["tenantplane.io/component"], "dns", "{kind}");
    }
    // The Role was converged before the Service: the foreign one is left as it was.
    let role = wait_for(&h.host_api("rbac.authorization.k8s.io/v1", "Role"), name).await;
    assert!(
        role.metadata.labels.is_none() && role.metadata.owner_references.is_none(),
        "{role:?}"
    );
    let rules = role.data.get("rules").filter(|r| !r.is_null());
    assert!(rules.is_none_or(|r| r == &json!([])), "{:?}", role.data);
    let deployment = wait_for(&h.host_api("apps/v1", "Deployment"), name).await;
    let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example.invalid/tenantplane:test");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        &args[..3],
        ["dns", "--tenant-cluster", &format!("{}/dev", h.ns)]
    );
    let ports: Vec<(i64, &str)> = service.data["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["port"].as_i64().unwrap(), p["protocol"].as_str().unwrap()))
        .collect();
    assert_eq!(ports, [(53, "UDP"), (53, "TCP")]);
    let cluster_ip = service.data["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();

    // A synced host Pod resolves through it, keeping its own options and searches.
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}],
                 "dnsConfig": {"searches": ["corp.example"], "options": [{"name": "edns0"}]}}}),
    )
    .await;
    // `Default` keeps the node's resolver, as on a real cluster.
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "node-dns", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}], "dnsPolicy": "Default"}}),
    )
    .await;
    let host_pods = h.host_api("v1", "Pod");
    let host_pod = wait_for(&host_pods, &predicted("web", "shop", "dev")).await;
    assert_eq!(host_pod.data["spec"]["dnsPolicy"], "None");
    assert_eq!(
        host_pod.data["spec"]["dnsConfig"],
        json!({
            "nameservers": [cluster_ip],
            "searches": ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
            "options": [{"name": "ndots", "value": "5"}, {"name": "edns0"}],
        })
    );
    let node_dns = wait_for(&host_pods, &predicted("node-dns", "shop", "dev")).await;
    assert_eq!(node_dns.data["spec"]["dnsPolicy"], "Default");
    assert!(node_dns.data["spec"].get("dnsConfig").is_none());
}
