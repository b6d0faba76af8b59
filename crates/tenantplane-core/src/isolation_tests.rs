use tenantplane_api::{IsolationControls, IsolationLevel, PodSecurityLevel, TenantClusterSpec};

use super::*;

fn limits(cpu: Option<&str>, memory: Option<&str>) -> ResourceLimits {
    ResourceLimits {
        cpu: cpu.map(|c| Quantity(c.to_owned())),
        memory: memory.map(|m| Quantity(m.to_owned())),
    }
}

fn compile_level(
    level: IsolationLevel,
    resources: Option<&ResourceLimits>,
    egress: EgressPolicy,
) -> IsolationObjects {
    compile(&IsolationInput {
        pods: PodScope::Namespace,
        tenant: "dev",
        host_namespace: "team-dev",
        profile: &IsolationProfileSpec::for_level(level),
        resources,
        egress,
    })
    .expect("compiles")
}

fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("serializes")
}

fn spec(objects: &IsolationObjects) -> serde_json::Value {
    json(objects.network_policy.as_ref().expect("a NetworkPolicy"))["spec"].clone()
}

fn control_plane_peer() -> serde_json::Value {
    serde_json::json!({
        "namespaceSelector": {"matchLabels": {"tenantplane.io/control-plane-of": "team-dev"}},
        "podSelector": {"matchLabels": {
            "tenantplane.io/component": "control-plane",
            "tenantplane.io/tenant": "dev",
        }},
    })
}

