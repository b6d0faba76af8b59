use super::*;

fn host_node() -> Value {
    json!({"metadata": {"name": "secret-rack-7.corp.example",
                        "labels": {"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1",
                                   "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                                   "beta.kubernetes.io/arch": "amd64",
                                   "kubernetes.io/hostname": "secret-rack-7", "node-role.kubernetes.io/gpu": "",
                                   "corp.example/rack": "7", "tenantplane.io/tenant": "x"},
                        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "corp.example/owner": "ops"}},
           "spec": {"podCIDR": "10.0.0.0/24", "providerID": "aws:///i-123",
                    "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
           "status": {"capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": "3900m", "memory": "7Gi"},
                      "addresses": [{"type": "InternalIP", "address": "10.1.0.4"}, {"type": "Hostname", "address": "secret-rack-7"}],
                      "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                      "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                      "nodeInfo": {"machineID": "m-1", "systemUUID": "s-1", "bootID": "b-1", "kernelVersion": "5.4-corp",
                                   "osImage": "CorpOS", "containerRuntimeVersion": "containerd://1.4", "kubeletVersion": "v1.20.2",
                                   "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64"},
                      "images": [{"names": ["big"]}]}})
}

fn view(mode: NodeMode) -> NodeView {
    NodeView {
        mode,
        salt: "tc-uid-1".into(),
        kubelet_endpoint: None,
        caps: Default::default(),
    }
}

#[test]
fn a_virtual_name_is_stable_salted_and_hides_the_host_name() {
    let v = view(NodeMode::Virtual);
    let name = v.tenant_node_name("secret-rack-7.corp.example");
    assert!(name.starts_with(VIRTUAL_NODE_PREFIX), "{name}");
    assert_eq!(name.len(), VIRTUAL_NODE_PREFIX.len() + 16);
    assert!(!name.contains("secret") && !name.contains("rack"));
    assert_eq!(name, v.tenant_node_name("secret-rack-7.corp.example"));
    assert_ne!(name, v.tenant_node_name("secret-rack-8.corp.example"));
    let other_tc = NodeView {
        salt: "tc-uid-2".into(),
        ..view(NodeMode::Virtual)
    };
    assert_ne!(
        name,
        other_tc.tenant_node_name("secret-rack-7.corp.example")
    );
    assert_eq!(
        view(NodeMode::Scheduled).tenant_node_name("secret-rack-7.corp.example"),
        name
    );
    assert_eq!(
        view(NodeMode::Mirror).tenant_node_name("secret-rack-7.corp.example"),
        "secret-rack-7.corp.example"
    );
}

