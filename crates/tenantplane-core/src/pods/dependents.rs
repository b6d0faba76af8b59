//! Who needs which dependency copy: an index from each tenant Pod to the
//! ConfigMaps, Secrets and claims it uses, and back, fed by the Pod syncs. With it
//! a change to a tenant dependency reaches exactly the Pods that use it (its copy
//! is refreshed at once, a Pod waiting for it is tried again), instead of waiting
//! for the next full pass.
//!
//! Also here: the host copy a dependency should have ([`desired_copy`]), so the
//! engine's copy writer and its change detection build the same object.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::refcount::{ANNOTATION_POD_DEPENDENCY, DependencyKey, needed_dependencies};
use super::refs::DependencyKind;
use super::storage::host_pvc;
use crate::plan::{ApplyPlan, plan_apply, stamp_desired_hash};
use crate::transform::{Placement, TenantTarget, dependency_to_host};

/// A tenant Pod: its virtual namespace and name.
pub type PodKey = (String, String);

/// The dependencies each tenant Pod uses, the Pods using each dependency, and the
/// Pods waiting for one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependents {
    uses: BTreeMap<PodKey, BTreeSet<DependencyKey>>,
    users: BTreeMap<DependencyKey, BTreeSet<PodKey>>,
    /// Pods whose last sync waited for this dependency (missing, not ready).
    waiting: BTreeMap<DependencyKey, BTreeSet<PodKey>>,
}

impl Dependents {
    /// Records what tenant Pod `pod` uses now (replacing what it used before).
    /// The Pod's namespace is the dependencies' namespace.
    pub fn set_pod(&mut self, pod: &Value) {
        let (Some(namespace), Some(name)) = (
            pod.pointer("/metadata/namespace").and_then(Value::as_str),
            pod.pointer("/metadata/name").and_then(Value::as_str),
        ) else {
            return;
        };
        let key = (namespace.to_owned(), name.to_owned());
        let uses = needed_dependencies(std::iter::once(pod));
        self.forget_uses(&key);
        for dependency in &uses {
            self.users
                .entry(dependency.clone())
                .or_default()
                .insert(key.clone());
        }
        if !uses.is_empty() {
            self.uses.insert(key, uses);
        }
    }

    /// Forgets tenant Pod `pod` (it is gone).
    pub fn remove_pod(&mut self, pod: &PodKey) {
        self.forget_uses(pod);
        self.set_waiting(pod, None);
    }

    /// Records that `pod`'s last sync waited for `dependency`, or (`None`) that it
    /// waits for nothing.
    pub fn set_waiting(&mut self, pod: &PodKey, dependency: Option<DependencyKey>) {
        self.waiting.retain(|_, pods| {
            pods.remove(pod);
            !pods.is_empty()
        });
        if let Some(dependency) = dependency {
            self.waiting
                .entry(dependency)
                .or_default()
                .insert(pod.clone());
        }
    }

    /// The Pods that use `dependency`.
    pub fn users_of(&self, dependency: &DependencyKey) -> Vec<PodKey> {
        self.users
            .get(dependency)
            .map(|pods| pods.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The Pods whose last sync waited for `dependency`.
    pub fn waiting_for(&self, dependency: &DependencyKey) -> Vec<PodKey> {
        self.waiting
            .get(dependency)
            .map(|pods| pods.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The dependencies `pod` uses.
    pub fn uses_of(&self, pod: &PodKey) -> BTreeSet<DependencyKey> {
        self.uses.get(pod).cloned().unwrap_or_default()
    }

    fn forget_uses(&mut self, pod: &PodKey) {
        for dependency in self.uses.remove(pod).unwrap_or_default() {
            if let Some(pods) = self.users.get_mut(&dependency) {
                pods.remove(pod);
                if pods.is_empty() {
                    self.users.remove(&dependency);
                }
            }
        }
    }
}

/// The host copy of tenant dependency `tenant_object` of `kind`, with its desired
/// hash stamped: the tenant object under the tenant's identity, a claim bound to
/// its volume copy, and marked as made for Pods unless its kind is synced for its
/// own sake. `Err` says why it cannot be copied.
pub fn desired_copy(
    target: &TenantTarget,
    kind: DependencyKind,
    tenant_object: &Value,
    kind_synced: bool,
) -> Result<(Placement, Value), String> {
    let (placement, mut desired) = dependency_to_host(target, &kind.group_kind(), tenant_object)
        .map_err(|err| err.to_string())?;
    if kind == DependencyKind::PersistentVolumeClaim {
        // Bound by name to the PV copy, without the tenant binder's annotations.
        desired = host_pvc(target, tenant_object)
            .map_err(|err| err.to_string())?
            .1;
    }
    if !kind_synced
        && let Some(annotations) = desired
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
    {
        annotations.insert(
            ANNOTATION_POD_DEPENDENCY.into(),
            Value::String("true".into()),
        );
    }
    stamp_desired_hash(&mut desired);
    Ok((placement, desired))
}

/// What a change to a tenant dependency means for the Pods that use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyChange {
    /// Its copy already matches (or the change cannot be copied yet): nothing.
    Nothing,
    /// Sync these Pods again: their copy is out of date, or they wait for it.
    Resync(Vec<PodKey>),
}

/// Decides what changed tenant dependency `key` (now `tenant_object`, or gone)
/// means, given its host copy as last seen. A copy that is missing is made by the
/// syncs of the Pods that use it, so only Pods waiting for it are synced again;
/// one that differs from what the tenant object now gives is refreshed through
/// its users. A dependency being deleted is the finalizer's.
pub fn dependency_change(
    dependents: &Dependents,
    target: &TenantTarget,
    key: &DependencyKey,
    tenant_object: Option<&Value>,
    host_copy: Option<&Value>,
    kind_synced: bool,
) -> DependencyChange {
    let waiting = dependents.waiting_for(key);
    let Some(tenant_object) = tenant_object else {
        return resync(waiting);
    };
    if tenant_object
        .pointer("/metadata/deletionTimestamp")
        .is_some()
    {
        return DependencyChange::Nothing;
    }
    let Some(host_copy) = host_copy else {
        return resync(waiting);
    };
    let Ok((placement, desired)) = desired_copy(target, key.kind, tenant_object, kind_synced)
    else {
        return resync(waiting);
    };
    let uid = tenant_object
        .pointer("/metadata/uid")
        .and_then(Value::as_str);
    let source = placement.source_identity(&target.tenant, uid);
    match plan_apply(&source, &desired, Some(host_copy), None) {
        ApplyPlan::Update { .. } => {
            let mut pods = dependents.users_of(key);
            pods.extend(waiting);
            pods.sort();
            pods.dedup();
            resync(pods)
        }
        ApplyPlan::Noop | ApplyPlan::Skip { .. } | ApplyPlan::Create { .. } => resync(waiting),
    }
}

fn resync(pods: Vec<PodKey>) -> DependencyChange {
    if pods.is_empty() {
        DependencyChange::Nothing
    } else {
        DependencyChange::Resync(pods)
    }
}

#[cfg(test)]
#[path = "dependents_tests.rs"]
mod tests;
