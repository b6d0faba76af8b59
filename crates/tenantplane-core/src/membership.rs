//! The index of namespace tenancy: member namespaces keyed by the UID of the Tenant
//! their owner reference names, fed by namespace watch events. Pure, so it is
//! tested by applying namespaces and reading the answers.
//!
//! The key is the owner reference's UID, never a label: a label only feeds the
//! `labelled` side, which reports namespaces that claim a tenant without being
//! owned by it.
//!
//! Each entry also remembers the Tenant names of the namespace's previous
//! membership, so a move or a release wakes the Tenant it left (which must revoke
//! what it put there), not only the one it now names.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::metadata::LABEL_TENANT;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Entry {
    tenant_uids: Vec<String>,
    label: Option<String>,
    /// The Tenant names the owner references and the label give, sorted.
    names: Vec<String>,
    /// `names` before the last change of them; kept across changes that leave
    /// them as they are, forgotten on a relist.
    previous: Vec<String>,
}

/// Namespaces by owning Tenant UID and by tenant label.
#[derive(Clone, Debug, Default)]
pub struct MembershipIndex {
    namespaces: BTreeMap<String, Entry>,
    by_uid: BTreeMap<String, BTreeSet<String>>,
    by_label: BTreeMap<String, BTreeSet<String>>,
    by_previous: BTreeMap<String, BTreeSet<String>>,
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

/// The Tenant names a namespace's owner references (kind `Tenant` in
/// `tenantplane.io`) and its tenant label give, sorted: claims, not membership.
pub fn tenant_names(
    references: &[OwnerReference],
    labels: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut names: Vec<String> = references
        .iter()
        .filter(|r| {
            r.kind == "Tenant"
                && r.api_version.split_once('/').map(|(g, _)| g) == Some(tenantplane_api::GROUP)
        })
        .map(|r| r.name.clone())
        .chain(labels.get(LABEL_TENANT).cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

impl MembershipIndex {
    /// Records a namespace as it now is (created or changed).
    pub fn apply(
        &mut self,
        namespace: &str,
        references: &[OwnerReference],
        labels: &BTreeMap<String, String>,
    ) {
        let names = tenant_names(references, labels);
        let previous = match self.namespaces.get(namespace) {
            Some(old) if old.names != names => old.names.clone(),
            Some(old) => old.previous.clone(),
            None => Vec::new(),
        };
        self.delete(namespace);
        let entry = Entry {
            tenant_uids: tenant_uids(references),
            label: labels.get(LABEL_TENANT).cloned(),
            names,
            previous,
        };
        for name in &entry.previous {
            self.by_previous
                .entry(name.clone())
                .or_default()
                .insert(namespace.to_owned());
        }
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
        for name in old.previous {
            remove(&mut self.by_previous, &name, namespace);
        }
    }

    /// The Tenants an event of `namespace` concerns: those it names now and those
    /// it named before its last membership change, sorted.
    pub fn tenants_to_wake(&self, namespace: &str) -> Vec<String> {
        let Some(entry) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entry.names.iter().chain(&entry.previous).cloned().collect();
        names.sort();
        names.dedup();
        names
    }

    /// The Tenants `namespace` names now (owner references and label), sorted.
    pub fn names_now(&self, namespace: &str) -> Vec<String> {
        self.namespaces
            .get(namespace)
            .map(|e| e.names.clone())
            .unwrap_or_default()
    }

    /// Namespaces that named `tenant` (owner reference or label) before their last
    /// membership change and no longer do, sorted.
    pub fn formerly_named(&self, tenant: &str) -> Vec<String> {
        self.by_previous
            .get(tenant)
            .into_iter()
            .flatten()
            .filter(|ns| {
                self.namespaces
                    .get(*ns)
                    .is_some_and(|e| !e.names.iter().any(|n| n == tenant))
            })
            .cloned()
            .collect()
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
        assert!(index.by_previous.is_empty());
    }

    #[test]
    fn a_move_wakes_the_tenant_left_and_the_one_joined() {
        let mut index = MembershipIndex::default();
        index.apply("x", &[tenant_ref("t1", "uid-1")], &label("t1"));
        assert_eq!(index.tenants_to_wake("x"), ["t1"]);
        // The admin moves x: owner reference and label now name t2.
        index.apply("x", &[tenant_ref("t2", "uid-2")], &label("t2"));
        assert_eq!(index.tenants_to_wake("x"), ["t1", "t2"]);
        assert_eq!(index.names_now("x"), ["t2"]);
        assert_eq!(index.formerly_named("t1"), ["x"]);
        assert!(index.formerly_named("t2").is_empty());
        // A later change that leaves the names alone keeps the memory.
        let mut labels = label("t2");
        labels.insert("team".into(), "b".into());
        index.apply("x", &[tenant_ref("t2", "uid-2")], &labels);
        assert_eq!(index.tenants_to_wake("x"), ["t1", "t2"]);
        // The next change of names replaces it.
        index.apply("x", &[], &BTreeMap::new());
        assert_eq!(index.tenants_to_wake("x"), ["t2"]);
        assert_eq!(index.formerly_named("t2"), ["x"]);
        assert!(index.formerly_named("t1").is_empty());
        index.delete("x");
        assert!(index.tenants_to_wake("x").is_empty());
        assert!(index.by_previous.is_empty());
    }

    #[test]
    fn a_release_remembers_the_tenant_and_a_forged_label_is_a_name_too() {
        let mut index = MembershipIndex::default();
        index.apply("x", &[tenant_ref("t1", "uid-1")], &label("t1"));
        // Released: owner reference and label cleared.
        index.apply("x", &[], &BTreeMap::new());
        assert_eq!(index.tenants_to_wake("x"), ["t1"]);
        assert_eq!(index.formerly_named("t1"), ["x"]);
        // A namespace claimed by a label only wakes that tenant (which ignores it).
        index.apply("forged", &[], &label("t1"));
        assert_eq!(index.tenants_to_wake("forged"), ["t1"]);
        // Only owner references of kind Tenant in tenantplane.io give names.
        index.apply(
            "lookalike",
            &[reference("Tenant", "evil.io/v1", "t9", "uid-9")],
            &BTreeMap::new(),
        );
        assert!(index.tenants_to_wake("lookalike").is_empty());
        // A relist (a fresh index) forgets previous memberships.
        let mut fresh = MembershipIndex::default();
        fresh.apply("x", &[], &BTreeMap::new());
        assert!(fresh.tenants_to_wake("x").is_empty());
    }
}