#[test]
fn a_virtual_node_carries_only_allowed_labels_and_no_host_identity() {
    let v = view(NodeMode::Virtual);
    let node = v.tenant_node("secret-rack-7.corp.example", Some(&host_node()));
    let name = v.tenant_node_name("secret-rack-7.corp.example");
    assert_eq!(
        node["metadata"]["labels"],
        json!({"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1",
               "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
               "kubernetes.io/hostname": name, "app.kubernetes.io/managed-by": "tenantplane"})
    );
    assert!(node["metadata"].get("annotations").is_none());
    assert!(node.get("spec").is_none(), "no taints, no podCIDR");
    assert!(is_mirrored_node(&node));
    let text = serde_json::to_string(&node).unwrap();
    for secret in ["secret-rack", "corp", "10.1.0.4", "aws"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

#[test]
fn a_mirror_node_keeps_the_host_name() {
    let node = view(NodeMode::Mirror).tenant_node("n1", Some(&host_node()));
    assert_eq!(node["metadata"]["name"], "n1");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
    assert!(
        node["metadata"]["labels"]
            .get("corp.example/rack")
            .is_none()
    );
    let bare = view(NodeMode::Mirror).tenant_node("n2", None);
    assert_eq!(
        bare["metadata"]["labels"],
        json!({"kubernetes.io/hostname": "n2", "app.kubernetes.io/managed-by": "tenantplane"})
    );
}

#[test]
fn the_status_is_scrubbed_and_advertises_the_endpoint_only() {
    let host = host_node();
    let hidden = view(NodeMode::Virtual).node_status(host.get("status"));
    assert_eq!(hidden["capacity"], json!({"cpu": "4", "memory": "8Gi"}));
    assert_eq!(
        hidden["allocatable"],
        json!({"cpu": "3900m", "memory": "7Gi"})
    );
    assert_eq!(hidden["conditions"][0]["type"], "Ready");
    assert!(hidden.get("addresses").is_none());
    assert_eq!(
        hidden["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 0}})
    );
    assert!(hidden.get("images").is_none());
    let info = &hidden["nodeInfo"];
    assert_eq!(info["kubeletVersion"], "v1.20.2");
    assert_eq!(info["architecture"], "amd64");
    assert_eq!(info["operatingSystem"], "linux");
    assert_eq!(info["containerRuntimeVersion"], "containerd://1.4");
    for scrubbed in [
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
    ] {
        assert_eq!(info[scrubbed], "", "{scrubbed}");
    }
    let shown = NodeView {
        kubelet_endpoint: Some(KubeletEndpoint {
            address: "127.0.0.1".into(),
            port: 10443,
        }),
        ..view(NodeMode::Virtual)
    };
    let status = shown.node_status(host.get("status"));
    assert_eq!(
        status["addresses"],
        json!([{"type": "InternalIP", "address": "127.0.0.1"}])
    );
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10443);
    assert_eq!(shown.host_ip(), Some("127.0.0.1"));
    assert_eq!(view(NodeMode::Virtual).host_ip(), None);
}

#[test]
fn the_status_is_written_once_whatever_the_server_fills_in() {
    let v = view(NodeMode::Virtual);
    let desired = v.node_status(host_node().get("status"));
    let first = node_status_update(None, &desired).unwrap();
    assert_eq!(node_status_update(Some(&first), &desired), None);
    // What an API server returns for a Node created without status.
    let defaulted = json!({"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                     "operatingSystem": "", "architecture": ""}});
    let nothing = v.node_status(None);
    assert_eq!(node_status_update(Some(&defaulted), &nothing), None);
    assert!(node_status_update(Some(&defaulted), &desired).is_some());
    // A host change is carried over.
    let mut changed = host_node();
    changed["status"]["conditions"][0]["status"] = json!("False");
    let update = node_status_update(Some(&first), &v.node_status(changed.get("status"))).unwrap();
    assert_eq!(update["conditions"][0]["status"], "False");
}

#[test]
fn the_reverse_lookup_trusts_only_recomputed_names() {
    let v = view(NodeMode::Scheduled);
    let hosts = ["a", "b", "c"];
    let b = v.tenant_node_name("b");
    assert_eq!(host_node_of(&v, &b, hosts), Some("b".into()));
    // A tenant-made Node (any name it picks) maps to no host node.
    assert_eq!(
        host_node_of(&v, "tenantplane-0000000000000000", hosts),
        None
    );
    assert_eq!(host_node_of(&v, "b", hosts), None);
    // Another TenantCluster's name for the same host node is not ours.
    let other = NodeView {
        salt: "other".into(),
        ..view(NodeMode::Scheduled)
    };
    assert_eq!(host_node_of(&v, &other.tenant_node_name("b"), hosts), None);
    let names = tenant_node_names(&v, hosts);
    assert_eq!(names.len(), 3);
    assert_eq!(names[&b], "b");
}

#[test]
fn schedulable_means_not_cordoned_and_not_tainted_against_scheduling() {
    assert!(is_schedulable(&json!({"metadata": {"name": "a"}})));
    assert!(!is_schedulable(&json!({"spec": {"unschedulable": true}})));
    assert!(!is_schedulable(&host_node()));
    assert!(is_schedulable(
        &json!({"spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}})
    ));
    assert!(is_schedulable(
        &json!({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}})
    ));
}

#[test]
fn pinning_adds_the_node_to_every_term() {
    let mut pod = json!({"spec": {"containers": []}});
    pin_to_host_node(&mut pod, "h1");
    let field = json!({"key": "metadata.name", "operator": "In", "values": ["h1"]});
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchFields": [field]}])
    );
    let again = pod.clone();
    pin_to_host_node(&mut pod, "h1");
    assert_eq!(pod, again, "idempotent");

    let mut pod = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                               {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}});
    pin_to_host_node(&mut pod, "h1");
    let terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(terms.len(), 2);
    for term in terms {
        assert_eq!(term["matchFields"], json!([field]));
        assert!(term.get("matchExpressions").is_some());
    }
    // Hostile shapes do not panic.
    let mut odd = json!({"spec": {"affinity": "x"}});
    pin_to_host_node(&mut odd, "h1");
    assert_eq!(
        odd["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchFields"][0]["values"][0],
        "h1"
    );
    let mut none = json!("not a pod");
    pin_to_host_node(&mut none, "h1");
}

#[test]
fn caps_lower_what_the_host_reports_and_never_add_a_figure() {
    let capped = NodeView {
        caps: NodeCaps {
            cpu: Some("2".into()),
            memory: Some("16Gi".into()),
        },
        ..view(NodeMode::Virtual)
    };
    let host = json!({
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "3900m", "memory": "7Gi", "pods": "110"},
    });
    let status = capped.node_status(Some(&host));
    // Above the cap: the cap; below it: the host's figure; other resources as they are.
    assert_eq!(
        status["capacity"],
        json!({"cpu": "2", "memory": "8Gi", "pods": "110"})
    );
    assert_eq!(
        status["allocatable"],
        json!({"cpu": "2", "memory": "7Gi", "pods": "110"})
    );
    // Exactly at the cap, in another unit: the host's figure stays.
    let at_cap = json!({"capacity": {"cpu": "2000m"}});
    assert_eq!(
        capped.node_status(Some(&at_cap))["capacity"],
        json!({"cpu": "2000m"})
    );
    // A figure that does not parse shows the cap; a missing one stays missing.
    let odd = json!({"capacity": {"cpu": "lots"}});
    assert_eq!(
        capped.node_status(Some(&odd))["capacity"],
        json!({"cpu": "2"})
    );
    // Without caps, the host's figures.
    let plain = view(NodeMode::Virtual).node_status(Some(&host));
    assert_eq!(plain["capacity"], host["capacity"]);
    assert_eq!(plain["allocatable"], host["allocatable"]);
}
