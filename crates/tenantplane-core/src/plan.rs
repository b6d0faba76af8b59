//! What to do with one host object, decided from desired and observed state alone.
//!
//! The engine feeds this from its caches and carries the plan out; every branch is
//! unit-tested here without an API server.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::compare::{difference, digest, holds, project};
use crate::kinds::GroupKind;
use crate::provenance::{Provenance, SourceIdentity, provenance};
use crate::transform::string_map;

/// Digest of the desired host object, stamped on every write. When the stamp on the
/// host matches, the tenant side has not changed since tenantplane last wrote.
pub const ANNOTATION_DESIRED_HASH: &str = "tenantplane.io/desired-hash";

/// What the engine should do about one tenant object's host copy.
#[derive(Clone, Debug, PartialEq)]
pub enum ApplyPlan {
    /// Nothing exists under the host name: create this object.
    Create { object: Value },
    /// Ours, and it differs: replace it with this object (carries the observed
    /// `resourceVersion`, so a concurrent change fails instead of being lost).
    Update {
        object: Value,
        reason: String,
        /// Fields the tenant changed that the server will not change after creation;
        /// the host keeps its live values for them.
        immutable: Vec<String>,
    },
    /// Ours and up to date: no write.
    Noop,
    /// Not ours, or only immutable fields differ: no write, and the reason why.
    Skip { reason: String },
}

/// Memory of the last write: the stamp and what the server made of it, so a field
/// the server normalizes in a way [`holds`] does not know cannot cause a write loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteMemo {
    pub desired_hash: String,
    pub stored_projection: String,
}

impl WriteMemo {
    /// Records what the server returned for a write of `desired`.
    pub fn after_write(desired: &Value, stored: &Value) -> Self {
        Self {
            desired_hash: desired_hash_of(desired).unwrap_or_default(),
            stored_projection: digest(&project(stored, desired)),
        }
    }
}

/// Stamps `desired` with the digest of its content and returns the digest.
pub fn stamp_desired_hash(desired: &mut Value) -> String {
    if let Some(annotations) = annotations_mut(desired) {
        annotations.remove(ANNOTATION_DESIRED_HASH);
    }
    let hash = digest(desired);
    if let Some(annotations) = annotations_mut(desired) {
        annotations.insert(ANNOTATION_DESIRED_HASH.into(), Value::String(hash.clone()));
    }
    hash
}

fn annotations_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = object.get_mut("metadata")?.as_object_mut()?;
    meta.entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

fn desired_hash_of(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_DESIRED_HASH))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The name, labels and annotations of an observed object.
pub fn meta_of(object: &Value) -> (&str, BTreeMap<String, String>, BTreeMap<String, String>) {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let map = |key: &str| string_map(object.pointer(&format!("/metadata/{key}")));
    (name, map("labels"), map("annotations"))
}

/// Plans the write for `desired` (already stamped with [`stamp_desired_hash`]).
pub fn plan_apply(
    source: &SourceIdentity,
    desired: &Value,
    observed: Option<&Value>,
    memo: Option<&WriteMemo>,
) -> ApplyPlan {
    let Some(observed) = observed else {
        return ApplyPlan::Create {
            object: desired.clone(),
        };
    };
    let (name, labels, annotations) = meta_of(observed);
    let verdict = provenance(source, name, &labels, &annotations);
    if let Some(refusal) = verdict.refusal() {
        return ApplyPlan::Skip {
            reason: format!("refusing to overwrite {name}: {refusal}"),
        };
    }
    debug_assert_eq!(verdict, Provenance::Ours);
    let wanted = desired_hash_of(desired);
    let stamped = desired_hash_of(observed);
    let tenant_changed = wanted != stamped;
    if !tenant_changed {
        if holds(Some(observed), desired) {
            return ApplyPlan::Noop;
        }
        if let Some(memo) = memo
            && Some(&memo.desired_hash) == wanted.as_ref()
            && digest(&project(observed, desired)) == memo.stored_projection
        {
            return ApplyPlan::Noop;
        }
    }
    let (object, immutable) = adopt_live_values(&source.group_kind, desired, observed);
    let reason = if tenant_changed {
        "the tenant object changed".to_owned()
    } else {
        let path = difference(observed, desired).unwrap_or_else(|| ".".into());
        format!("the host copy was changed on the host ({path} differs); restoring it")
    };
    if !immutable.is_empty()
        && holds(Some(observed), &without_stamp(&object))
        && !tenant_metadata_changed(observed, desired)
    {
        return ApplyPlan::Skip {
            reason: format!(
                "only fields the API server cannot change after creation differ ({}); \
                 recreate the tenant object to change them",
                immutable.join(", ")
            ),
        };
    }
    ApplyPlan::Update {
        object,
        reason,
        immutable,
    }
}

