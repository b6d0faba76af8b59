//! Objects as flat maps of leaf fields, and who owns each field.
//!
//! Two-way sync compares field by field: an object becomes a map from JSON pointer
//! to leaf value (scalars, arrays and empty objects are leaves, so a list is one
//! field and is never merged element-wise). Keys under `tenantplane.io/` are
//! tenantplane's own bookkeeping and never cross in either direction.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use tenantplane_api::sync_policy::{FieldOwner, FieldOwnershipRule};

/// A side of a two-way sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Side {
    Tenant,
    Host,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Tenant => Side::Host,
            Side::Host => Side::Tenant,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Side::Tenant => "tenant",
            Side::Host => "host",
        }
    }
}

/// Leaf fields by JSON pointer.
pub type Fields = BTreeMap<String, Value>;

const TENANTPLANE_PREFIX: &str = "tenantplane.io/";

use crate::metadata::DROPPED_TENANT_ANNOTATIONS;

/// Who owns which field: the longest rule whose path is a prefix (by whole
/// segments) of the field's path decides; `None` means the field is not synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldOwnership {
    rules: BTreeMap<String, Option<Side>>,
}

impl FieldOwnership {
    /// The default for bidirectional kinds: the object (so `spec` and any other
    /// top-level data), labels and annotations belong to the tenant; `status` to the
    /// host; identity and the rest of `metadata` are not synced.
    pub fn bidirectional_default() -> Self {
        let mut rules = BTreeMap::new();
        rules.insert(String::new(), Some(Side::Tenant));
        rules.insert("/status".to_owned(), Some(Side::Host));
        for unsynced in ["/apiVersion", "/kind", "/metadata"] {
            rules.insert(unsynced.to_owned(), None);
        }
        rules.insert("/metadata/labels".to_owned(), Some(Side::Tenant));
        rules.insert("/metadata/annotations".to_owned(), Some(Side::Tenant));
        Self { rules }
    }

    /// One-way sync: everything synced belongs to `side`. Status is not synced
    /// toHost (the host computes its own) and is synced fromHost.
    pub fn one_way(side: Side) -> Self {
        let mut ownership = Self::bidirectional_default();
        ownership.rules.insert(String::new(), Some(side));
        ownership
            .rules
            .insert("/metadata/labels".to_owned(), Some(side));
        ownership
            .rules
            .insert("/metadata/annotations".to_owned(), Some(side));
        let status = match side {
            Side::Tenant => None,
            Side::Host => Some(Side::Host),
        };
        ownership.rules.insert("/status".to_owned(), status);
        ownership
    }

    /// The default with a SyncPolicy's per-path overrides on top.
    pub fn with_overrides(mut self, overrides: &[FieldOwnershipRule]) -> Self {
        for rule in overrides {
            let owner = match rule.owner {
                FieldOwner::Tenant => Some(Side::Tenant),
                FieldOwner::Host => Some(Side::Host),
                FieldOwner::None => None,
            };
            self.rules
                .insert(rule.path.trim_end_matches('/').to_owned(), owner);
        }
        self
    }

    /// The owner of the field at `path`, `None` when it is not synced.
    pub fn owner(&self, path: &str) -> Option<Side> {
        let mut prefix = path;
        loop {
            if let Some(owner) = self.rules.get(prefix) {
                return *owner;
            }
            match prefix.rfind('/') {
                Some(cut) => prefix = &prefix[..cut],
                None => return Some(Side::Tenant),
            }
        }
    }
}

/// Escapes one key as a JSON pointer segment.
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The synced leaf fields of an object (tenantplane's own keys left out).
pub fn flatten(object: &Value) -> Fields {
    let mut out = Fields::new();
    flatten_into(object, String::new(), &mut out);
    out
}

fn flatten_into(value: &Value, path: String, out: &mut Fields) {
    match value {
        Value::Object(map) => {
            let metadata_map = path == "/metadata/labels" || path == "/metadata/annotations";
            for (key, child) in map {
                if metadata_map && key.starts_with(TENANTPLANE_PREFIX) {
                    continue;
                }
                // Each side's own kubectl bookkeeping (the whole object as last
                // applied there) stays on that side, as toHost and fromHost keep it.
                if path == "/metadata/annotations"
                    && DROPPED_TENANT_ANNOTATIONS.contains(&key.as_str())
                {
                    continue;
                }
                flatten_into(child, format!("{path}/{}", escape(key)), out);
            }
        }
        _ => {
            out.insert(path, value.clone());
        }
    }
}

/// Sets (`Some`) or removes (`None`) the leaf at `path`, creating the objects on
/// the way. A path through a non-object is replaced by an object: the leaf wins,
/// as it did on the side it came from.
pub fn set_field(object: &mut Value, path: &str, value: Option<&Value>) {
    if path.is_empty() {
        if let Some(v) = value {
            *object = v.clone();
        }
        return;
    }
    let segments: Vec<String> = path.split('/').skip(1).map(unescape).collect();
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut cursor = object;
    for segment in parents {
        if !cursor.is_object() {
            if value.is_none() {
                return;
            }
            *cursor = Value::Object(Map::new());
        }
        let Value::Object(map) = cursor else { return };
        if value.is_none() && !map.contains_key(segment) {
            return;
        }
        cursor = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cursor.is_object() {
        if value.is_none() {
            return;
        }
        *cursor = Value::Object(Map::new());
    }
    if let Value::Object(map) = cursor {
        match value {
            Some(v) => {
                map.insert(last.clone(), v.clone());
            }
            None => {
                map.remove(last);
            }
        }
    }
}

/// Rebuilds an object from leaf fields.
pub fn unflatten(fields: &Fields) -> Value {
    let mut out = Value::Object(Map::new());
    for (path, value) in fields {
        set_field(&mut out, path, Some(value));
    }
    out
}