#[test]
fn every_level_sets_its_pod_security_level_in_all_three_modes() {
    for (level, expected) in [
        (IsolationLevel::Baseline, "baseline"),
        (IsolationLevel::Restricted, "restricted"),
        (IsolationLevel::Sandboxed, "restricted"),
    ] {
        let objects = compile_level(level, None, EgressPolicy::AllowDns);
        let ns = json(&objects.namespace);
        assert_eq!(ns["apiVersion"], "v1");
        assert_eq!(ns["kind"], "Namespace");
        assert_eq!(ns["metadata"]["name"], "team-dev");
        let labels = objects.namespace.metadata.labels.clone().unwrap();
        let expected_labels: BTreeMap<String, String> = [
            ("pod-security.kubernetes.io/audit", expected),
            ("pod-security.kubernetes.io/audit-version", "latest"),
            ("pod-security.kubernetes.io/enforce", expected),
            ("pod-security.kubernetes.io/enforce-version", "latest"),
            ("pod-security.kubernetes.io/warn", expected),
            ("pod-security.kubernetes.io/warn-version", "latest"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(labels, expected_labels, "{level:?}");
    }
}

#[test]
fn every_level_denies_by_default_and_only_restricted_levels_set_limits() {
    for (level, wants_limits) in [
        (IsolationLevel::Baseline, false),
        (IsolationLevel::Restricted, true),
        (IsolationLevel::Sandboxed, true),
    ] {
        let objects = compile_level(level, None, EgressPolicy::AllowDns);
        let np = json(objects.network_policy.as_ref().unwrap());
        assert_eq!(np["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(np["metadata"]["name"], "tenantplane-isolation-dev");
        assert_eq!(np["metadata"]["namespace"], "team-dev");
        assert_eq!(np["spec"]["podSelector"], serde_json::json!({}));
        assert_eq!(
            np["spec"]["policyTypes"],
            serde_json::json!(["Ingress", "Egress"])
        );
        assert_eq!(objects.limit_range.is_some(), wants_limits, "{level:?}");
        assert_eq!(objects.resource_quota, None);
    }
}

#[test]
fn the_network_policy_can_be_switched_off() {
    let profile = IsolationProfileSpec {
        level: IsolationLevel::Restricted,
        controls: IsolationControls {
            default_deny_network_policy: Some(false),
            pod_security: Some(PodSecurityLevel::Privileged),
            ..IsolationControls::default()
        },
        rules: None,
    };
    let objects = compile(&IsolationInput {
        pods: PodScope::Namespace,
        tenant: "dev",
        host_namespace: "team-dev",
        profile: &profile,
        resources: None,
        egress: EgressPolicy::AllowDns,
    })
    .unwrap();
    assert_eq!(objects.network_policy, None);
    let labels = objects.namespace.metadata.labels.unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
}

#[test]
fn a_tenant_cluster_policy_selects_and_admits_only_its_own_pods() {
    let profile = IsolationProfileSpec::for_level(IsolationLevel::Restricted);
    let objects = compile(&IsolationInput {
        pods: PodScope::TenantCluster,
        tenant: "dev",
        host_namespace: "team-dev",
        profile: &profile,
        resources: None,
        egress: EgressPolicy::DenyAll,
    })
    .unwrap();
    let spec = spec(&objects);
    let own = serde_json::json!({"matchLabels": {"tenantplane.io/tenant": "dev"}});
    assert_eq!(spec["podSelector"], own);
    let peers = serde_json::json!([{"podSelector": own}, control_plane_peer()]);
    assert_eq!(spec["ingress"], serde_json::json!([{"from": peers}]));
    assert_eq!(spec["egress"], serde_json::json!([{"to": peers}]));
}

#[test]
fn ingress_is_the_namespace_and_the_own_control_plane_only() {
    for egress in [
        EgressPolicy::DenyAll,
        EgressPolicy::AllowDns,
        EgressPolicy::AllowAll,
    ] {
        let spec = spec(&compile_level(IsolationLevel::Restricted, None, egress));
        assert_eq!(
            spec["ingress"],
            serde_json::json!([{"from": [{"podSelector": {}}, control_plane_peer()]}]),
            "{egress:?}"
        );
    }
}

#[test]
fn deny_all_egress_reaches_nothing_but_the_namespace_and_the_control_plane() {
    let spec = spec(&compile_level(
        IsolationLevel::Restricted,
        None,
        EgressPolicy::DenyAll,
    ));
    assert_eq!(
        spec["egress"],
        serde_json::json!([{"to": [{"podSelector": {}}, control_plane_peer()]}])
    );
}

#[test]
fn allow_dns_egress_adds_cluster_dns_on_udp_and_tcp_53() {
    let spec = spec(&compile_level(
        IsolationLevel::Baseline,
        None,
        EgressPolicy::AllowDns,
    ));
    assert_eq!(
        spec["egress"],
        serde_json::json!([
            {"to": [{"podSelector": {}}, control_plane_peer()]},
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            },
        ])
    );
}

#[test]
fn allow_all_egress_adds_an_unrestricted_rule() {
    let spec = spec(&compile_level(
        IsolationLevel::Sandboxed,
        None,
        EgressPolicy::AllowAll,
    ));
    assert_eq!(
        spec["egress"],
        serde_json::json!([{"to": [{"podSelector": {}}, control_plane_peer()]}, {}])
    );
}

#[test]
fn every_exemption_label_is_tenantplanes_own() {
    let spec = spec(&compile_level(
        IsolationLevel::Restricted,
        None,
        EgressPolicy::DenyAll,
    ));
    let peer = &spec["egress"][0]["to"][1];
    for selector in ["namespaceSelector", "podSelector"] {
        let labels = peer[selector]["matchLabels"].as_object().unwrap();
        assert!(!labels.is_empty());
        for key in labels.keys() {
            assert!(crate::metadata::is_reserved_key(key), "{key}");
        }
    }
}

#[test]
fn every_object_is_labelled_as_tenantplanes_isolation() {
    let resources = limits(Some("8"), Some("16Gi"));
    let objects = compile_level(
        IsolationLevel::Restricted,
        Some(&resources),
        EgressPolicy::AllowDns,
    );
    let manifests = objects.to_manifests().unwrap();
    let kinds: Vec<_> = manifests.iter().map(|m| m["kind"].clone()).collect();
    assert_eq!(
        kinds,
        ["Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange"]
    );
    for m in &manifests[1..] {
        assert_eq!(
            m["metadata"]["labels"],
            serde_json::json!({
                "app.kubernetes.io/managed-by": "tenantplane",
                "tenantplane.io/component": "isolation",
                "tenantplane.io/tenant": "dev",
            }),
            "{}",
            m["kind"]
        );
        assert_eq!(m["metadata"]["namespace"], "team-dev");
    }
    // The namespace is not tenantplane's: only the Pod Security labels are applied.
    let ns_labels = manifests[0]["metadata"]["labels"].as_object().unwrap();
    assert!(
        ns_labels
            .keys()
            .all(|k| k.starts_with("pod-security.kubernetes.io/"))
    );
}

#[test]
fn resources_cap_requests_and_limits() {
    let resources = limits(Some("8"), Some("16Gi"));
    let objects = compile_level(
        IsolationLevel::Baseline,
        Some(&resources),
        EgressPolicy::AllowDns,
    );
    let quota = json(objects.resource_quota.as_ref().unwrap());
    assert_eq!(quota["metadata"]["name"], "tenantplane-quota-dev");
    assert_eq!(
        quota["spec"],
        serde_json::json!({"hard": {
            "limits.cpu": "8", "limits.memory": "16Gi",
            "requests.cpu": "8", "requests.memory": "16Gi",
        }})
    );

    let cpu_only = limits(Some("500m"), None);
    let objects = compile_level(
        IsolationLevel::Baseline,
        Some(&cpu_only),
        EgressPolicy::AllowDns,
    );
    let hard = objects.resource_quota.unwrap().spec.unwrap().hard.unwrap();
    assert_eq!(
        hard.keys().collect::<Vec<_>>(),
        ["limits.cpu", "requests.cpu"]
    );

    let empty = limits(None, None);
    let objects = compile_level(
        IsolationLevel::Baseline,
        Some(&empty),
        EgressPolicy::AllowDns,
    );
    assert_eq!(objects.resource_quota, None);
}

#[test]
fn limit_range_defaults_fit_under_a_small_quota() {
    let objects = compile_level(IsolationLevel::Restricted, None, EgressPolicy::AllowDns);
    let lr = json(objects.limit_range.as_ref().unwrap());
    assert_eq!(lr["metadata"]["name"], "tenantplane-limits-dev");
    assert_eq!(
        lr["spec"],
        serde_json::json!({"limits": [{
            "type": "Container",
            "default": {"cpu": "1", "memory": "512Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        }]})
    );

    let small = limits(Some("500m"), Some("256Mi"));
    let objects = compile_level(
        IsolationLevel::Restricted,
        Some(&small),
        EgressPolicy::AllowDns,
    );
    let lr = json(objects.limit_range.as_ref().unwrap());
    assert_eq!(
        lr["spec"]["limits"][0]["default"],
        serde_json::json!({"cpu": "500m", "memory": "256Mi"})
    );
    assert_eq!(
        lr["spec"]["limits"][0]["defaultRequest"],
        serde_json::json!({"cpu": "100m", "memory": "128Mi"})
    );
}

#[test]
fn compilation_is_deterministic() {
    let resources = limits(Some("8"), Some("16Gi"));
    for level in IsolationLevel::ALL {
        for egress in [
            EgressPolicy::DenyAll,
            EgressPolicy::AllowDns,
            EgressPolicy::AllowAll,
        ] {
            let a = compile_level(level, Some(&resources), egress);
            let b = compile_level(level, Some(&resources), egress);
            assert_eq!(a, b);
            assert_eq!(
                serde_json::to_string(&a.to_manifests().unwrap()).unwrap(),
                serde_json::to_string(&b.to_manifests().unwrap()).unwrap()
            );
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let profile = IsolationProfileSpec::for_level(IsolationLevel::Restricted);
    let input = |tenant, host_namespace, resources| IsolationInput {
        pods: PodScope::TenantCluster,
        tenant,
        host_namespace,
        profile: &profile,
        resources,
        egress: EgressPolicy::AllowDns,
    };
    let long = "a".repeat(41);
    assert!(matches!(
        compile(&input(&long, "team-dev", None)),
        Err(IsolationError::Tenant(_))
    ));
    assert!(matches!(
        compile(&input("dev", "Team", None)),
        Err(IsolationError::Namespace(_))
    ));
    let bad = limits(Some("8"), Some("lots"));
    let err = compile(&input("dev", "team-dev", Some(&bad))).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid resources.memory: \"lots\""),
        "{err}"
    );
}

#[test]
fn a_tenant_cluster_compiles_from_its_own_fields() {
    let spec: TenantClusterSpec = serde_json::from_value(serde_json::json!({
        "isolationProfileRef": {"name": "restricted"},
        "syncPolicyRef": {"name": "default"},
        "networking": {"egressPolicy": "denyAll"},
        "resources": {"cpu": "2"},
    }))
    .unwrap();
    let mut tc = TenantCluster::new("dev", spec);
    let profile = IsolationProfileSpec::for_level(IsolationLevel::Restricted);
    assert_eq!(
        compile_for(&tc, &profile),
        Err(IsolationError::MissingMetadata("namespace"))
    );
    tc.metadata.namespace = Some("team-dev".to_owned());
    let objects = compile_for(&tc, &profile).unwrap();
    let expected = compile(&IsolationInput {
        pods: PodScope::TenantCluster,
        tenant: "dev",
        host_namespace: "team-dev",
        profile: &profile,
        resources: Some(&limits(Some("2"), None)),
        egress: EgressPolicy::DenyAll,
    })
    .unwrap();
    assert_eq!(objects, expected);
}