fn without_stamp(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(annotations) = annotations_mut(&mut copy) {
        annotations.remove(ANNOTATION_DESIRED_HASH);
    }
    copy
}

fn tenant_metadata_changed(observed: &Value, desired: &Value) -> bool {
    let pick = |v: &Value| {
        serde_json::json!({
            "labels": v.pointer("/metadata/labels").cloned().unwrap_or(Value::Null),
            "annotations": without_stamp(v).pointer("/metadata/annotations").cloned().unwrap_or(Value::Null),
        })
    };
    !holds(Some(&pick(observed)), &pick(desired))
}

/// The object to write over `observed`: `desired`, carrying the observed
/// `resourceVersion`, with the live values of fields the server owns or will not
/// change. Returns the paths of immutable fields the tenant changed.
pub fn adopt_live_values(
    group_kind: &GroupKind,
    desired: &Value,
    observed: &Value,
) -> (Value, Vec<String>) {
    let mut object = desired.clone();
    let mut immutable = Vec::new();
    if let Some(rv) = observed.pointer("/metadata/resourceVersion").cloned()
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("resourceVersion".into(), rv);
    }
    match (group_kind.group.as_str(), group_kind.kind.as_str()) {
        ("", "Service") => adopt_service(&mut object, observed),
        ("", "Pod") => {
            object = adopt_pod(&object, observed, &mut immutable);
        }
        ("", "PersistentVolumeClaim") => {
            copy_if_absent(&mut object, observed, &["spec", "volumeName"]);
            for field in [
                "accessModes",
                "selector",
                "storageClassName",
                "volumeMode",
                "dataSource",
            ] {
                keep_live(&mut object, observed, &["spec", field], &mut immutable);
            }
        }
        ("batch", "Job") => {
            copy_if_absent(&mut object, observed, &["spec", "selector"]);
            keep_live(&mut object, observed, &["spec", "template"], &mut immutable);
        }
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") => {
            keep_live(&mut object, observed, &["spec", "selector"], &mut immutable);
        }
        _ => {}
    }
    (object, immutable)
}

fn get_path<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

