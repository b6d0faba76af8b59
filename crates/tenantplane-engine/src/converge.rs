//! Bringing one named host object to a desired state, written only when the live
//! object does not hold it and never when someone else's object holds the name:
//! the isolation boundary, the namespace tenants' replicated objects, the tenant
//! DNS server and the provisioned control planes all converge through here.

use std::collections::BTreeMap;
use std::fmt;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tenantplane_core::compare::holds;

use crate::decisions::MANAGER;
use crate::deletion::exactly;

/// What happened to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectAction {
    Created,
    Updated,
    Unchanged,
    Deleted,
    /// Not wanted and not there.
    Absent,
    /// Someone else's object holds the name: left alone.
    Conflict,
}

impl ObjectAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectAction::Created => "created",
            ObjectAction::Updated => "updated",
            ObjectAction::Unchanged => "unchanged",
            ObjectAction::Deleted => "deleted",
            ObjectAction::Absent => "absent",
            ObjectAction::Conflict => "conflict",
        }
    }

    pub(crate) fn is_write(self) -> bool {
        matches!(
            self,
            ObjectAction::Created | ObjectAction::Updated | ObjectAction::Deleted
        )
    }
}

/// A failed read or write of [`converge`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConvergeError {
    #[error("{verb}: {source}")]
    Host {
        verb: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Brings one named object to `desired`, or deletes it when `desired` is `None`, but
/// only while `ours` accepts the live object's labels: anything else under the name
/// is a [`ObjectAction::Conflict`] and is neither written nor deleted. Reads first and
/// writes only when the live object does not hold `desired` (and the maps at the
/// `exact` JSON pointers have no extra keys).
pub(crate) async fn converge<K>(
    api: &Api<K>,
    name: &str,
    desired: Option<&K>,
    ours: &(dyn Fn(&BTreeMap<String, String>) -> bool + Sync),
    exact: &[&str],
) -> Result<ObjectAction, ConvergeError>
where
    K: Resource<DynamicType = ()> + Clone + fmt::Debug + Serialize + DeserializeOwned,
{
    let live = api
        .get_opt(name)
        .await
        .map_err(|source| ConvergeError::Host {
            verb: "get",
            source,
        })?;
    converge_live(api, name, live, desired, ours, exact).await
}

/// [`converge`] from `live`, the object as the caller has just read it (`None`:
/// absent), for a caller that needs to look at it first.
pub(crate) async fn converge_live<K>(
    api: &Api<K>,
    name: &str,
    live: Option<K>,
    desired: Option<&K>,
    ours: &(dyn Fn(&BTreeMap<String, String>) -> bool + Sync),
    exact: &[&str],
) -> Result<ObjectAction, ConvergeError>
where
    K: Resource<DynamicType = ()> + Clone + fmt::Debug + Serialize + DeserializeOwned,
{
    let host_err = |verb| move |source| ConvergeError::Host { verb, source };
    if let Some(live) = &live
        && !ours(live.labels())
    {
        return Ok(ObjectAction::Conflict);
    }
    match (desired, live) {
        (None, None) => Ok(ObjectAction::Absent),
        (None, Some(live)) => {
            // Only the object we just checked, not one recreated since.
            match api.delete(name, &exactly(live.uid())).await {
                Ok(_) => Ok(ObjectAction::Deleted),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(ObjectAction::Absent),
                Err(e) => Err(host_err("delete")(e)),
            }
        }
        (Some(desired), live) => {
            let exists = live.is_some();
            let mut extra = None;
            if let Some(live) = live {
                let (live, want) = (serde_json::to_value(&live)?, serde_json::to_value(desired)?);
                if holds(Some(&live), &want) && exact_maps_hold(&live, &want, exact) {
                    return Ok(ObjectAction::Unchanged);
                }
                extra = extra_keys_patch(&live, &want, exact);
            }
            apply(api, name, desired, exists)
                .await
                .map_err(host_err(if exists { "update" } else { "create" }))?;
            // Server-side apply keeps keys another manager added: remove them.
            if let Some(patch) = extra {
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(host_err("update"))?;
            }
            Ok(if exists {
                ObjectAction::Updated
            } else {
                ObjectAction::Created
            })
        }
    }
}

/// Server-side apply as tenantplane. Creation does not force: if someone else
/// created the object between our read and this write, their fields conflict and the
/// write fails (retried, then seen as a conflict) rather than taking it over. An
/// update of an object checked to be ours forces, which is how drift is corrected.
pub(crate) async fn apply<K>(
    api: &Api<K>,
    name: &str,
    desired: &K,
    force: bool,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + fmt::Debug + Serialize + DeserializeOwned,
{
    let mut params = PatchParams::apply(MANAGER);
    params.force = force;
    api.patch(name, &params, &Patch::Apply(desired)).await
}

/// A merge patch removing the keys of the maps at the `exact` JSON pointers that
/// `desired` does not have, or `None` when there are none.
pub(crate) fn extra_keys_patch(live: &Value, desired: &Value, exact: &[&str]) -> Option<Value> {
    let mut patch = json!({});
    let mut any = false;
    for pointer in exact {
        let want = desired.pointer(pointer).and_then(Value::as_object);
        let Some(have) = live.pointer(pointer).and_then(Value::as_object) else {
            continue;
        };
        let mut target = &mut patch;
        for part in pointer.split('/').filter(|p| !p.is_empty()) {
            target = &mut target[part];
        }
        for key in have
            .keys()
            .filter(|k| !want.is_some_and(|w| w.contains_key(*k)))
        {
            target[key.as_str()] = Value::Null;
            any = true;
        }
    }
    any.then_some(patch)
}

/// Whether every map at the JSON pointers in `exact` has no key beyond the desired
/// ones (`holds` already checked that the desired keys are there with equal values).
pub(crate) fn exact_maps_hold(live: &Value, desired: &Value, exact: &[&str]) -> bool {
    exact.iter().all(|pointer| {
        let want = desired.pointer(pointer).and_then(Value::as_object);
        match live.pointer(pointer).and_then(Value::as_object) {
            None => true,
            Some(live) => live
                .keys()
                .all(|k| want.is_some_and(|want| want.contains_key(k))),
        }
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_removed_by_a_merge_patch() {
        let desired = json!({"spec": {"hard": {"requests.cpu": "2"}}});
        let extra = json!({"spec": {"hard": {"requests.cpu": "2", "secrets": "1"}}});
        assert_eq!(
            extra_keys_patch(&extra, &desired, &["/spec/hard"]),
            Some(json!({"spec": {"hard": {"secrets": null}}}))
        );
        assert_eq!(extra_keys_patch(&desired, &desired, &["/spec/hard"]), None);
    }

    #[test]
    fn exact_maps_reject_extra_keys_only() {
        let desired = json!({"spec": {"hard": {"requests.cpu": "2"}}});
        let same = json!({"spec": {"hard": {"requests.cpu": "2"}}});
        let extra = json!({"spec": {"hard": {"requests.cpu": "2", "requests.memory": "1Gi"}}});
        assert!(exact_maps_hold(&same, &desired, &["/spec/hard"]));
        assert!(!exact_maps_hold(&extra, &desired, &["/spec/hard"]));
        assert!(exact_maps_hold(&extra, &desired, &[]));
    }
}
