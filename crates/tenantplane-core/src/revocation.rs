//! What a Tenant takes back from namespaces that are no longer its members, pure.
//!
//! A namespace leaves a Tenant when an admin moves it to another Tenant or releases
//! it (owner reference and label cleared). Every reconcile of the Tenant lists its
//! children cluster-wide and deletes those outside its members ([`stale_children`]),
//! so its owners lose access within seconds and also after a controller restart.
//! A released namespace's metadata is cleaned by the Tenant it left
//! ([`released_metadata_patch`]); a moved one's by the Tenant it joined, whose
//! metadata patch removes the recorded keys it does not want.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use crate::membership::tenant_uids;
use crate::metadata::LABEL_TENANT;
use crate::tenant_plan::{
    ANNOTATION_MANAGED_ANNOTATIONS, ANNOTATION_MANAGED_LABELS, is_tenant_child, release_patch,
};

/// One live object a Tenant may have put somewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveChild<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// The live objects labelled as `tenant`'s that sit in a namespace outside
/// `members`: what its owners must lose. Anything not labelled as the tenant's
/// (all three labels) is never chosen.
pub fn stale_children<'a>(
    tenant: &str,
    members: &BTreeSet<String>,
    live: impl IntoIterator<Item = LiveChild<'a>>,
) -> Vec<LiveChild<'a>> {
    live.into_iter()
        .filter(|c| is_tenant_child(c.labels, tenant) && !members.contains(c.namespace))
        .collect()
}

/// The merge patch that removes what `tenant` put on a namespace it was released
/// from: its tenant label (only if it names `tenant`) and the keys tenantplane
/// recorded putting there, with the bookkeeping annotations. `None` while the
/// namespace has any Tenant owner reference (a member of another Tenant: that
/// Tenant's reconcile owns its metadata) or holds nothing to remove.
///
/// `formerly` says the membership index saw the namespace name `tenant` before its
/// last change. Without that, a namespace is only cleaned when it is labelled for
/// `tenant` and carries tenantplane's bookkeeping (so it was reconciled as a
/// member): a namespace someone merely labelled is left alone. The caller adds
/// `metadata.resourceVersion`, so a concurrent adoption makes the patch fail.
pub fn released_metadata_patch(
    tenant: &str,
    references: &[OwnerReference],
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    formerly: bool,
) -> Option<Value> {
    if !tenant_uids(references).is_empty() {
        return None;
    }
    let labelled = labels.get(LABEL_TENANT).map(String::as_str) == Some(tenant);
    let recorded = annotations.contains_key(ANNOTATION_MANAGED_LABELS)
        || annotations.contains_key(ANNOTATION_MANAGED_ANNOTATIONS);
    if !(formerly || (labelled && recorded)) {
        return None;
    }
    let mut labels = labels.clone();
    if !labelled {
        // Another tenant's claim (a label alone is no membership) is not ours to drop.
        labels.remove(LABEL_TENANT);
    }
    // No owner references are passed: none is removed.
    release_patch(&[], "", &labels, annotations)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::metadata::{LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
    use crate::tenant_plan::child_labels;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn tenant_ref(name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "tenantplane.io/v1alpha1".into(),
            kind: "Tenant".into(),
            name: name.into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn children_outside_the_members_are_stale_and_nothing_else_is() {
        let t1 = child_labels("t1");
        let t2 = child_labels("t2");
        // Two of the three labels: not a child, whatever its name.
        let partial = map(&[(LABEL_MANAGED_BY, MANAGED_BY_VALUE), (LABEL_TENANT, "t1")]);
        let forged_component = map(&[
            (LABEL_MANAGED_BY, MANAGED_BY_VALUE),
            (LABEL_TENANT, "t1"),
            (LABEL_COMPONENT, "cluster"),
        ]);
        let live = [
            LiveChild {
                namespace: "a",
                name: "kept",
                labels: &t1,
            },
            LiveChild {
                namespace: "x",
                name: "moved",
                labels: &t1,
            },
            LiveChild {
                namespace: "x",
                name: "new-owner",
                labels: &t2,
            },
            LiveChild {
                namespace: "x",
                name: "someone",
                labels: &partial,
            },
            LiveChild {
                namespace: "x",
                name: "other",
                labels: &forged_component,
            },
        ];
        let members: BTreeSet<String> = ["a".to_owned()].into();
        let stale = stale_children("t1", &members, live);
        assert_eq!(stale, [live[1]]);
        // No members at all: every child of the tenant goes, no one else's.
        let stale = stale_children("t1", &BTreeSet::new(), live);
        assert_eq!(stale, [live[0], live[1]]);
    }

    fn reconciled(tenant: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        (
            map(&[
                (LABEL_TENANT, tenant),
                ("team", "a"),
                ("kubernetes.io/metadata.name", "x"),
                ("keep", "me"),
            ]),
            map(&[
                (ANNOTATION_MANAGED_LABELS, "team,tenantplane.io/tenant"),
                (ANNOTATION_MANAGED_ANNOTATIONS, "note"),
                ("note", "n"),
                ("theirs", "t"),
            ]),
        )
    }

    #[test]
    fn a_released_namespace_loses_the_tenants_metadata_only() {
        let (labels, annotations) = reconciled("t1");
        let patch = released_metadata_patch("t1", &[], &labels, &annotations, false).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {
                "labels": {"team": null, "tenantplane.io/tenant": null},
                "annotations": {
                    "note": null,
                    "tenantplane.io/managed-labels": null,
                    "tenantplane.io/managed-annotations": null,
                },
            }})
        );
        // Remembered by the index, with the label already cleared.
        let mut unlabelled = labels.clone();
        unlabelled.remove(LABEL_TENANT);
        let patch = released_metadata_patch("t1", &[], &unlabelled, &annotations, true).unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({"team": null}));
    }

    #[test]
    fn members_of_any_tenant_and_mere_claims_are_left_alone() {
        let (labels, annotations) = reconciled("t1");
        // Still (or again) owned by a Tenant: its reconcile owns the metadata, even
        // if the reference is stale or names another Tenant.
        for owner in [tenant_ref("t1", "uid-1"), tenant_ref("t2", "uid-2")] {
            assert_eq!(
                released_metadata_patch("t1", &[owner], &labels, &annotations, true),
                None
            );
        }
        // Labelled only, never reconciled (no bookkeeping), not remembered: a forged
        // or hand-made label is not touched.
        let forged = map(&[(LABEL_TENANT, "t1")]);
        assert_eq!(
            released_metadata_patch("t1", &[], &forged, &BTreeMap::new(), false),
            None
        );
        // Labelled for another tenant and not remembered as t1's: not t1's business.
        let (t3_labels, t3_annotations) = reconciled("t3");
        assert_eq!(
            released_metadata_patch("t1", &[], &t3_labels, &t3_annotations, false),
            None
        );
        // Remembered as t1's but now labelled for t3: t1's keys go, t3's label stays.
        let patch = released_metadata_patch("t1", &[], &t3_labels, &t3_annotations, true).unwrap();
        assert_eq!(patch["metadata"]["labels"], json!({"team": null}));
        // Nothing left to remove.
        assert_eq!(
            released_metadata_patch("t1", &[], &map(&[("keep", "me")]), &BTreeMap::new(), true),
            None
        );
    }
}