fn set_path(value: &mut Value, path: &[&str], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cursor = value;
    for key in parents {
        let Some(map) = cursor.as_object_mut() else {
            return;
        };
        cursor = map
            .entry((*key).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Some(map) = cursor.as_object_mut() {
        map.insert((*last).to_owned(), new);
    }
}

fn copy_if_absent(object: &mut Value, observed: &Value, path: &[&str]) {
    if get_path(object, path).is_none_or(Value::is_null)
        && let Some(live) = get_path(observed, path)
    {
        set_path(object, path, live.clone());
    }
}

/// An immutable field: the live value is written back; a tenant change to it is reported.
fn keep_live(object: &mut Value, observed: &Value, path: &[&str], immutable: &mut Vec<String>) {
    let Some(live) = get_path(observed, path) else {
        return;
    };
    if let Some(wanted) = get_path(object, path)
        && !holds(Some(live), wanted)
    {
        immutable.push(format!(".{}", path.join(".")));
    }
    set_path(object, path, live.clone());
}

fn adopt_service(object: &mut Value, observed: &Value) {
    for field in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "ipFamilyPolicy",
        "healthCheckNodePort",
    ] {
        copy_if_absent(object, observed, &["spec", field]);
    }
    // Node ports are allocated by the host: keep each allocated port for the same
    // (port, protocol) unless the tenant asked for a specific one.
    let live_ports: Vec<Value> = get_path(observed, &["spec", "ports"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = object
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
    {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            if port.contains_key("nodePort") {
                continue;
            }
            let key = (
                port.get("port").cloned(),
                port.get("protocol").cloned().unwrap_or("TCP".into()),
            );
            let live = live_ports.iter().find(|p| {
                (
                    p.get("port").cloned(),
                    p.get("protocol").cloned().unwrap_or("TCP".into()),
                ) == key
            });
            if let Some(node_port) = live.and_then(|p| p.get("nodePort")) {
                port.insert("nodePort".into(), node_port.clone());
            }
        }
    }
}

/// A Pod's spec is immutable after creation except container images,
/// `activeDeadlineSeconds` and added tolerations: start from the live Pod and apply
/// only those, plus the metadata.
fn adopt_pod(desired: &Value, observed: &Value, immutable: &mut Vec<String>) -> Value {
    let mut object = observed.clone();
    if let Some(obj) = object.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = desired.get("metadata") {
            let mut meta = meta.clone();
            if let (Some(m), Some(rv)) = (
                meta.as_object_mut(),
                observed.pointer("/metadata/resourceVersion"),
            ) {
                m.insert("resourceVersion".into(), rv.clone());
            }
            obj.insert("metadata".into(), meta);
        }
    }
    let (Some(wanted), Some(live)) = (desired.get("spec"), observed.get("spec")) else {
        return object;
    };
    for list in ["containers", "initContainers"] {
        let (Some(w), Some(l)) = (
            wanted.get(list).and_then(Value::as_array),
            live.get(list).and_then(Value::as_array),
        ) else {
            continue;
        };
        if w.len() != l.len() {
            immutable.push(format!(".spec.{list}"));
            continue;
        }
        for (i, (wc, lc)) in w.iter().zip(l).enumerate() {
            if let Some(image) = wc.get("image")
                && lc.get("image") != Some(image)
                && let Some(target) = object.pointer_mut(&format!("/spec/{list}/{i}/image"))
            {
                *target = image.clone();
            }
            let mut wc = wc.clone();
            let mut lc = lc.clone();
            for c in [&mut wc, &mut lc] {
                if let Some(m) = c.as_object_mut() {
                    m.remove("image");
                }
            }
            if let Some(path) = difference(&lc, &wc) {
                immutable.push(format!(".spec.{list}[{i}]{path}"));
            }
        }
    }
    if let Some(deadline) = wanted.get("activeDeadlineSeconds")
        && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("activeDeadlineSeconds".into(), deadline.clone());
    }
    let mut rest_wanted = wanted.clone();
    if let Some(m) = rest_wanted.as_object_mut() {
        for key in ["containers", "initContainers", "activeDeadlineSeconds"] {
            m.remove(key);
        }
    }
    if let Some(path) = difference(live, &rest_wanted) {
        immutable.push(format!(".spec{path}"));
    }
    object
}

/// What to do with a managed host object whose tenant source is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcPlan {
    /// Delete it, on condition that its UID is still this one.
    Delete { uid: Option<String>, reason: String },
    /// Not ours to delete.
    Keep { reason: String },
}

/// Garbage collection: only a host object that reverse-maps to exactly `source`,
/// whose tenant object no longer exists, is deleted.
pub fn plan_gc(source: &SourceIdentity, observed: &Value) -> GcPlan {
    let (name, labels, annotations) = meta_of(observed);
    match provenance(source, name, &labels, &annotations).refusal() {
        Some(refusal) => GcPlan::Keep {
            reason: format!("not deleting {name}: {refusal}"),
        },
        None => GcPlan::Delete {
            uid: observed
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            reason: format!(
                "the tenant {} {}/{} no longer exists",
                source.group_kind, source.virtual_namespace, source.name
            ),
        },
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
