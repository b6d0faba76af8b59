//! Host Events about a tenant's synced host objects (Pods, Services, PVCs, ...),
//! as tenant Events on the tenant object: tenant names in `involvedObject` and in
//! the message, host identifiers (the host object's name and namespace, for Pods
//! the host node's name, the reporting host) replaced or dropped, and one tenant
//! Event per (object, type, reason, message) whose count goes up instead of a new
//! Event each time. Whether an Event crosses is decided by the reverse mapping of
//! the host object it names ([`crate::provenance::reverse_lookup`]): only the host
//! copy of a synced object of this very tenant qualifies.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::kinds::GroupKind;
use crate::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::provenance::source_in;

/// On a tenant Event: the UID of the host Event last counted into it.
pub const ANNOTATION_HOST_EVENT_UID: &str = "tenantplane.io/host-event-uid";
/// On a tenant Event: that host Event's count when it was last counted.
pub const ANNOTATION_HOST_EVENT_COUNT: &str = "tenantplane.io/host-event-count";

/// The tenant object a host object stands for, and the names to put in place of
/// the host's in a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTarget {
    /// The tenant object's `apiVersion` and kind (the synced kind's).
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub host_namespace: String,
    pub host_name: String,
    /// For a Pod: the host node it runs on, and its tenant Node name.
    pub node: Option<(String, String)>,
}

/// A synced kind, as the Events of its host objects name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncedKind {
    /// The `apiVersion` the kind is synced at (the tenant Event names it).
    pub api_version: String,
    pub group_kind: GroupKind,
}

/// The group and kind host Event `event` is about, from its `involvedObject`.
pub fn involved_group_kind(event: &Value) -> Option<GroupKind> {
    let kind = str_of(event, "/involvedObject/kind").filter(|k| !k.is_empty())?;
    // Events name the core group as `v1`; a missing apiVersion is read the same way.
    let api_version = str_of(event, "/involvedObject/apiVersion")
        .filter(|v| !v.is_empty())
        .unwrap_or("v1");
    GroupKind::from_api_version(api_version, kind).ok()
}

/// The tenant object host Event `event` is about, when the host object it names,
/// `host_object` (as read from the host namespace `host_namespace`), is the host
/// copy of a synced object of kind `kind` of tenant `tenant`; `None` for every
/// other Event, which must not cross. The host object decides by its reverse
/// mapping: forged labels on a foreign object fail it (its name is not the one
/// they map to), and another tenant's copy names that tenant.
pub fn event_target(
    event: &Value,
    host_object: &Value,
    kind: &SyncedKind,
    host_namespace: &str,
    tenant: &str,
) -> Option<EventTarget> {
    if involved_group_kind(event).as_ref() != Some(&kind.group_kind) {
        return None;
    }
    let (host_name, labels, annotations) = crate::plan::meta_of(host_object);
    let host_uid = str_of(host_object, "/metadata/uid");
    let object_namespace = str_of(host_object, "/metadata/namespace");
    if host_name.is_empty()
        || object_namespace.is_some_and(|ns| ns != host_namespace)
        || !is_about(event, host_namespace, host_name, host_uid)
    {
        return None;
    }
    let identity = source_in(host_name, &labels, &annotations, tenant, &kind.group_kind)?;
    Some(EventTarget {
        api_version: kind.api_version.clone(),
        kind: kind.group_kind.kind.clone(),
        namespace: identity.virtual_namespace,
        name: identity.name,
        uid: identity.uid,
        host_namespace: host_namespace.to_owned(),
        host_name: host_name.to_owned(),
        node: None,
    })
}

/// Whether host Event `event` names host object `host_name` in `host_namespace`
/// (and, when both have one, the same UID).
pub fn is_about(
    event: &Value,
    host_namespace: &str,
    host_name: &str,
    host_uid: Option<&str>,
) -> bool {
    let involved = event.get("involvedObject");
    let field = |f: &str| involved.and_then(|i| i.get(f)).and_then(Value::as_str);
    let uid_ok = match (field("uid").filter(|u| !u.is_empty()), host_uid) {
        (Some(event_uid), Some(object_uid)) => event_uid == object_uid,
        _ => true,
    };
    field("namespace").is_none_or(|ns| ns == host_namespace)
        && field("name") == Some(host_name)
        && uid_ok
}

