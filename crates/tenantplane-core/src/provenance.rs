//! Reverse lookup from a host object's metadata to its exact tenant source, and the
//! provenance verdict the engine checks before every write or delete.

use std::collections::BTreeMap;

use crate::kinds::GroupKind;
use crate::metadata::{
    ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE,
    ANNOTATION_VIRTUAL_UID, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};
use crate::naming::{SourceName, host_name};

/// The tenant object a host object was made from, read back from its metadata.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceIdentity {
    pub tenant: String,
    pub virtual_namespace: String,
    pub name: String,
    pub group_kind: GroupKind,
    /// The tenant object's UID, when the engine recorded it.
    pub uid: Option<String>,
}

impl SourceIdentity {
    pub fn source_name(&self) -> SourceName<'_> {
        SourceName {
            name: &self.name,
            virtual_namespace: &self.virtual_namespace,
            tenant: &self.tenant,
        }
    }

    /// Same tenant, namespace, name and kind (UIDs aside).
    pub fn same_source(&self, other: &SourceIdentity) -> bool {
        self.tenant == other.tenant
            && self.virtual_namespace == other.virtual_namespace
            && self.name == other.name
            && self.group_kind == other.group_kind
    }
}

impl std::fmt::Display for SourceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{} of tenant {}",
            self.group_kind, self.virtual_namespace, self.name, self.tenant
        )
    }
}

/// Why a host object's metadata does not name a tenant source.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("not managed by tenantplane (no {LABEL_MANAGED_BY}={MANAGED_BY_VALUE} label)")]
    NotManaged,
    #[error("labelled as managed by tenantplane, but {key} is missing")]
    Missing { key: &'static str },
    #[error("labelled as managed by tenantplane, but {key} holds the invalid value {value:?}")]
    Invalid { key: &'static str, value: String },
    #[error(
        "its metadata names {identity}, whose host name is {expected:?}, not {actual:?}: \
         the object was copied or edited by hand"
    )]
    NameMismatch {
        identity: Box<SourceIdentity>,
        expected: String,
        actual: String,
    },
}

/// Reads the source identity back from a host object's name, labels and annotations.
/// Exact even for hashed names, and checked: the metadata must name a source whose
/// host name is this object's name.
pub fn reverse_lookup(
    host_name_actual: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<SourceIdentity, LookupError> {
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return Err(LookupError::NotManaged);
    }
    let label = |key: &'static str| labels.get(key).ok_or(LookupError::Missing { key });
    let annotation = |key: &'static str| annotations.get(key).ok_or(LookupError::Missing { key });
    let group_kind_value = annotation(ANNOTATION_VIRTUAL_GROUP_KIND)?;
    let group_kind =
        GroupKind::from_annotation_value(group_kind_value).ok_or_else(|| LookupError::Invalid {
            key: ANNOTATION_VIRTUAL_GROUP_KIND,
            value: group_kind_value.clone(),
        })?;
    let identity = SourceIdentity {
        tenant: label(LABEL_TENANT)?.clone(),
        virtual_namespace: annotation(ANNOTATION_VIRTUAL_NAMESPACE)?.clone(),
        name: annotation(ANNOTATION_VIRTUAL_NAME)?.clone(),
        group_kind,
        uid: annotations.get(ANNOTATION_VIRTUAL_UID).cloned(),
    };
    let expected = host_name(&identity.source_name()).name;
    if expected != host_name_actual {
        return Err(LookupError::NameMismatch {
            identity: Box::new(identity),
            expected,
            actual: host_name_actual.to_owned(),
        });
    }
    Ok(identity)
}

/// A tenant object as its host copy names it: tenant, namespace, name and kind (no
/// UID: a tenant object recreated under the same name keeps its copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceKey<'a> {
    pub tenant: &'a str,
    pub virtual_namespace: &'a str,
    pub name: &'a str,
    pub group_kind: &'a GroupKind,
}

/// The source of a host object when it is tenantplane's copy of a `group_kind`
/// object of `tenant` ([`reverse_lookup`]: forged or copied metadata is not).
pub fn source_in(
    host_name_actual: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    tenant: &str,
    group_kind: &GroupKind,
) -> Option<SourceIdentity> {
    reverse_lookup(host_name_actual, labels, annotations)
        .ok()
        .filter(|id| id.tenant == tenant && id.group_kind == *group_kind)
}

/// Whether a host object is tenantplane's copy of exactly `source`: what a delete
/// or a status read-back checks before it trusts the object.
pub fn is_copy_of(
    host_name_actual: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    source: &SourceKey<'_>,
) -> bool {
    source_in(
        host_name_actual,
        labels,
        annotations,
        source.tenant,
        source.group_kind,
    )
    .is_some_and(|id| id.virtual_namespace == source.virtual_namespace && id.name == source.name)
}

/// Who an existing host object belongs to, relative to the source about to write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provenance {
    /// Made by tenantplane from this very source: tenantplane may update or delete it.
    Ours,
    /// Made by tenantplane from a different source (another tenant, or a hash
    /// collision): never touched.
    OtherSource(Box<SourceIdentity>),
    /// Not tenantplane's, or its tenantplane metadata is incomplete or inconsistent:
    /// never touched.
    Foreign(LookupError),
}

impl Provenance {
    pub fn is_ours(&self) -> bool {
        matches!(self, Provenance::Ours)
    }

    /// Why tenantplane will not touch the object; `None` when it is ours.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Provenance::Ours => None,
            Provenance::OtherSource(other) => Some(format!("the host object belongs to {other}")),
            Provenance::Foreign(why) => Some(format!("the host object is {why}")),
        }
    }
}

/// The provenance verdict for an existing host object that `source` wants to write.
/// UIDs are not compared: a tenant object deleted and recreated under the same name
/// is the same source, and its host copy is updated in place with the new UID.
pub fn provenance(
    source: &SourceIdentity,
    host_name_actual: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Provenance {
    match reverse_lookup(host_name_actual, labels, annotations) {
        Ok(found) if found.same_source(source) => Provenance::Ours,
        Ok(found) => Provenance::OtherSource(Box::new(found)),
        Err(why) => Provenance::Foreign(why),
    }
}

#[cfg(test)]
#[path = "provenance_tests.rs"]
mod tests;
