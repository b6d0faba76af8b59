use super::*;
use tenantplane_api::NodeMode;

/// A host kubelet's summary: our host Pod, another tenant's, one tenantplane does
/// not own, and one of ours in another host namespace.
fn host_summary() -> Value {
    let pod = |ns: &str, name: &str, uid: &str, cpu: u64, memory: u64| {
        json!({"podRef": {"name": name, "namespace": ns, "uid": uid},
               "startTime": "2026-01-01T00:00:00Z",
               "containers": [{"name": "app", "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": cpu},
                               "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": memory}}],
               "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": cpu, "usageCoreNanoSeconds": cpu * 10},
               "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": memory, "usageBytes": memory},
               "volume": [{"name": "data", "usedBytes": 5, "pvcRef": {"name": format!("data-x-{ns}"), "namespace": ns}}],
               "secretHostThing": "kept out"})
    };
    json!({
        "node": {"nodeName": "secret-rack-7", "startTime": "2025-01-01T00:00:00Z",
                 "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": 3_000_000_000u64},
                 "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": 7_000_000_000u64},
                 "systemContainers": [{"name": "kubelet"}], "fs": {"capacityBytes": 1}, "rlimit": {"maxpid": 1}},
        "pods": [
            pod("team-dev", "web-x-shop-x-dev", "h-web", 100, 1000),
            pod("team-dev", "api-x-shop-x-dev", "h-api", 20, 200),
            pod("team-dev", "web-x-shop-x-prod", "h-prod", 5_000, 50_000),
            pod("team-dev", "billing", "h-billing", 7_000, 70_000),
            pod("elsewhere", "web-x-shop-x-dev", "h-web", 9_000, 90_000),
        ]
    })
}

fn ours() -> StatsPods {
    let pod = |name: &str, uid: &str| StatsPod {
        namespace: "shop".into(),
        name: name.into(),
        uid: Some(uid.into()),
    };
    StatsPods::from([
        (
            "web-x-shop-x-dev".to_owned(),
            (Some("h-web".to_owned()), pod("web", "t-web")),
        ),
        (
            "api-x-shop-x-dev".to_owned(),
            (Some("h-api".to_owned()), pod("api", "t-api")),
        ),
    ])
}

#[test]
fn only_the_tenants_pods_cross_under_tenant_names() {
    let summary = tenant_summary(&host_summary(), "team-dev", &ours(), "tenantplane-0123");
    let pods = summary["pods"].as_array().unwrap();
    let refs: Vec<&Value> = pods.iter().map(|p| &p["podRef"]).collect();
    assert_eq!(
        refs,
        [
            &json!({"name": "web", "namespace": "shop", "uid": "t-web"}),
            &json!({"name": "api", "namespace": "shop", "uid": "t-api"})
        ]
    );
    assert_eq!(pods[0]["cpu"]["usageNanoCores"], 100);
    assert_eq!(pods[0]["containers"][0]["name"], "app");
    assert_eq!(pods[0]["volume"], json!([{"name": "data", "usedBytes": 5}]));
    let text = summary.to_string();
    for leak in [
        "team-dev",
        "x-shop-x",
        "secret-rack",
        "h-web",
        "prod",
        "billing",
        "secretHostThing",
        "systemContainers",
        "rlimit",
        "2025-01-01",
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
}

#[test]
fn the_node_shows_the_sum_of_the_tenants_pods_never_the_hosts_figures() {
    let summary = tenant_summary(&host_summary(), "team-dev", &ours(), "tenantplane-0123");
    assert_eq!(
        summary["node"],
        json!({"nodeName": "tenantplane-0123",
               "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": 120, "usageCoreNanoSeconds": 1200},
               "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": 1200, "usageBytes": 1200}})
    );
    // No Pod of the tenant there: a node with no usage at all.
    let none = tenant_summary(&host_summary(), "team-dev", &StatsPods::new(), "n");
    assert_eq!(none, json!({"node": {"nodeName": "n"}, "pods": []}));
}

