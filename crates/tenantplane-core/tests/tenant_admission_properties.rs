//! Properties of the namespace guard: whatever a non-admin's update does to a
//! namespace's owner references and labels, if it passes, the namespace belongs to
//! the same tenant (by owner reference and UID), carries the same tenant label and
//! has the same owners as before; and reordering references alone always passes.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use proptest::prelude::*;
use tenantplane_api::Tenant;
use tenantplane_core::tenancy::owning_tenant;
use tenantplane_core::tenant_admission::{TENANT_LABEL, TenantIdentity, unchanged_identity};

fn tenants() -> Vec<Tenant> {
    ["acme", "beta"]
        .iter()
        .map(|name| {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": {"owners": []},
            }))
            .unwrap()
        })
        .collect()
}

/// References drawn from small pools, so real, forged and foreign ones collide often.
fn reference() -> impl Strategy<Value = OwnerReference> {
    (
        prop::sample::select(vec![
            "tenantplane.io/v1alpha1",
            "tenantplane.io/v2",
            "evil.io/v1",
            "v1",
        ]),
        prop::sample::select(vec!["Tenant", "Namespace"]),
        prop::sample::select(vec!["acme", "beta", "evil-1"]),
        prop::sample::select(vec!["uid-acme", "uid-beta", "forged"]),
    )
        .prop_map(|(api_version, kind, name, uid)| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: None,
        })
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    (
        prop::option::of(prop::sample::select(vec!["acme", "beta"])),
        any::<bool>(),
    )
        .prop_map(|(tenant, other)| {
            let mut labels = BTreeMap::new();
            if let Some(tenant) = tenant {
                labels.insert(TENANT_LABEL.to_owned(), tenant.to_owned());
            }
            if other {
                labels.insert("team".to_owned(), "red".to_owned());
            }
            labels
        })
}

fn member<'a>(refs: &[OwnerReference], tenants: &'a [Tenant]) -> Option<&'a str> {
    owning_tenant(refs, tenants).and_then(|t| t.metadata.name.as_deref())
}

proptest! {
    #[test]
    fn a_passing_update_never_changes_membership_label_or_owners(
        old_refs in prop::collection::vec(reference(), 0..3),
        new_refs in prop::collection::vec(reference(), 0..3),
        old_labels in labels(),
        new_labels in labels(),
    ) {
        let tenants = tenants();
        let old = TenantIdentity::of(Some(&old_refs), Some(&old_labels));
        let new = TenantIdentity::of(Some(&new_refs), Some(&new_labels));
        if unchanged_identity(&old, &new).is_ok() {
            prop_assert_eq!(member(&old_refs, &tenants), member(&new_refs, &tenants));
            prop_assert_eq!(old_labels.get(TENANT_LABEL), new_labels.get(TENANT_LABEL));
            let owners = |refs: &[OwnerReference]| {
                refs.iter().map(|r| (r.kind.clone(), r.name.clone(), r.uid.clone()))
                    .collect::<std::collections::BTreeSet<_>>()
            };
            prop_assert_eq!(owners(&old_refs), owners(&new_refs));
        }
    }

    #[test]
    fn reordering_references_and_other_labels_always_pass(
        refs in prop::collection::vec(reference(), 0..4),
        old_labels in labels(),
        team in any::<bool>(),
    ) {
        let mut reordered = refs.clone();
        reordered.reverse();
        let mut new_labels = old_labels.clone();
        if team {
            new_labels.insert("team".to_owned(), "blue".to_owned());
        } else {
            new_labels.remove("team");
        }
        let old = TenantIdentity::of(Some(&refs), Some(&old_labels));
        let new = TenantIdentity::of(Some(&reordered), Some(&new_labels));
        prop_assert_eq!(unchanged_identity(&old, &new), Ok(()));
    }
}
