//! The three-way comparison behind two-way sync: given the last content both sides
//! agreed on (the base), the tenant object and the host object, decide field by
//! field what flows where, and what is a conflict.
//!
//! The rules, for each synced field (see [`FieldOwnership`]):
//! - both sides hold the same value: agreed, nothing to do;
//! - only the owner changed it since the base: the owner's value flows to the other side;
//! - only the other side changed it: the owner's value is restored there, except that
//!   a field the other side *added* (absent in the base and on the owner's side) is
//!   left alone, so host defaulting and mutating webhooks never cause a write;
//! - both changed it to different values: a conflict, settled by the
//!   [`ConflictPolicy`] (`manual` leaves both sides and the base as they are);
//! - no base yet (the first pass): the owner's value flows, additions are left alone.
//!
//! The new base holds every field both sides agree on after the writes, and the old
//! base's value where they still differ. A write the engine made therefore never
//! looks like a change on the next pass: no ping-pong.

mod explain;
mod fields;
mod history;
#[cfg(test)]
mod tests;
mod versions;

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use tenantplane_api::sync_policy::ConflictPolicy;

pub use explain::{DirectionPlan, every_direction, summary};
pub use fields::{FieldOwnership, Fields, Side, escape, flatten, set_field, unflatten};
pub use history::{
    ConflictedObject, MAX_CONFLICT_RECORDS, MAX_CONFLICTED_OBJECTS, MAX_DETAIL_CHARS,
    conflict_record, history_of, record_conflict, resolved_record,
};
pub use versions::{SyncVersions, resource_version};

/// Why a field is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteReason {
    /// The owning side changed the field since the last agreement.
    OwnerChanged,
    /// The side that does not own the field changed it; the owner's value is restored.
    Reverted,
    /// Both sides changed the field; the conflict policy picked the written value.
    ConflictWon,
    /// No agreement yet: the owner's value is the starting point.
    Initial,
}

/// One field to set (`value: Some`) or remove (`None`) on one side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldWrite {
    pub path: String,
    pub value: Option<Value>,
    pub reason: WriteReason,
}

/// How a conflict was settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Resolution {
    /// `manual`: both sides keep their value until one of them gives way.
    LeftAlone,
    TenantWon,
    HostWon,
}

/// A field both sides changed to different values since the last agreement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    pub path: String,
    pub base: Option<Value>,
    pub tenant: Option<Value>,
    pub host: Option<Value>,
    pub resolution: Resolution,
}

/// What one two-way pass does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreeWayPlan {
    pub tenant_writes: Vec<FieldWrite>,
    pub host_writes: Vec<FieldWrite>,
    pub conflicts: Vec<Conflict>,
    /// The content to remember as agreed once the writes succeed (synced fields only).
    pub base: Fields,
}

impl ThreeWayPlan {
    pub fn writes(&self, side: Side) -> &[FieldWrite] {
        match side {
            Side::Tenant => &self.tenant_writes,
            Side::Host => &self.host_writes,
        }
    }

    /// Nothing to write on either side.
    pub fn is_noop(&self) -> bool {
        self.tenant_writes.is_empty() && self.host_writes.is_empty()
    }

    /// The conflicts left for a person to settle (`manual`).
    pub fn unresolved(&self) -> impl Iterator<Item = &Conflict> {
        self.conflicts
            .iter()
            .filter(|c| c.resolution == Resolution::LeftAlone)
    }
}

/// Plans one pass. `base` is `None` before the first agreement.
pub fn plan(
    base: Option<&Fields>,
    tenant: &Value,
    host: &Value,
    ownership: &FieldOwnership,
    policy: ConflictPolicy,
) -> ThreeWayPlan {
    let tenant_fields = flatten(tenant);
    let host_fields = flatten(host);
    let mut paths: BTreeSet<&String> = tenant_fields.keys().chain(host_fields.keys()).collect();
    if let Some(base) = base {
        paths.extend(base.keys());
    }
    let mut out = ThreeWayPlan::default();
    for path in paths {
        let Some(owner) = ownership.owner(path) else {
            continue;
        };
        let t = tenant_fields.get(path);
        let h = host_fields.get(path);
        let b = base.and_then(|b| b.get(path));
        let after = match decide(path, owner, base.is_some(), b, t, h, policy, &mut out) {
            Agreement::Agreed(value) => value,
            Agreement::Differ => b,
        };
        if let Some(value) = after {
            out.base.insert(path.clone(), value.clone());
        }
    }
    out
}

/// Whether both sides hold the same value for a field after a pass.
enum Agreement<'a> {
    /// Both hold this value (`None`: both lack the field).
    Agreed(Option<&'a Value>),
    /// They still differ: the base keeps its old value.
    Differ,
}

