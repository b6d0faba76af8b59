//! What a namespace tenant (`Tenant`) maintains in each member namespace, pure.
//!
//! - RoleBindings: one per owner and ClusterRole (`tenantplane-owner-<hash>`) and
//!   one per additional binding (`tenantplane-binding-<hash>`). Named by a hash of
//!   what they bind, so reordering owners renames nothing and a RoleBinding's
//!   immutable `roleRef` never has to change under a name.
//! - The replicated NetworkPolicies, LimitRanges and ResourceQuotas, named by their
//!   index (`tenantplane-networkpolicy-<i>`, ...): editing one updates it in place.
//! - The IsolationProfile's objects, compiled by the same compiler as a
//!   TenantCluster's boundary.
//! - Namespace metadata: the tenant label, `additionalMetadata` (never a reserved
//!   key) and the profile's Pod Security labels.
//!
//! Every object carries `app.kubernetes.io/managed-by=tenantplane`,
//! `tenantplane.io/tenant=<tenant>` and `tenantplane.io/component=tenant`, and no
//! owner reference: a namespaced object owned by the cluster-scoped Tenant would be
//! deleted by the garbage collector when a Tenant of the same name is recreated.
//! Objects are pruned explicitly instead ([`orphans`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tenantplane_api::{IsolationProfileSpec, OwnerKind, Tenant, TenantOwner};

use crate::isolation::{IsolationError, IsolationInput, PodScope, compile};
use crate::metadata::{
    COMPONENT_TENANT, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
    is_reserved_key,
};

/// Set by Kubernetes on every namespace; `additionalMetadata` must never change it.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// On a member namespace: the label keys tenantplane put there (comma-separated), so
/// a key dropped from the Tenant's spec is removed again and nothing else is.
pub const ANNOTATION_MANAGED_LABELS: &str = "tenantplane.io/managed-labels";
/// The annotation keys tenantplane put on a member namespace.
pub const ANNOTATION_MANAGED_ANNOTATIONS: &str = "tenantplane.io/managed-annotations";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Why a Tenant cannot be planned into a namespace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TenantPlanError {
    #[error("the Tenant has no name")]
    NoName,
    #[error(
        "owner {name:?} of kind ServiceAccount must be written system:serviceaccount:NAMESPACE:NAME"
    )]
    ServiceAccountName { name: String },
    #[error("the IsolationProfile does not compile for namespace {namespace}: {source}")]
    Isolation {
        namespace: String,
        #[source]
        source: IsolationError,
    },
}

/// Every object a Tenant wants in one member namespace, keyed by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberObjects {
    pub role_bindings: BTreeMap<String, RoleBinding>,
    pub network_policies: BTreeMap<String, NetworkPolicy>,
    pub limit_ranges: BTreeMap<String, LimitRange>,
    pub resource_quotas: BTreeMap<String, ResourceQuota>,
}

/// The metadata a Tenant wants on a member namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceMetadata {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Everything a Tenant wants in and on one member namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberPlan {
    pub objects: MemberObjects,
    pub metadata: NamespaceMetadata,
}

/// The labels of every object a Tenant maintains.
pub fn child_labels(tenant: &str) -> BTreeMap<String, String> {
    [
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE),
        (LABEL_TENANT, tenant),
        (LABEL_COMPONENT, COMPONENT_TENANT),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// A label selector for every object `tenant` maintains.
pub fn child_selector(tenant: &str) -> String {
    format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_TENANT}={tenant},{LABEL_COMPONENT}={COMPONENT_TENANT}"
    )
}

