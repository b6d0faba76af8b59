//! Property tests of the pure Pod path: every reference is rewritten, no tenant
//! name is left where a reference was, and hostile input never panics.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};
use tenantplane_core::pods::host_pod::dependency_host_name;
use tenantplane_core::pods::refcount::needed_dependencies;
use tenantplane_core::pods::status::{lost_pod_status, pod_status_update};
use tenantplane_core::pods::storage::{host_pv, host_pvc};
use tenantplane_core::pods::{
    HostPodContext, PodControls, TenantApiEndpoint, pod_references, to_host_pod,
};
use tenantplane_core::transform::TenantTarget;

/// A DNS-1123 label of 1..=20 characters, biased towards `-x-`.
fn name() -> impl Strategy<Value = String> {
    "[a-z0-9x]([-a-z0-9x.]{0,18}[a-z0-9x])?".prop_filter("no empty label", |s| {
        !s.contains("..") && !s.contains(".-") && !s.contains("-.")
    })
}

/// Where a reference may sit: a JSON fragment builder for each type.
fn reference(kind: u8, name: &str, optional: bool) -> (Value, Option<Value>, Option<Value>) {
    // (volume, env entry, envFrom entry)
    match kind % 9 {
        0 => (
            json!({"name": "v", "configMap": {"name": name, "optional": optional}}),
            None,
            None,
        ),
        1 => (
            json!({"name": "v", "secret": {"secretName": name, "optional": optional}}),
            None,
            None,
        ),
        2 => (
            json!({"name": "v", "persistentVolumeClaim": {"claimName": name}}),
            None,
            None,
        ),
        3 => (
            json!({"name": "v", "projected": {"sources": [{"configMap": {"name": name}}, {"secret": {"name": name}}]}}),
            None,
            None,
        ),
        4 => (
            json!({"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": name}}}),
            None,
            None,
        ),
        5 => (
            json!({"name": "v", "emptyDir": {}}),
            Some(
                json!({"name": "E", "valueFrom": {"configMapKeyRef": {"name": name, "key": "k"}}}),
            ),
            None,
        ),
        6 => (
            json!({"name": "v", "emptyDir": {}}),
            Some(json!({"name": "E", "valueFrom": {"secretKeyRef": {"name": name, "key": "k"}}})),
            None,
        ),
        7 => (
            json!({"name": "v", "emptyDir": {}}),
            None,
            Some(json!({"configMapRef": {"name": name}})),
        ),
        _ => (
            json!({"name": "v", "emptyDir": {}}),
            None,
            Some(json!({"secretRef": {"name": name}})),
        ),
    }
}

fn pod(refs: &[(u8, String, bool, u8)], pull: &[String]) -> Value {
    let mut volumes = Vec::new();
    let mut lists = [Vec::new(), Vec::new(), Vec::new()];
    for (i, (kind, name, optional, list)) in refs.iter().enumerate() {
        let (mut volume, env, env_from) = reference(*kind, name, *optional);
        volume["name"] = json!(format!("v{i}"));
        volumes.push(volume);
        let mut container = json!({"name": format!("c{i}"), "image": "busybox"});
        if let Some(env) = env {
            container["env"] = json!([env]);
        }
        if let Some(env_from) = env_from {
            container["envFrom"] = json!([env_from]);
        }
        lists[usize::from(*list % 3)].push(container);
    }
    let pull: Vec<Value> = pull.iter().map(|n| json!({"name": n})).collect();
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
           "spec": {"volumes": volumes, "containers": lists[0], "initContainers": lists[1],
                    "ephemeralContainers": lists[2], "imagePullSecrets": pull}})
}

fn target() -> TenantTarget {
    TenantTarget::new("dev", "team-dev").unwrap()
}

fn ctx() -> HostPodContext {
    HostPodContext {
        controls: PodControls {
            runtime_class_name: Some("gvisor".into()),
            block_host_path_volumes: true,
            block_privileged_containers: true,
            rules: None,
        },
        api_endpoint: TenantApiEndpoint::from_url("https://10.0.0.1:6443"),
        dns: Default::default(),
    }
}

/// Arbitrary JSON, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z/._-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "spec",
                    "volumes",
                    "containers",
                    "env",
                    "valueFrom",
                    "secretKeyRef",
                    "name",
                    "configMap",
                    "projected",
                    "sources",
                    "serviceAccountToken",
                    "metadata",
                    "namespace",
                    "status",
                    "phase",
                    "hostPath",
                    "securityContext",
                    "privileged",
                    "csi",
                    "nodePublishSecretRef",
                    "envFrom"
                ])
                .prop_map(str::to_owned),
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_reference_is_rewritten_and_no_tenant_name_is_left(
        refs in prop::collection::vec((any::<u8>(), name(), any::<bool>(), any::<u8>()), 0..8),
        pull in prop::collection::vec(name(), 0..3),
    ) {
        let tenant_pod = pod(&refs, &pull);
        let host = to_host_pod(&target(), &tenant_pod, &ctx()).unwrap();
        let found = pod_references(&tenant_pod);
        prop_assert_eq!(found.len(), host.references.len());
        let expected_refs: usize = refs.iter().map(|(k, ..)| if k % 9 == 3 { 2 } else { 1 }).sum::<usize>() + pull.len();
        prop_assert_eq!(found.len(), expected_refs);
        for r in &found {
            if r.pointer.starts_with("/spec/ephemeralContainers") {
                continue; // not on the host Pod at all
            }
            let at = host.object.pointer(&r.pointer).and_then(Value::as_str);
            let want = dependency_host_name(&target(), "shop", &r.name);
            prop_assert_eq!(at, Some(want.as_str()), "{}", r.field);
        }
        prop_assert!(host.object["spec"].get("ephemeralContainers").is_none());
        prop_assert_eq!(&host.object["spec"]["automountServiceAccountToken"], &json!(false));
        prop_assert_eq!(&host.object["spec"]["runtimeClassName"], &json!("gvisor"));
        // Every dependency a Pod holds is counted, whatever list it sits in.
        let needed = needed_dependencies([&tenant_pod]);
        for r in &found {
            prop_assert!(needed.iter().any(|k| k.kind == r.kind && k.name == r.name && k.namespace == "shop"));
        }
    }

    #[test]
    fn hostile_input_never_panics(value in any_json(), other in any_json()) {
        let _ = pod_references(&value);
        let _ = to_host_pod(&target(), &value, &ctx());
        let _ = to_host_pod(&target(), &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"}, "spec": value.clone()}), &ctx());
        let _ = pod_status_update(Some(&value), Some(&other));
        let _ = lost_pod_status(Some(&value), "x");
        let _ = host_pvc(&target(), &value);
        let _ = host_pv(&target(), &value, "claim");
        let _ = needed_dependencies([&value, &other]);
    }

    #[test]
    fn status_copy_back_converges_in_one_write(tenant in any_json(), host in any_json()) {
        if let Some(update) = pod_status_update(Some(&tenant), Some(&host)) {
            prop_assert_eq!(pod_status_update(Some(&update), Some(&host)), None);
        }
    }
}
