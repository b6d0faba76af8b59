use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn target() -> TenantTarget {
    TenantTarget::new("dev", "team-dev").expect("valid names")
}

fn pod(ns: &str, name: &str, configmaps: &[&str]) -> Value {
    let volumes: Vec<Value> = configmaps
        .iter()
        .map(|cm| json!({"name": format!("v-{cm}"), "configMap": {"name": cm}}))
        .collect();
    json!({"metadata": {"namespace": ns, "name": name}, "spec": {"volumes": volumes}})
}

fn cm_key(ns: &str, name: &str) -> DependencyKey {
    DependencyKey {
        kind: DependencyKind::ConfigMap,
        namespace: ns.into(),
        name: name.into(),
    }
}

fn key(ns: &str, name: &str) -> PodKey {
    (ns.into(), name.into())
}

fn configmap(data: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "app", "name": "settings", "uid": "u-1",
                     "resourceVersion": "7", "finalizers": ["tenantplane.io/host-copy"]},
        "data": {"key": data},
    })
}

/// The host copy the engine writes for `tenant`, as the host would show it.
fn host_copy_of(tenant: &Value) -> Value {
    let (_, mut copy) =
        desired_copy(&target(), DependencyKind::ConfigMap, tenant, false).expect("copyable");
    copy["metadata"]["resourceVersion"] = json!("100");
    copy["metadata"]["uid"] = json!("host-uid");
    copy
}

/// What a change to ConfigMap app/settings means, given its host copy.
fn change_of(index: &Dependents, tenant: Option<&Value>, copy: Option<&Value>) -> DependencyChange {
    dependency_change(
        index,
        &target(),
        &cm_key("app", "settings"),
        tenant,
        copy,
        false,
    )
}

#[test]
fn a_dependency_is_used_by_exactly_the_pods_that_name_it() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["shared", "only-a"]));
    index.set_pod(&pod("app", "b", &["shared"]));
    index.set_pod(&pod("other", "c", &["shared"]));
    assert_eq!(
        index.users_of(&cm_key("app", "shared")),
        vec![key("app", "a"), key("app", "b")]
    );
    assert_eq!(
        index.users_of(&cm_key("app", "only-a")),
        vec![key("app", "a")]
    );
    // Same name, other namespace: another dependency.
    assert_eq!(
        index.users_of(&cm_key("other", "shared")),
        vec![key("other", "c")]
    );
    assert!(index.users_of(&cm_key("app", "unknown")).is_empty());
}

#[test]
fn a_pod_that_changes_what_it_uses_leaves_its_old_dependencies() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["old"]));
    index.set_pod(&pod("app", "a", &["new"]));
    assert!(index.users_of(&cm_key("app", "old")).is_empty());
    assert_eq!(index.users_of(&cm_key("app", "new")), vec![key("app", "a")]);
    assert_eq!(
        index.uses_of(&key("app", "a")),
        [cm_key("app", "new")].into_iter().collect()
    );
}

#[test]
fn a_removed_pod_uses_and_waits_for_nothing() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["cm"]));
    index.set_waiting(&key("app", "a"), Some(cm_key("app", "cm")));
    index.remove_pod(&key("app", "a"));
    assert_eq!(index, Dependents::default());
}

#[test]
fn a_pod_waits_for_one_dependency_at_a_time() {
    let mut index = Dependents::default();
    index.set_waiting(&key("app", "a"), Some(cm_key("app", "first")));
    index.set_waiting(&key("app", "a"), Some(cm_key("app", "second")));
    assert!(index.waiting_for(&cm_key("app", "first")).is_empty());
    assert_eq!(
        index.waiting_for(&cm_key("app", "second")),
        vec![key("app", "a")]
    );
    index.set_waiting(&key("app", "a"), None);
    assert!(index.waiting_for(&cm_key("app", "second")).is_empty());
}

#[test]
fn a_pod_without_a_name_is_not_indexed() {
    let mut index = Dependents::default();
    index.set_pod(&json!({"metadata": {"namespace": "app"}, "spec": {}}));
    assert_eq!(index, Dependents::default());
}

#[test]
fn a_changed_dependency_resyncs_the_pods_using_it_when_its_copy_is_out_of_date() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["settings"]));
    index.set_pod(&pod("app", "b", &["settings"]));
    index.set_pod(&pod("app", "c", &["unrelated"]));
    let copy = host_copy_of(&configmap("old"));
    let change = change_of(&index, Some(&configmap("new")), Some(&copy));
    assert_eq!(
        change,
        DependencyChange::Resync(vec![key("app", "a"), key("app", "b")])
    );
}