/// Whether labels mark an object as one `tenant` maintains. Anything else, even
/// under a name tenantplane would use, is never written or deleted.
pub fn is_tenant_child(labels: &BTreeMap<String, String>, tenant: &str) -> bool {
    child_labels(tenant)
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// The live objects to delete: labelled as `tenant`'s and no longer wanted.
pub fn orphans<'a>(
    tenant: &str,
    wanted: &BTreeSet<String>,
    live: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Vec<String> {
    live.into_iter()
        .filter(|(name, labels)| is_tenant_child(labels, tenant) && !wanted.contains(*name))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The plan for `tenant` in member namespace `namespace`; `profile` is the resolved
/// `isolationProfileRef` (`None` when the Tenant references none).
pub fn plan_member(
    tenant: &Tenant,
    namespace: &str,
    profile: Option<&IsolationProfileSpec>,
) -> Result<MemberPlan, TenantPlanError> {
    let name = tenant
        .metadata
        .name
        .as_deref()
        .ok_or(TenantPlanError::NoName)?;
    let meta = |object_name: String| ObjectMeta {
        name: Some(object_name),
        namespace: Some(namespace.to_owned()),
        labels: Some(child_labels(name)),
        ..ObjectMeta::default()
    };
    let mut objects = MemberObjects::default();
    for owner in &tenant.spec.owners {
        let subject = owner_subject(owner)?;
        for role in &owner.cluster_roles {
            let object_name = owner_binding_name(owner, role);
            let binding = role_binding(meta(object_name.clone()), role, vec![subject.clone()]);
            objects.role_bindings.insert(object_name, binding);
        }
    }
    for extra in &tenant.spec.additional_role_bindings {
        let object_name = additional_binding_name(&extra.cluster_role_name, &extra.subjects);
        let binding = role_binding(
            meta(object_name.clone()),
            &extra.cluster_role_name,
            extra.subjects.clone(),
        );
        objects.role_bindings.insert(object_name, binding);
    }
    for (i, spec) in tenant.spec.network_policies.iter().enumerate() {
        let object_name = format!("tenantplane-networkpolicy-{i}");
        let policy = NetworkPolicy {
            metadata: meta(object_name.clone()),
            spec: Some(spec.clone()),
        };
        objects.network_policies.insert(object_name, policy);
    }
    for (i, spec) in tenant.spec.limit_ranges.iter().enumerate() {
        let object_name = format!("tenantplane-limitrange-{i}");
        let limits = LimitRange {
            metadata: meta(object_name.clone()),
            spec: Some(spec.clone()),
        };
        objects.limit_ranges.insert(object_name, limits);
    }
    for (i, spec) in tenant.spec.resource_quotas.iter().enumerate() {
        let object_name = format!("tenantplane-resourcequota-{i}");
        let quota = ResourceQuota {
            metadata: meta(object_name.clone()),
            spec: Some(spec.clone()),
            status: None,
        };
        objects.resource_quotas.insert(object_name, quota);
    }

    let mut labels: BTreeMap<String, String> =
        allowed_metadata(&tenant.spec.namespace_options.additional_metadata.labels);
    let annotations = allowed_metadata(
        &tenant
            .spec
            .namespace_options
            .additional_metadata
            .annotations,
    );
    if let Some(profile) = profile {
        let compiled = compile(&IsolationInput {
            // A namespace tenant owns its namespaces whole.
            pods: PodScope::Namespace,
            tenant: name,
            host_namespace: namespace,
            profile,
            resources: None,
            egress: tenantplane_api::EgressPolicy::AllowDns,
        })
        .map_err(|source| TenantPlanError::Isolation {
            namespace: namespace.to_owned(),
            source,
        })?;
        // The profile wins over additionalMetadata: the boundary is not negotiable.
        labels.extend(compiled.namespace.metadata.labels.unwrap_or_default());
        let relabel = |mut m: ObjectMeta| {
            m.labels = Some(child_labels(name));
            m
        };
        if let Some(mut np) = compiled.network_policy {
            np.metadata = relabel(np.metadata);
            objects
                .network_policies
                .insert(np.metadata.name.clone().unwrap_or_default(), np);
        }
        if let Some(mut lr) = compiled.limit_range {
            lr.metadata = relabel(lr.metadata);
            objects
                .limit_ranges
                .insert(lr.metadata.name.clone().unwrap_or_default(), lr);
        }
        if let Some(mut rq) = compiled.resource_quota {
            rq.metadata = relabel(rq.metadata);
            objects
                .resource_quotas
                .insert(rq.metadata.name.clone().unwrap_or_default(), rq);
        }
    }
    let mut metadata = NamespaceMetadata {
        labels,
        annotations,
    };
    // The bookkeeping lists exactly the keys above; the tenant label is always ours.
    metadata.annotations.insert(
        ANNOTATION_MANAGED_LABELS.to_owned(),
        join_keys(metadata.labels.keys()),
    );
    let managed_annotations = join_keys(metadata.annotations.keys());
    metadata.annotations.insert(
        ANNOTATION_MANAGED_ANNOTATIONS.to_owned(),
        managed_annotations,
    );
    metadata
        .labels
        .insert(LABEL_TENANT.to_owned(), name.to_owned());
    Ok(MemberPlan { objects, metadata })
}

/// `additionalMetadata` without the keys it may never set.
fn allowed_metadata(wanted: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    wanted
        .iter()
        .filter(|(k, _)| !is_reserved_key(k) && k.as_str() != NAMESPACE_NAME_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn join_keys<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    keys.filter(|k| !k.starts_with("tenantplane.io/managed-"))
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

fn split_keys(value: Option<&String>) -> BTreeSet<&str> {
    value
        .map(|v| v.split(',').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default()
}

/// The merge patch that brings a member namespace's metadata to `wanted`, or `None`
/// when it already holds it. Keys tenantplane set earlier (recorded in the
/// bookkeeping annotations) and no longer wants are removed; no other key is touched.
pub fn namespace_metadata_patch(
    wanted: &NamespaceMetadata,
    live_labels: &BTreeMap<String, String>,
    live_annotations: &BTreeMap<String, String>,
) -> Option<Value> {
    let labels = map_patch(
        &wanted.labels,
        live_labels,
        &split_keys(live_annotations.get(ANNOTATION_MANAGED_LABELS)),
    );
    let annotations = map_patch(
        &wanted.annotations,
        live_annotations,
        &split_keys(live_annotations.get(ANNOTATION_MANAGED_ANNOTATIONS)),
    );
    metadata_patch(labels, annotations)
}

fn map_patch(
    wanted: &BTreeMap<String, String>,
    live: &BTreeMap<String, String>,
    previously: &BTreeSet<&str>,
) -> Map<String, Value> {
    let mut patch: Map<String, Value> = wanted
        .iter()
        .filter(|(k, v)| live.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    for key in previously {
        if !wanted.contains_key(*key) && live.contains_key(*key) && !is_protected(key) {
            patch.insert((*key).to_owned(), Value::Null);
        }
    }
    patch
}

/// Keys a forged bookkeeping annotation must never make tenantplane remove: the
/// namespace's name label and every reserved key but tenantplane's own here.
fn is_protected(key: &str) -> bool {
    let ours = [
        LABEL_TENANT,
        ANNOTATION_MANAGED_LABELS,
        ANNOTATION_MANAGED_ANNOTATIONS,
    ];
    key == NAMESPACE_NAME_LABEL || (is_reserved_key(key) && !ours.contains(&key))
}

fn metadata_patch(labels: Map<String, Value>, annotations: Map<String, Value>) -> Option<Value> {
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    (!metadata.is_empty()).then(|| json!({ "metadata": metadata }))
}

/// The merge patch that releases a namespace from the Tenant with UID `tenant_uid`:
/// its owner reference and the tenant label go, as do the metadata keys tenantplane
/// recorded putting there. `None` when the namespace holds nothing of the tenant's.
/// The caller adds `metadata.resourceVersion`, so a concurrent change makes it fail
/// rather than drop someone else's owner reference.
pub fn release_patch(
    owner_references: &[OwnerReference],
    tenant_uid: &str,
    live_labels: &BTreeMap<String, String>,
    live_annotations: &BTreeMap<String, String>,
) -> Option<Value> {
    let remaining: Vec<&OwnerReference> = owner_references
        .iter()
        .filter(|r| r.uid != tenant_uid)
        .collect();
    let nothing = NamespaceMetadata::default();
    let mut previously = split_keys(live_annotations.get(ANNOTATION_MANAGED_LABELS));
    previously.insert(LABEL_TENANT);
    let labels = map_patch(&nothing.labels, live_labels, &previously);
    let mut previously = split_keys(live_annotations.get(ANNOTATION_MANAGED_ANNOTATIONS));
    previously.insert(ANNOTATION_MANAGED_LABELS);
    previously.insert(ANNOTATION_MANAGED_ANNOTATIONS);
    let annotations = map_patch(&nothing.annotations, live_annotations, &previously);
    let mut patch = metadata_patch(labels, annotations);
    if remaining.len() != owner_references.len() {
        let value = patch.get_or_insert_with(|| json!({"metadata": {}}));
        value["metadata"]["ownerReferences"] = json!(remaining);
    }
    patch
}

fn role_binding(metadata: ObjectMeta, cluster_role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata,
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: cluster_role.to_owned(),
        },
        subjects: Some(subjects),
    }
}

/// The RBAC subject of a tenant owner.
pub fn owner_subject(owner: &TenantOwner) -> Result<Subject, TenantPlanError> {
    Ok(match owner.kind {
        OwnerKind::User | OwnerKind::Group => Subject {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: if owner.kind == OwnerKind::User {
                "User"
            } else {
                "Group"
            }
            .to_owned(),
            name: owner.name.clone(),
            namespace: None,
        },
        OwnerKind::ServiceAccount => {
            let invalid = || TenantPlanError::ServiceAccountName {
                name: owner.name.clone(),
            };
            let (namespace, name) = owner
                .name
                .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                .and_then(|rest| rest.split_once(':'))
                .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains(':'))
                .ok_or_else(invalid)?;
            Subject {
                api_group: None,
                kind: "ServiceAccount".to_owned(),
                name: name.to_owned(),
                namespace: Some(namespace.to_owned()),
            }
        }
    })
}

fn short_hash(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
        hasher.update(part.len().to_le_bytes());
        hasher.update(part.as_bytes());
    }
    crate::hex::short_hex(hasher.finalize(), 6)
}

/// `tenantplane-owner-<12 hex>`: stable for one (owner, ClusterRole).
pub fn owner_binding_name(owner: &TenantOwner, cluster_role: &str) -> String {
    let kind = format!("{:?}", owner.kind);
    format!(
        "tenantplane-owner-{}",
        short_hash(&[&kind, &owner.name, cluster_role])
    )
}

/// `tenantplane-binding-<12 hex>`: stable for one (ClusterRole, subjects).
pub fn additional_binding_name(cluster_role: &str, subjects: &[Subject]) -> String {
    let subjects: Vec<String> = subjects
        .iter()
        .map(|s| {
            format!(
                "{}/{}/{}/{}",
                s.api_group.as_deref().unwrap_or_default(),
                s.kind,
                s.namespace.as_deref().unwrap_or_default(),
                s.name
            )
        })
        .collect();
    let mut parts = vec![cluster_role];
    parts.extend(subjects.iter().map(String::as_str));
    format!("tenantplane-binding-{}", short_hash(&parts))
}

#[cfg(test)]
#[path = "tenant_plan_tests.rs"]
mod tests;
