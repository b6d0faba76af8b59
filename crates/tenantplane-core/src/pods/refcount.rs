//! Reference counting of dependency copies: a ConfigMap or Secret copied for Pods
//! stays on the host while a synced Pod uses it, and goes when none does (unless
//! its kind is synced for its own sake).

use std::collections::BTreeSet;

use serde_json::Value;

use super::refs::{DependencyKind, pod_references};

/// On a host copy made because a Pod uses it (and only then): what removes it
/// when no Pod does.
pub const ANNOTATION_POD_DEPENDENCY: &str = "tenantplane.io/pod-dependency";

/// A dependency of some Pod: kind, virtual namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DependencyKey {
    pub kind: DependencyKind,
    pub namespace: String,
    pub name: String,
}

/// Every dependency the given tenant Pods use. A Pod that is being deleted still
/// holds its dependencies until its host Pod is gone, so it counts too.
pub fn needed_dependencies<'a>(
    pods: impl IntoIterator<Item = &'a Value>,
) -> BTreeSet<DependencyKey> {
    let mut needed = BTreeSet::new();
    for pod in pods {
        let Some(namespace) = pod.pointer("/metadata/namespace").and_then(Value::as_str) else {
            continue;
        };
        for r in pod_references(pod) {
            needed.insert(DependencyKey {
                kind: r.kind,
                namespace: namespace.to_owned(),
                name: r.name,
            });
        }
    }
    needed
}

/// Whether a host copy of `key` may be removed: it was made for Pods (it carries
/// [`ANNOTATION_POD_DEPENDENCY`]), no Pod needs it, and its kind is not synced.
pub fn is_collectable(
    key: &DependencyKey,
    host_copy: &Value,
    needed: &BTreeSet<DependencyKey>,
    kind_synced: bool,
) -> bool {
    let made_for_pods = host_copy
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_POD_DEPENDENCY))
        .is_some();
    made_for_pods && !kind_synced && !needed.contains(key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, cm: &str) -> Value {
        json!({"metadata": {"namespace": ns}, "spec": {"volumes": [{"name": "v", "configMap": {"name": cm}}]}})
    }

    fn key(ns: &str, name: &str) -> DependencyKey {
        DependencyKey {
            kind: DependencyKind::ConfigMap,
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_copy_goes_when_the_last_pod_using_it_goes() {
        let copy = json!({"metadata": {"annotations": {ANNOTATION_POD_DEPENDENCY: "true"}}});
        let both = [pod("a", "shared"), pod("a", "shared"), pod("b", "other")];
        let needed = needed_dependencies(&both);
        assert!(!is_collectable(&key("a", "shared"), &copy, &needed, false));
        let one_left = needed_dependencies(&both[1..]);
        assert!(!is_collectable(
            &key("a", "shared"),
            &copy,
            &one_left,
            false
        ));
        let none = needed_dependencies(&both[2..]);
        assert!(is_collectable(&key("a", "shared"), &copy, &none, false));
        // Same name in another namespace is another dependency.
        assert!(!is_collectable(&key("b", "other"), &copy, &none, false));
    }

    #[test]
    fn synced_kinds_and_copies_not_made_for_pods_stay() {
        let none = BTreeSet::new();
        let for_pods = json!({"metadata": {"annotations": {ANNOTATION_POD_DEPENDENCY: "true"}}});
        assert!(!is_collectable(&key("a", "x"), &for_pods, &none, true));
        assert!(!is_collectable(
            &key("a", "x"),
            &json!({"metadata": {}}),
            &none,
            false
        ));
    }
}
