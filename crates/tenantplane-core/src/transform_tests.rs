use serde_json::json;

use super::*;

fn dev() -> TenantTarget {
    TenantTarget::new("dev", "team-dev").unwrap()
}

#[test]
fn a_configmap_is_renamed_stamped_and_stripped() {
    let tenant = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "app.config",
            "namespace": "default",
            "uid": "0b1c",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "x"}],
            "finalizers": ["example.com/f"],
            "labels": {"app": "web", "tenantplane.io/tenant": "prod"},
            "annotations": {
                "note": "kept",
                "tenantplane.io/virtual-name": "forged",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"
            }
        },
        "data": {"k": "v"}
    });
    let (placement, host) = to_host(
        &dev(),
        &GroupKind::new("", "ConfigMap"),
        Scope::Namespaced,
        &tenant,
    )
    .unwrap();
    assert_eq!(placement.host_name.name, "app.config-x-default-x-dev");
    assert_eq!(
        host,
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "app.config-x-default-x-dev",
                "namespace": "team-dev",
                "labels": {
                    "app": "web",
                    "app.kubernetes.io/managed-by": "tenantplane",
                    "tenantplane.io/kind": "ConfigMap",
                    "tenantplane.io/tenant": "dev",
                    "tenantplane.io/virtual-namespace": "default"
                },
                "annotations": {
                    "note": "kept",
                    "tenantplane.io/virtual-group-kind": "ConfigMap",
                    "tenantplane.io/virtual-name": "app.config",
                    "tenantplane.io/virtual-namespace": "default",
                    "tenantplane.io/virtual-uid": "0b1c"
                }
            },
            "data": {"k": "v"}
        })
    );
}

#[test]
fn service_allocations_are_stripped_but_headless_is_kept() {
    let svc = |cluster_ip: &str| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "type": "NodePort",
                "healthCheckNodePort": 31000,
                "ports": [{"port": 80, "nodePort": 30080}]
            },
            "status": {"loadBalancer": {}}
        })
    };
    let gk = GroupKind::new("", "Service");
    let (_, host) = to_host(&dev(), &gk, Scope::Namespaced, &svc("10.0.0.7")).unwrap();
    assert_eq!(
        host["spec"],
        json!({"type": "NodePort", "ports": [{"port": 80}]})
    );
    assert!(host.get("status").is_none());
    let (_, host) = to_host(&dev(), &gk, Scope::Namespaced, &svc("None")).unwrap();
    assert_eq!(host["spec"]["clusterIP"], "None");
}

#[test]
fn a_service_account_token_secret_crosses_as_opaque_with_its_data() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "default-token-abcde", "namespace": "default", "uid": "u1",
                     "annotations": {"kubernetes.io/service-account.name": "default",
                                     "kubernetes.io/service-account.uid": "sa-uid", "team": "x"}},
        "data": {"token": "dG9r", "ca.crt": "Y2E=", "namespace": "ZGVmYXVsdA=="}});
    let (_, host) = to_host(
        &dev(),
        &GroupKind::new("", "Secret"),
        Scope::Namespaced,
        &secret,
    )
    .unwrap();
    assert_eq!(host["type"], "Opaque");
    assert_eq!(host["data"], secret["data"]);
    let annotations = host["metadata"]["annotations"].as_object().unwrap();
    assert!(!annotations.contains_key("kubernetes.io/service-account.name"));
    assert!(!annotations.contains_key("kubernetes.io/service-account.uid"));
    assert_eq!(annotations["team"], "x");
    // Any other type crosses as it is.
    let mut tls = secret.clone();
    tls["type"] = json!("kubernetes.io/tls");
    let (_, host) = to_host(
        &dev(),
        &GroupKind::new("", "Secret"),
        Scope::Namespaced,
        &tls,
    )
    .unwrap();
    assert_eq!(host["type"], "kubernetes.io/tls");
    assert_eq!(
        host["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "default"
    );
}

#[test]
fn pod_node_is_stripped() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": "tenant-node", "containers": [{"name": "c", "image": "nginx"}]}
    });
    let (_, host) = to_host(&dev(), &GroupKind::new("", "Pod"), Scope::Namespaced, &pod).unwrap();
    assert!(host["spec"].get("nodeName").is_none());
    assert_eq!(host["spec"]["containers"][0]["image"], "nginx");
}

