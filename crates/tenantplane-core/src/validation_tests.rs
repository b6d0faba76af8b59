use tenantplane_api::{
    ApiFairness, ClusterMode, ExternalControlPlane, IsolationLevel, ResourceLimits, SecretKeyRef,
    SyncDirection, SyncResource,
};

use super::*;

fn tc_spec() -> TenantClusterSpec {
    serde_json::from_value(serde_json::json!({
        "isolationProfileRef": {"name": "restricted"},
        "syncPolicyRef": {"name": "default"},
    }))
    .unwrap()
}

fn fields(violations: &[Violation]) -> Vec<&str> {
    violations.iter().map(|v| v.field.as_str()).collect()
}

#[test]
fn a_default_tenant_cluster_is_valid() {
    assert_eq!(tenant_cluster("dev", &tc_spec()), []);
    assert_eq!(tenant_cluster(&"a".repeat(40), &tc_spec()), []);
}

#[test]
fn long_names_and_old_versions_are_refused_with_the_fix() {
    let mut spec = tc_spec();
    spec.kubernetes_version = "v1.27".into();
    let v = tenant_cluster(&"a".repeat(41), &spec);
    assert_eq!(fields(&v), ["metadata.name", "spec.kubernetesVersion"]);
    assert!(v[0].message.contains("at most 40 characters"), "{}", v[0]);
    assert!(
        v[1].to_string()
            .ends_with("use one of v1.28, v1.29, v1.30, v1.31, v1.32, v1.33"),
        "{}",
        v[1]
    );
}

#[test]
fn sans_must_be_ips_or_dns_names() {
    let mut spec = tc_spec();
    spec.control_plane.extra_sans = [
        "10.0.0.1",
        "fd00::1",
        "api.example.com",
        "*.example.com",
        "Bad_Name",
        "a b",
        "",
        "*",
    ]
    .map(String::from)
    .to_vec();
    let v = tenant_cluster("dev", &spec);
    assert_eq!(
        fields(&v),
        [
            "spec.controlPlane.extraSANs[4]",
            "spec.controlPlane.extraSANs[5]",
            "spec.controlPlane.extraSANs[6]",
            "spec.controlPlane.extraSANs[7]",
        ]
    );
    assert!(v[0].message.contains("such as api.example.com"));
}

#[test]
fn references_secrets_and_caps_are_checked() {
    let mut spec = tc_spec();
    spec.isolation_profile_ref.name = "Restricted".into();
    spec.control_plane.external = Some(ExternalControlPlane {
        kubeconfig_secret_ref: SecretKeyRef {
            name: "kube_config".into(),
            key: "kubeconfig".into(),
        },
        kubelet_client_certificate_secret_ref: None,
    });
    spec.resources = Some(ResourceLimits {
        cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "-1".into(),
        )),
        memory: None,
    });
    let v = tenant_cluster("dev", &spec);
    assert_eq!(
        fields(&v),
        [
            "spec.isolationProfileRef.name",
            "spec.controlPlane.external.kubeconfigSecretRef.name",
            "spec.resources.cpu",
        ]
    );
    assert!(
        v[1].message
            .ends_with("name a Secret in the TenantCluster's namespace")
    );
}

#[test]
fn mode_changes_need_the_migration_flag() {
    let old = tc_spec();
    let mut new = tc_spec();
    new.mode = ClusterMode::Dedicated;
    let v = tenant_cluster_update(&old, &new);
    assert_eq!(
        v[0].to_string(),
        "spec.mode: cannot change from shared to dedicated after creation: set spec.migration.allowModeChange: true to migrate the tenant, or keep mode: shared"
    );
    new.migration.allow_mode_change = true;
    assert_eq!(tenant_cluster_update(&old, &new), []);
    assert_eq!(tenant_cluster_update(&old, &old), []);
}

#[test]
fn updates_may_keep_old_problems_but_not_add_new_ones() {
    let mut old_spec = tc_spec();
    old_spec.kubernetes_version = "v1.27".into();
    let old = tenant_cluster("dev", &old_spec);
    assert_eq!(introduced(&old, tenant_cluster("dev", &old_spec)), []);
    let mut new_spec = old_spec.clone();
    new_spec.kubernetes_version = "v1.26".into();
    assert_eq!(
        fields(&introduced(&old, tenant_cluster("dev", &new_spec))),
        ["spec.kubernetesVersion"]
    );
}