/// Decides one field.
#[allow(clippy::too_many_arguments)]
fn decide<'a>(
    path: &str,
    owner: Side,
    has_base: bool,
    b: Option<&'a Value>,
    t: Option<&'a Value>,
    h: Option<&'a Value>,
    policy: ConflictPolicy,
    out: &mut ThreeWayPlan,
) -> Agreement<'a> {
    if t == h {
        return Agreement::Agreed(t);
    }
    let (mine, theirs) = match owner {
        Side::Tenant => (t, h),
        Side::Host => (h, t),
    };
    let mut write = |side: Side, value: Option<&Value>, reason: WriteReason| {
        let write = FieldWrite {
            path: path.to_owned(),
            value: value.cloned(),
            reason,
        };
        match side {
            Side::Tenant => out.tenant_writes.push(write),
            Side::Host => out.host_writes.push(write),
        }
    };
    if !has_base {
        // Without a base, a field only the other side has is an addition.
        if mine.is_none() {
            return Agreement::Differ;
        }
        write(owner.other(), mine, WriteReason::Initial);
        return Agreement::Agreed(mine);
    }
    let owner_changed = mine != b;
    let other_changed = theirs != b;
    match (owner_changed, other_changed) {
        (true, false) => {
            write(owner.other(), mine, WriteReason::OwnerChanged);
            Agreement::Agreed(mine)
        }
        (false, _) => {
            if b.is_none() {
                // The other side added a field the owner never had: left alone.
                return Agreement::Differ;
            }
            write(owner.other(), mine, WriteReason::Reverted);
            Agreement::Agreed(mine)
        }
        (true, true) => {
            let resolution = match policy {
                ConflictPolicy::Manual => Resolution::LeftAlone,
                ConflictPolicy::TenantWins => Resolution::TenantWon,
                ConflictPolicy::HostWins => Resolution::HostWon,
            };
            out.conflicts.push(Conflict {
                path: path.to_owned(),
                base: b.cloned(),
                tenant: t.cloned(),
                host: h.cloned(),
                resolution,
            });
            match resolution {
                Resolution::LeftAlone => Agreement::Differ,
                Resolution::TenantWon => {
                    write(Side::Host, t, WriteReason::ConflictWon);
                    Agreement::Agreed(t)
                }
                Resolution::HostWon => {
                    write(Side::Tenant, h, WriteReason::ConflictWon);
                    Agreement::Agreed(h)
                }
            }
        }
    }
}

/// Applies one side's writes to its object.
pub fn apply(object: &Value, writes: &[FieldWrite]) -> Value {
    let mut out = object.clone();
    for write in writes {
        set_field(&mut out, &write.path, write.value.as_ref());
    }
    out
}

/// The host copy's annotation holding the last agreed content (synced fields only,
/// as a JSON object from field path to value).
pub const BASE_ANNOTATION: &str = "tenantplane.io/sync-base";

/// The largest base kept in an annotation; an object whose synced content is
/// larger is refused two-way sync (annotations share a 256 KiB limit).
pub const MAX_BASE_BYTES: usize = 128 * 1024;

/// Errors reading or keeping a base.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    #[error("the stored sync base is not valid JSON of field paths to values: {0}")]
    Invalid(String),
    #[error(
        "the synced content is {bytes} bytes, more than the {MAX_BASE_BYTES} bytes a two-way sync base may hold"
    )]
    TooLarge { bytes: usize },
}

/// The base as the annotation's text (deterministic: fields in path order).
pub fn encode_base(base: &Fields) -> Result<String, BaseError> {
    let text = serde_json::to_string(base).map_err(|e| BaseError::Invalid(e.to_string()))?;
    if text.len() > MAX_BASE_BYTES {
        return Err(BaseError::TooLarge { bytes: text.len() });
    }
    Ok(text)
}

fn base_pointer() -> String {
    format!("/metadata/annotations/{}", escape(BASE_ANNOTATION))
}

/// The base annotation's text as stored on an object, if any.
pub fn stored_base_text(object: &Value) -> Option<&str> {
    object.pointer(&base_pointer()).and_then(Value::as_str)
}

/// Stores `text` (from [`encode_base`]) as the object's base annotation.
pub fn set_base(object: &mut Value, text: &str) {
    set_field(
        object,
        &base_pointer(),
        Some(&Value::String(text.to_owned())),
    );
}

/// The base stored on an object, `Ok(None)` when it has none yet.
pub fn stored_base(object: &Value) -> Result<Option<Fields>, BaseError> {
    match object.pointer(&base_pointer()) {
        None => Ok(None),
        Some(Value::String(text)) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| BaseError::Invalid(e.to_string())),
        Some(other) => Err(BaseError::Invalid(format!("not a string: {other}"))),
    }
}

/// Splits writes into those of the main resource and those of the `status`
/// subresource (an API server ignores status in a main update when the kind has
/// the subresource).
pub fn split_status(writes: &[FieldWrite]) -> (Vec<FieldWrite>, Vec<FieldWrite>) {
    writes
        .iter()
        .cloned()
        .partition(|w| !(w.path == "/status" || w.path.starts_with("/status/")))
}
