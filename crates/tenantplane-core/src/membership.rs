//! The index of namespace tenancy: member namespaces keyed by the UID of the Tenant
//! their owner reference names, fed by namespace watch events. Pure, so it is
//! tested by applying namespaces and reading the answers.
//!
//! The key is the owner reference's UID, never a label: a label only feeds the
//! `labelled` side, which reports namespaces that claim a tenant without being
//! owned by it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::metadata::LABEL_TENANT;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Entry {
    tenant_uids: Vec<String>,
    label: Option<String>,
}

/// Namespaces by owning Tenant UID and by tenant label.
#[derive(Clone, Debug, Default)]
pub struct MembershipIndex {
    namespaces: BTreeMap<String, Entry>,
    by_uid: BTreeMap<String, BTreeSet<String>>,
    by_label: BTreeMap<String, BTreeSet<String>>,
}

/// The UIDs of the Tenants that `references` name (kind `Tenant` in
/// `tenantplane.io`, any version).
pub fn tenant_uids(references: &[OwnerReference]) -> Vec<String> {
    let mut uids: Vec<String> = references
        .iter()
        .filter(|r| {
            r.kind == "Tenant"
                && r.api_version.split_once('/').map(|(g, _)| g) == Some(tenantplane_api::GROUP)
        })
        .map(|r| r.uid.clone())
        .collect();
    uids.sort();
    uids.dedup();
    uids
}

impl MembershipIndex {
    /// Records a namespace as it now is (created or changed).
    pub fn apply(
        &mut self,
        namespace: &str,
        references: &[OwnerReference],
        labels: &BTreeMap<String, String>,
    ) {
        self.delete(namespace);
        let entry = Entry {
            tenant_uids: tenant_uids(references),
            label: labels.get(LABEL_TENANT).cloned(),
        };
        for uid in &entry.tenant_uids {
            self.by_uid
                .entry(uid.clone())
                .or_default()
                .insert(namespace.to_owned());
        }
        if let Some(label) = &entry.label {
            self.by_label
                .entry(label.clone())
                .or_default()
                .insert(namespace.to_owned());
        }
        self.namespaces.insert(namespace.to_owned(), entry);
    }

    /// Forgets a deleted namespace.
    pub fn delete(&mut self, namespace: &str) {
        let Some(old) = self.namespaces.remove(namespace) else {
            return;
        };
        for uid in old.tenant_uids {
            remove(&mut self.by_uid, &uid, namespace);
        }
        if let Some(label) = old.label {
            remove(&mut self.by_label, &label, namespace);
        }
    }

    /// Namespaces whose owner references name the Tenant with this UID, sorted.
    pub fn owned_by(&self, tenant_uid: &str) -> Vec<String> {
        self.by_uid
            .get(tenant_uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Namespaces labelled for `tenant` but not owned by `tenant_uid`: forged or
    /// stale labels, never members.
    pub fn only_labelled(&self, tenant: &str, tenant_uid: &str) -> Vec<String> {
        let owned = self.by_uid.get(tenant_uid);
        self.by_label
            .get(tenant)
            .into_iter()
            .flatten()
            .filter(|ns| owned.is_none_or(|set| !set.contains(*ns)))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }
}

fn remove(map: &mut BTreeMap<String, BTreeSet<String>>, key: &str, namespace: &str) {
    if let Some(set) = map.get_mut(key) {
        set.remove(namespace);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, api_version: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    fn tenant_ref(name: &str, uid: &str) -> OwnerReference {
        reference("Tenant", "tenantplane.io/v1alpha1", name, uid)
    }

    fn label(tenant: &str) -> BTreeMap<String, String> {
        [(LABEL_TENANT.to_owned(), tenant.to_owned())].into()
    }

    #[test]
    fn members_are_keyed_by_the_owner_reference_uid_not_the_label() {
        let mut index = MembershipIndex::default();
        index.apply("a-dev", &[tenant_ref("a", "uid-a")], &label("a"));
        index.apply("a-prod", &[tenant_ref("a", "uid-a")], &BTreeMap::new());
        // Labelled only: not a member.
        index.apply("forged", &[], &label("a"));
        // Another group's or kind's reference with the same UID: not a member.
        index.apply(
            "lookalike",
            &[
                reference("Tenant", "evil.io/v1", "a", "uid-a"),
                reference("ConfigMap", "v1", "a", "uid-a"),
            ],
            &BTreeMap::new(),
        );
        // An old Tenant of the same name (another UID): not this one's.
        index.apply("stale", &[tenant_ref("a", "uid-old")], &label("a"));
        assert_eq!(index.owned_by("uid-a"), ["a-dev", "a-prod"]);
        assert_eq!(index.only_labelled("a", "uid-a"), ["forged", "stale"]);
        assert_eq!(index.owned_by("uid-old"), ["stale"]);
        assert_eq!(index.len(), 5);
    }

    #[test]
    fn changes_and_deletions_move_namespaces_between_keys() {
        let mut index = MembershipIndex::default();
        index.apply("ns", &[tenant_ref("a", "uid-a")], &label("a"));
        index.apply("ns", &[tenant_ref("b", "uid-b")], &label("b"));
        assert!(index.owned_by("uid-a").is_empty());
        assert_eq!(index.owned_by("uid-b"), ["ns"]);
        assert!(index.only_labelled("a", "uid-a").is_empty());
        index.delete("ns");
        index.delete("never-seen");
        assert!(index.owned_by("uid-b").is_empty());
        assert!(index.is_empty());
        assert!(index.by_uid.is_empty() && index.by_label.is_empty());
    }
}
