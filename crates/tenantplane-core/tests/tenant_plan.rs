//! Property tests of the namespace-tenant plan: stable short names, and a metadata
//! patch that converges in one step and never touches keys it must not.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Value, json};
use tenantplane_api::{OwnerKind, Tenant, TenantOwner, TenantSpec};
use tenantplane_core::metadata::{LABEL_TENANT, is_reserved_key};
use tenantplane_core::tenant_plan::{
    NAMESPACE_NAME_LABEL, is_tenant_child, namespace_metadata_patch, plan_member,
};

fn tenant(owners: Vec<TenantOwner>, labels: BTreeMap<String, String>) -> Tenant {
    let spec: TenantSpec = serde_json::from_value(json!({"owners": []})).unwrap();
    let mut t = Tenant::new("acme", TenantSpec { owners, ..spec });
    t.metadata.uid = Some("uid-acme".into());
    t.spec.namespace_options.additional_metadata.labels = labels;
    t
}

fn owner() -> impl Strategy<Value = TenantOwner> {
    (
        prop::sample::select(vec![OwnerKind::User, OwnerKind::Group]),
        "[a-z]{1,8}(@[a-z]{1,5})?",
        prop::collection::vec("[a-z-]{1,70}", 1..4),
    )
        .prop_map(|(kind, name, cluster_roles)| TenantOwner {
            kind,
            name,
            cluster_roles,
        })
}

/// Label keys, some of them ones additionalMetadata may never set.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        "example.com/[a-z]{1,6}",
        Just("tenantplane.io/tenant".to_owned()),
        Just("tenantplane.io/managed-labels".to_owned()),
        Just("app.kubernetes.io/managed-by".to_owned()),
        Just(NAMESPACE_NAME_LABEL.to_owned()),
    ]
}

fn apply(patch: &Value, field: &str, map: &mut BTreeMap<String, String>) {
    if let Some(Value::Object(changes)) = patch["metadata"].get(field) {
        for (k, v) in changes {
            match v.as_str() {
                Some(s) => map.insert(k.clone(), s.to_owned()),
                None => map.remove(k),
            };
        }
    }
}

proptest! {
    #[test]
    fn role_binding_names_are_short_stable_and_one_per_owner_and_role(
        owners in prop::collection::vec(owner(), 1..6),
    ) {
        let t = tenant(owners.clone(), BTreeMap::new());
        let plan = plan_member(&t, "acme-dev", None).unwrap();
        let pairs: BTreeSet<(String, String, String)> = owners
            .iter()
            .flat_map(|o| o.cluster_roles.iter().map(move |r| (format!("{:?}", o.kind), o.name.clone(), r.clone())))
            .collect();
        prop_assert_eq!(plan.objects.role_bindings.len(), pairs.len());
        for (name, binding) in &plan.objects.role_bindings {
            prop_assert!(name.len() <= 63, "{}", name);
            prop_assert!(is_tenant_child(binding.metadata.labels.as_ref().unwrap(), "acme"));
        }
        let mut reversed = t.clone();
        reversed.spec.owners.reverse();
        prop_assert_eq!(plan_member(&reversed, "acme-dev", None).unwrap(), plan);
    }

    #[test]
    fn the_metadata_patch_converges_and_spares_protected_keys(
        wanted in prop::collection::btree_map(key(), "[a-z]{0,4}", 0..6),
        later in prop::collection::btree_map(key(), "[a-z]{0,4}", 0..6),
        live in prop::collection::btree_map(key(), "[a-z]{0,4}", 0..6),
    ) {
        let mut labels = live.clone();
        labels.insert(NAMESPACE_NAME_LABEL.to_owned(), "acme-dev".to_owned());
        let mut annotations = BTreeMap::new();
        for spec in [wanted, later] {
            let plan = plan_member(&tenant(vec![], spec.clone()), "acme-dev", None).unwrap();
            let before = labels.clone();
            if let Some(patch) = namespace_metadata_patch(&plan.metadata, &labels, &annotations) {
                apply(&patch, "labels", &mut labels);
                apply(&patch, "annotations", &mut annotations);
            }
            // One patch is enough: a second pass changes nothing.
            prop_assert_eq!(namespace_metadata_patch(&plan.metadata, &labels, &annotations), None);
            prop_assert_eq!(labels.get(LABEL_TENANT).map(String::as_str), Some("acme"));
            prop_assert_eq!(labels.get(NAMESPACE_NAME_LABEL).map(String::as_str), Some("acme-dev"));
            for (k, v) in &before {
                if is_reserved_key(k) && k != LABEL_TENANT {
                    prop_assert_eq!(labels.get(k), Some(v), "reserved {} changed", k);
                }
            }
            for (k, v) in &spec {
                if !is_reserved_key(k) && k != NAMESPACE_NAME_LABEL {
                    prop_assert_eq!(labels.get(k), Some(v));
                }
            }
        }
    }
}