#[test]
fn a_pod_of_that_name_with_another_uid_does_not_cross() {
    let mut summary = host_summary();
    summary["pods"][0]["podRef"]["uid"] = json!("recreated-by-someone");
    let out = tenant_summary(&summary, "team-dev", &ours(), "n");
    let names: Vec<&Value> = out["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["podRef"]["name"])
        .collect();
    assert_eq!(names, [&json!("api")]);
}

#[test]
fn hostile_summaries_do_not_panic() {
    for host in [
        json!(null),
        json!({"pods": 3}),
        json!({"pods": [1, {"podRef": 2}, {"podRef": {"name": 3}}]}),
        json!({"pods": [{"podRef": {"name": "web-x-shop-x-dev", "namespace": "team-dev"},
                         "cpu": {"usageNanoCores": -1, "time": 5}, "volume": [1, {"pvcRef": 2}]}]}),
    ] {
        let out = tenant_summary(&host, "team-dev", &ours(), "n");
        assert_eq!(out["node"]["nodeName"], "n");
    }
}

#[test]
fn the_proxied_node_is_read_from_the_forwarded_uri() {
    assert_eq!(
        proxied_node_name("/api/v1/nodes/tenantplane-0123/proxy/stats/summary"),
        Some("tenantplane-0123")
    );
    assert_eq!(
        proxied_node_name("/api/v1/nodes/n1:10250/proxy/stats/summary"),
        Some("n1")
    );
    assert_eq!(proxied_node_name("/stats/summary"), None);
    assert_eq!(proxied_node_name("/api/v1/nodes//proxy/x"), None);
    assert_eq!(proxied_node_name("/api/v1/nodes/n1/status"), None);
}

#[test]
fn the_node_a_call_is_about_is_the_proxied_one_or_the_only_one() {
    let view = NodeView {
        mode: NodeMode::Virtual,
        salt: "tc-uid".into(),
        kubelet_endpoint: None,
        caps: Default::default(),
    };
    let one = view.tenant_node_name("rack-1");
    let uri = |node: &str| format!("/api/v1/nodes/{node}/proxy/stats/summary");
    assert_eq!(
        choose_node(&view, ["rack-1", "rack-2"], Some(&uri(&one))),
        NodeChoice::Host {
            tenant_node: one.clone(),
            host_node: "rack-1".into()
        }
    );
    // Not proxied: the only node, or none.
    assert_eq!(
        choose_node(&view, ["rack-1"], None),
        NodeChoice::Host {
            tenant_node: one.clone(),
            host_node: "rack-1".into()
        }
    );
    assert_eq!(
        choose_node(&view, ["rack-1", "rack-2"], None),
        NodeChoice::Ambiguous
    );
    assert_eq!(choose_node(&view, [], None), NodeChoice::Nowhere);
    // A Node none of the tenant's Pods runs on (a scheduled-mode Node, or a name
    // made up): nothing of any host node, even the host name itself or another
    // TenantCluster's name for a node the tenant uses.
    let other_tenant = NodeView {
        salt: "other-uid".into(),
        ..view.clone()
    };
    for name in [
        "tenantplane-0000000000000000".to_owned(),
        "rack-1".to_owned(),
        other_tenant.tenant_node_name("rack-1"),
    ] {
        assert_eq!(
            choose_node(&view, ["rack-1"], Some(&uri(&name))),
            NodeChoice::NoPods { tenant_node: name }
        );
    }
    // In mirror mode the tenant Node is named like the host node.
    let mirror = NodeView {
        mode: NodeMode::Mirror,
        ..view.clone()
    };
    assert_eq!(
        choose_node(&mirror, ["rack-1"], Some(&uri("rack-1"))),
        NodeChoice::Host {
            tenant_node: "rack-1".into(),
            host_node: "rack-1".into()
        }
    );
}