/// `text` with the host's names replaced by the tenant's.
pub fn tenant_text(text: &str, target: &EventTarget) -> String {
    let mut out = text.replace(
        &format!("{}/{}", target.host_namespace, target.host_name),
        &format!("{}/{}", target.namespace, target.name),
    );
    out = out.replace(&target.host_name, &target.name);
    if let Some((host_node, tenant_node)) = &target.node
        && !host_node.is_empty()
    {
        out = out.replace(host_node.as_str(), tenant_node);
    }
    out
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// The tenant Event's name: the same for the same object, type, reason and message.
pub fn tenant_event_name(target: &EventTarget, type_: &str, reason: &str, message: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [
        target.uid.as_deref().unwrap_or_default(),
        // Objects of different kinds may share a name (and have no UID recorded).
        &target.kind,
        type_,
        reason,
        message,
    ] {
        hasher.update(part.as_bytes());
        hasher.update(b"/");
    }
    let hex = crate::hex::short_hex(hasher.finalize(), 8);
    // Object names are at most 253 characters, like Event names: keep room for the hash.
    let prefix: String = target.name.chars().take(253 - 17).collect();
    format!("{prefix}.{hex}")
}

/// What to write for host Event `event` about `target`'s host object, given the
/// tenant Event of the same name (`existing`).
#[derive(Clone, Debug, PartialEq)]
pub enum EventWrite {
    /// A new tenant Event.
    Create(Value),
    /// The existing one, counted up (a merge patch).
    Bump(Value),
    /// Already counted.
    Nothing,
}

/// The tenant Event for host Event `event`, or what to change on the existing one.
pub fn tenant_event(event: &Value, target: &EventTarget, existing: Option<&Value>) -> EventWrite {
    let type_ = str_of(event, "/type").unwrap_or("Normal");
    let reason = str_of(event, "/reason").unwrap_or_default();
    let message = tenant_text(str_of(event, "/message").unwrap_or_default(), target);
    let host_uid = str_of(event, "/metadata/uid").unwrap_or_default();
    let host_count = event
        .get("count")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(1);
    let last = str_of(event, "/lastTimestamp")
        .or_else(|| str_of(event, "/eventTime"))
        .or_else(|| str_of(event, "/metadata/creationTimestamp"))
        .map(seconds);
    let first = str_of(event, "/firstTimestamp")
        .map(seconds)
        .or_else(|| last.clone());
    let annotations = |count: i64| json!({ANNOTATION_HOST_EVENT_UID: host_uid, ANNOTATION_HOST_EVENT_COUNT: count.to_string()});
    if let Some(existing) = existing {
        let seen_uid = str_of(
            existing,
            &format!(
                "/metadata/annotations/{}",
                escape(ANNOTATION_HOST_EVENT_UID)
            ),
        );
        let seen_count = str_of(
            existing,
            &format!(
                "/metadata/annotations/{}",
                escape(ANNOTATION_HOST_EVENT_COUNT)
            ),
        )
        .and_then(|c| c.parse::<i64>().ok())
        .unwrap_or(0);
        let count = existing.get("count").and_then(Value::as_i64).unwrap_or(1);
        let added = if seen_uid == Some(host_uid) {
            host_count - seen_count
        } else {
            host_count
        };
        if added <= 0 {
            return EventWrite::Nothing;
        }
        let mut patch = Map::new();
        patch.insert(
            "metadata".into(),
            json!({"annotations": annotations(host_count)}),
        );
        patch.insert("count".into(), json!(count.saturating_add(added)));
        if let Some(last) = last {
            patch.insert("lastTimestamp".into(), Value::String(last));
        }
        return EventWrite::Bump(Value::Object(patch));
    }
    let mut involved = Map::new();
    involved.insert(
        "apiVersion".into(),
        Value::String(target.api_version.clone()),
    );
    involved.insert("kind".into(), Value::String(target.kind.clone()));
    involved.insert("namespace".into(), Value::String(target.namespace.clone()));
    involved.insert("name".into(), Value::String(target.name.clone()));
    if let Some(uid) = &target.uid {
        involved.insert("uid".into(), Value::String(uid.clone()));
    }
    if let Some(path) = str_of(event, "/involvedObject/fieldPath") {
        involved.insert("fieldPath".into(), Value::String(path.to_owned()));
    }
    let mut object = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": tenant_event_name(target, type_, reason, &message), "namespace": target.namespace,
                     "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE}, "annotations": annotations(host_count)},
        "involvedObject": involved,
        "type": type_, "reason": reason, "message": message, "count": host_count,
        // The component (kubelet, default-scheduler), never the reporting host.
        "source": {"component": str_of(event, "/source/component").or_else(|| str_of(event, "/reportingComponent")).unwrap_or("tenantplane")},
    });
    if let Some(map) = object.as_object_mut() {
        if let Some(first) = first {
            map.insert("firstTimestamp".into(), Value::String(first));
        }
        if let Some(last) = last {
            map.insert("lastTimestamp".into(), Value::String(last));
        }
    }
    EventWrite::Create(object)
}

/// A JSON pointer token for `key`.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// An RFC 3339 time at seconds precision (`eventTime` is a MicroTime; the legacy
/// timestamps are seconds).
fn seconds(time: &str) -> String {
    match (time.find('.'), time.ends_with('Z')) {
        (Some(dot), true) => format!("{}Z", &time[..dot]),
        _ => time.to_owned(),
    }
}

#[cfg(test)]
#[path = "host_events_tests.rs"]
mod tests;