#[test]
fn reserved_keys_are_stripped_from_pod_templates() {
    let forged = json!({"app": "web", "tenantplane.io/component": "control-plane", "app.kubernetes.io/managed-by": "tenantplane"});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
        "spec": {"template": {"metadata": {"labels": forged, "annotations": {"tenantplane.io/virtual-name": "x", "note": "kept"}}}}
    });
    let (_, host) = to_host(
        &dev(),
        &GroupKind::new("apps", "Deployment"),
        Scope::Namespaced,
        &deployment,
    )
    .unwrap();
    assert_eq!(
        host["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "default"})
    );
    assert_eq!(
        host["spec"]["template"]["metadata"]["annotations"],
        json!({"note": "kept"})
    );
    let cronjob = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
        "spec": {"jobTemplate": {"metadata": {"labels": forged}, "spec": {"template": {"metadata": {"labels": forged}}}}}
    });
    let (_, host) = to_host(
        &dev(),
        &GroupKind::new("batch", "CronJob"),
        Scope::Namespaced,
        &cronjob,
    )
    .unwrap();
    assert_eq!(
        host["spec"]["jobTemplate"]["metadata"]["labels"],
        json!({"app": "web"})
    );
    assert_eq!(
        host["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "default"})
    );
}

#[test]
fn generated_job_selectors_are_stripped() {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"controller-uid": "t-uid"}},
            "template": {"metadata": {"labels": {"controller-uid": "t-uid", "job-name": "j", "app": "x"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        }
    });
    let gk = GroupKind::new("batch", "Job");
    let (_, host) = to_host(&dev(), &gk, Scope::Namespaced, &job).unwrap();
    assert!(host["spec"].get("selector").is_none());
    assert_eq!(
        host["spec"]["template"]["metadata"]["labels"],
        json!({"app": "x", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "default"})
    );
    let mut manual = job.clone();
    manual["spec"]["manualSelector"] = json!(true);
    let (_, host) = to_host(&dev(), &gk, Scope::Namespaced, &manual).unwrap();
    assert!(
        host["spec"].get("selector").is_some(),
        "a manual selector is the tenant's choice"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let gk = GroupKind::new("", "ConfigMap");
    let cases = [
        (json!([]), "JSON object"),
        (json!({"apiVersion": "v1", "kind": "ConfigMap"}), "metadata"),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}}),
            "metadata.name",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            "metadata.namespace",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "namespace": "d"}}),
            "Secret",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "A", "namespace": "d"}}),
            "DNS-1123 subdomain",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "kube-system"}}),
            "system namespace",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 7, "namespace": "d"}}),
            "metadata.name",
        ),
    ];
    for (input, expect) in cases {
        let err = to_host(&dev(), &gk, Scope::Namespaced, &input)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expect), "{input}: {err}");
    }
    let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "a", "namespace": "d"}});
    let err = to_host(
        &dev(),
        &GroupKind::new("", "PersistentVolume"),
        Scope::Cluster,
        &pv,
    )
    .unwrap_err();
    assert!(
        matches!(err, TransformError::Kind(KindError::ClusterScoped { .. })),
        "{err}"
    );
}

#[test]
fn tenant_infrastructure_is_not_synced() {
    let cases = [
        ("", "Service", "default", "kubernetes", true),
        ("", "Endpoints", "default", "kubernetes", true),
        ("", "ConfigMap", "web", "kube-root-ca.crt", true),
        ("", "Service", "web", "kubernetes", false),
        ("", "ConfigMap", "default", "kubernetes", false),
    ];
    for (group, kind, ns, name, skipped) in cases {
        let gk = GroupKind::new(group, kind);
        assert_eq!(
            is_tenant_infrastructure(&gk, ns, name),
            skipped,
            "{kind} {ns}/{name}"
        );
        let result = place(&dev(), &gk, Scope::Namespaced, ns, name, None);
        assert_eq!(
            matches!(result, Err(TransformError::TenantInfrastructure { .. })),
            skipped
        );
    }
}

#[test]
fn targets_are_validated() {
    assert!(TenantTarget::new("Dev", "team-dev").is_err());
    assert!(TenantTarget::new("dev", "team_dev").is_err());
    assert!(TenantTarget::new("", "team-dev").is_err());
}