#[test]
fn a_change_its_copy_already_has_resyncs_nothing() {
    // Such as tenantplane's own finalizer write: the copy does not change.
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["settings"]));
    let mut without_finalizer = configmap("same");
    without_finalizer["metadata"]["finalizers"] = json!([]);
    let copy = host_copy_of(&without_finalizer);
    let mut with_finalizer = configmap("same");
    with_finalizer["metadata"]["resourceVersion"] = json!("8");
    let change = change_of(&index, Some(&with_finalizer), Some(&copy));
    assert_eq!(change, DependencyChange::Nothing);
}

#[test]
fn a_missing_copy_resyncs_only_the_pods_waiting_for_it() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "syncing", &["settings"]));
    index.set_pod(&pod("app", "waiting", &["settings"]));
    index.set_waiting(&key("app", "waiting"), Some(cm_key("app", "settings")));
    let change = change_of(&index, Some(&configmap("v")), None);
    assert_eq!(
        change,
        DependencyChange::Resync(vec![key("app", "waiting")])
    );
    index.set_waiting(&key("app", "waiting"), None);
    let change = change_of(&index, Some(&configmap("v")), None);
    assert_eq!(change, DependencyChange::Nothing);
}

#[test]
fn a_dependency_being_deleted_is_left_to_its_finalizer() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["settings"]));
    index.set_waiting(&key("app", "a"), Some(cm_key("app", "settings")));
    let mut deleting = configmap("new");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-03T00:00:00Z");
    let copy = host_copy_of(&configmap("old"));
    let change = change_of(&index, Some(&deleting), Some(&copy));
    assert_eq!(change, DependencyChange::Nothing);
}

#[test]
fn a_foreign_host_object_under_the_copy_name_is_never_a_reason_to_write() {
    let mut index = Dependents::default();
    index.set_pod(&pod("app", "a", &["settings"]));
    let foreign = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "team-dev", "name": "settings-x-app-x-dev", "resourceVersion": "1"},
        "data": {"key": "theirs"},
    });
    let change = change_of(&index, Some(&configmap("new")), Some(&foreign));
    assert_eq!(change, DependencyChange::Nothing);
}

#[test]
fn a_copy_for_pods_is_marked_so_and_a_synced_kinds_copy_is_not() {
    let (_, for_pods) =
        desired_copy(&target(), DependencyKind::ConfigMap, &configmap("v"), false).expect("copy");
    assert_eq!(
        for_pods.pointer("/metadata/annotations/tenantplane.io~1pod-dependency"),
        Some(&json!("true"))
    );
    let (_, synced) =
        desired_copy(&target(), DependencyKind::ConfigMap, &configmap("v"), true).expect("copy");
    assert!(
        synced
            .pointer("/metadata/annotations/tenantplane.io~1pod-dependency")
            .is_none()
    );
    // The hash covers the content: other data, other hash.
    let (_, other) =
        desired_copy(&target(), DependencyKind::ConfigMap, &configmap("w"), false).expect("copy");
    assert_ne!(
        for_pods.pointer("/metadata/annotations"),
        other.pointer("/metadata/annotations")
    );
}

#[test]
fn an_unbound_claim_cannot_be_copied_and_says_why() {
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"namespace": "app", "name": "data", "uid": "u"},
        "spec": {}, "status": {"phase": "Pending"},
    });
    let err = desired_copy(
        &target(),
        DependencyKind::PersistentVolumeClaim,
        &claim,
        false,
    )
    .expect_err("not bound");
    assert!(!err.is_empty());
}

proptest! {
    /// After any sequence of Pod updates and removals, the index answers exactly
    /// what a recount over the Pods that remain would.
    #[test]
    fn the_index_matches_a_recount_of_the_remaining_pods(
        ops in proptest::collection::vec((0usize..4, proptest::option::of(proptest::collection::vec(0usize..4, 0..3))), 0..40)
    ) {
        let names = ["p0", "p1", "p2", "p3"];
        let cms = ["c0", "c1", "c2", "c3"];
        let mut index = Dependents::default();
        let mut model: BTreeMap<String, Value> = BTreeMap::new();
        for (p, uses) in ops {
            match uses {
                Some(uses) => {
                    let used: Vec<&str> = uses.iter().map(|i| cms[*i]).collect();
                    let object = pod("app", names[p], &used);
                    index.set_pod(&object);
                    model.insert(names[p].to_owned(), object);
                }
                None => {
                    index.remove_pod(&key("app", names[p]));
                    model.remove(names[p]);
                }
            }
        }
        for cm in cms {
            let expected: Vec<PodKey> = model
                .iter()
                .filter(|(_, object)| needed_dependencies(std::iter::once(*object)).contains(&cm_key("app", cm)))
                .map(|(name, _)| key("app", name))
                .collect();
            prop_assert_eq!(index.users_of(&cm_key("app", cm)), expected);
        }
    }
}