#[test]
fn isolation_profiles() {
    for level in IsolationLevel::ALL {
        assert_eq!(
            isolation_profile(&IsolationProfileSpec::for_level(level)),
            []
        );
    }
    let mut spec = IsolationProfileSpec::for_level(IsolationLevel::Sandboxed);
    spec.controls.runtime_class_name = Some("Kata QEMU".into());
    spec.controls.api_fairness = Some(ApiFairness { qps: 20, burst: 10 });
    let v = isolation_profile(&spec);
    assert_eq!(
        fields(&v),
        [
            "spec.controls.runtimeClassName",
            "spec.controls.apiFairness.burst"
        ]
    );
    assert_eq!(
        v[1].message,
        "burst (10) must be at least qps (20): raise burst or lower qps"
    );
    spec.controls.api_fairness = Some(ApiFairness { qps: 20, burst: 20 });
    spec.controls.runtime_class_name = Some("gvisor".into());
    assert_eq!(isolation_profile(&spec), []);
    spec.controls.allowed_ingress_classes =
        Some(vec!["nginx".into(), "Bad_Class".into(), "a".repeat(254)]);
    assert_eq!(
        fields(&isolation_profile(&spec)),
        [
            "spec.controls.allowedIngressClasses[1]",
            "spec.controls.allowedIngressClasses[2]"
        ]
    );
    spec.controls.allowed_ingress_classes = Some(vec![]);
    assert_eq!(isolation_profile(&spec), []);
}

fn resource(api_version: &str, kind: &str) -> SyncResource {
    SyncResource {
        api_version: api_version.into(),
        kind: kind.into(),
        direction: SyncDirection::ToHost,
        field_ownership: Vec::new(),
        selector: None,
        mappings: Vec::new(),
    }
}

#[test]
fn from_host_kinds_and_mappings() {
    let mut spec = SyncPolicySpec::default_policy();
    let from_host = |api_version: &str, kind: &str, mappings: &[&str]| SyncResource {
        direction: SyncDirection::FromHost,
        mappings: mappings.iter().map(|m| (*m).to_owned()).collect(),
        ..resource(api_version, kind)
    };
    spec.resources = vec![
        resource("v1", "ConfigMap"),
        from_host("v1", "ConfigMap", &["shared/ca -> default/ca"]),
        from_host("storage.k8s.io/v1", "StorageClass", &[]),
        from_host("rbac.authorization.k8s.io/v1", "ClusterRole", &[]),
        from_host("v1", "Secret", &["shared/x -> nope"]),
        SyncResource {
            mappings: vec!["a/b -> c/d".into()],
            ..resource("v1", "Service")
        },
        from_host("storage.k8s.io/v1", "StorageClass", &[]),
    ];
    let v = sync_policy(&spec);
    assert_eq!(
        fields(&v),
        [
            "spec.resources[3]",
            "spec.resources[6]",
            "spec.resources[4].mappings[0]",
            "spec.resources[5].mappings[0]",
        ],
        "{v:?}"
    );
    assert!(v[0].message.contains("allow-list"), "{}", v[0]);
    assert!(v[2].message.contains("not of the form"), "{}", v[2]);
    assert!(v[3].message.contains("fromHost"), "{}", v[3]);
}

#[test]
fn sync_policies() {
    assert_eq!(sync_policy(&SyncPolicySpec::default_policy()), []);
    let mut spec = SyncPolicySpec::default_policy();
    spec.resources = vec![
        resource("v1", "ConfigMap"),
        resource("a/b/c", "Widget"),
        resource("v1", "PersistentVolume"),
        resource("v2", "ConfigMap"),
        resource("example.com/v1", "Widget"),
        resource("example.com/v2", "Widget"),
    ];
    spec.drift_detection.interval = "500ms".into();
    let v = sync_policy(&spec);
    assert_eq!(
        fields(&v),
        [
            "spec.resources[1]",
            "spec.resources[2]",
            "spec.resources[3]",
            "spec.resources[5]",
            "spec.driftDetection.interval",
        ]
    );
    assert!(v[1].message.contains("cluster-scoped"), "{}", v[1]);
    assert_eq!(
        v[2].message,
        "ConfigMap is already listed at spec.resources[0]: list each kind once"
    );
    assert_eq!(
        v[3].message,
        "Widget.example.com is already listed at spec.resources[4]: list each kind once"
    );
    assert!(v[4].message.contains("use 1s or more"), "{}", v[4]);

    spec.resources.clear();
    spec.drift_detection.interval = "soon".into();
    assert!(
        sync_policy(&spec)[0]
            .message
            .starts_with("invalid interval")
    );
    spec.drift_detection.interval = "1s".into();
    assert_eq!(sync_policy(&spec), []);
}
