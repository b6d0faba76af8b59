//! Pure rules of the namespace-tenant admission webhooks: who is an admin, which
//! namespace metadata changes move a namespace between tenants, and the class and
//! node-selector restrictions a Tenant puts on objects in its namespaces.
//!
//! Tenant membership is decided by owner reference + UID only (see
//! [`crate::tenancy::is_tenant_owner_reference`]); the `tenantplane.io/tenant` label
//! is a pre-filter for selectors and lists, never proof.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tenantplane_api::{AllowedClasses, Tenant};

use crate::tenancy::Requester;

/// The label that names a member namespace's tenant (a selector pre-filter).
pub const TENANT_LABEL: &str = "tenantplane.io/tenant";
/// The group whose members may do anything (the API server's own superusers).
pub const MASTERS_GROUP: &str = "system:masters";
/// tenantplane's controller, as installed by `deploy/install/`.
pub const DEFAULT_CONTROLLER_USER: &str = "system:serviceaccount:tenantplane-system:tenantplane";

/// Who the tenant webhooks treat as an admin: allowed to move namespaces between
/// tenants and to write in cordoned tenants. Tenant owners are never admins.
///
/// Always admins: `system:masters` members, the cluster's own `system:` users
/// (`system:kube-controller-manager`, `system:node:*`, ...) and the service accounts
/// of `kube-system` (the controllers when `--use-service-account-credentials` is on).
/// Configurable: extra groups (`--admin-group`) and users (`--admin-user`, tenantplane's
/// controller service account by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admins {
    pub groups: Vec<String>,
    pub users: Vec<String>,
}

impl Default for Admins {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            users: vec![DEFAULT_CONTROLLER_USER.to_owned()],
        }
    }
}

impl Admins {
    /// Whether `requester` is an admin.
    pub fn contains(&self, requester: &Requester<'_>) -> bool {
        let user = requester.username;
        let system_user = user.starts_with("system:")
            && (!user.starts_with("system:serviceaccount:")
                || user.starts_with("system:serviceaccount:kube-system:"));
        system_user
            || self.users.iter().any(|u| u == user)
            || requester
                .groups
                .iter()
                .any(|g| g == MASTERS_GROUP || self.groups.contains(g))
    }
}

/// Whether `reference` points at a Tenant (any name or UID): the references a
/// non-admin may neither add, remove nor change.
pub fn is_tenant_reference(reference: &OwnerReference) -> bool {
    reference.kind == "Tenant"
        && reference.api_version.split_once('/').map(|(g, _)| g) == Some(tenantplane_api::GROUP)
}

/// The tenant identity of a namespace's metadata: its Tenant owner references (as
/// name and UID), its tenant label, and its other owner references (as group, kind,
/// name and UID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantIdentity {
    pub references: BTreeSet<(String, String)>,
    pub label: Option<String>,
    pub other_owners: BTreeSet<(String, String, String, String)>,
}

impl TenantIdentity {
    pub fn of(
        references: Option<&[OwnerReference]>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Self {
        Self {
            references: references
                .unwrap_or_default()
                .iter()
                .filter(|r| is_tenant_reference(r))
                .map(|r| (r.name.clone(), r.uid.clone()))
                .collect(),
            label: labels.and_then(|l| l.get(TENANT_LABEL)).cloned(),
            other_owners: references
                .unwrap_or_default()
                .iter()
                .filter(|r| !is_tenant_reference(r))
                .map(|r| {
                    let group = r.api_version.split_once('/').map_or("", |(g, _)| g);
                    (
                        group.to_owned(),
                        r.kind.clone(),
                        r.name.clone(),
                        r.uid.clone(),
                    )
                })
                .collect(),
        }
    }
}

/// Why a non-admin's namespace update is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityChange {
    #[error(
        "only an admin may change a namespace's Tenant owner references (moving it into, out of or between tenants): {before} -> {after}"
    )]
    References { before: String, after: String },
    #[error("only an admin may change a namespace's {TENANT_LABEL} label: {before} -> {after}")]
    Label { before: String, after: String },
    /// Any owner reference: a namespace owned by an object its owner can delete is
    /// deleted by the garbage collector with it (kube-system owned by a tenant's
    /// namespace would go when that namespace goes).
    #[error(
        "only an admin may change a namespace's owner references (the garbage collector deletes a namespace with its owners)"
    )]
    OtherOwners,
}

/// Refuses any change of the tenant identity by a non-admin: adding (claiming an
/// unowned namespace or forging a UID), removing (escaping the tenant) or changing a
/// Tenant owner reference, forging or removing the tenant label, and adding or
/// removing any other owner reference. The same rule
/// holds for every path (PUT, merge/JSON/apply patches, `status` and `finalize`),
/// because all of them reach admission as an old and a new object.
pub fn unchanged_identity(
    old: &TenantIdentity,
    new: &TenantIdentity,
) -> Result<(), IdentityChange> {
    if old.references != new.references {
        return Err(IdentityChange::References {
            before: describe_references(&old.references),
            after: describe_references(&new.references),
        });
    }
    if old.label != new.label {
        let show = |l: &Option<String>| {
            l.as_deref()
                .map_or("(none)".to_owned(), |v| format!("{v:?}"))
        };
        return Err(IdentityChange::Label {
            before: show(&old.label),
            after: show(&new.label),
        });
    }
    if old.other_owners != new.other_owners {
        return Err(IdentityChange::OtherOwners);
    }
    Ok(())
}

fn describe_references(references: &BTreeSet<(String, String)>) -> String {
    if references.is_empty() {
        return "(none)".to_owned();
    }
    let list: Vec<String> = references
        .iter()
        .map(|(name, uid)| format!("Tenant {name} (uid {uid})"))
        .collect();
    list.join(", ")
}

/// Why a namespace created by a non-admin may not carry the tenant identity it asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a new namespace may carry only the Tenant owner reference and {TENANT_LABEL} label of the tenant it joins ({joins}); it asks for {asked}"
)]
pub struct ForgedIdentity {
    pub joins: String,
    pub asked: String,
}

/// On CREATE by a non-admin: the object may name no tenant but `joins` (the one the
/// webhook assigns, by name and UID, or none for a user who owns no Tenant).
pub fn creation_identity(
    asked: &TenantIdentity,
    joins: Option<(&str, &str)>,
) -> Result<(), ForgedIdentity> {
    let fits_reference = asked
        .references
        .iter()
        .all(|(name, uid)| joins.is_some_and(|(n, u)| n == name && u == uid));
    let fits_label = asked
        .label
        .as_deref()
        .is_none_or(|label| joins.is_some_and(|(n, _)| n == label));
    if fits_reference && fits_label {
        return Ok(());
    }
    let mut asked_list: Vec<String> = asked
        .references
        .iter()
        .map(|(name, uid)| format!("Tenant {name} (uid {uid})"))
        .collect();
    if let Some(label) = &asked.label {
        asked_list.push(format!("label {TENANT_LABEL}={label}"));
    }
    Err(ForgedIdentity {
        joins: joins.map_or("no tenant".to_owned(), |(n, _)| format!("Tenant {n}")),
        asked: asked_list.join(", "),
    })
}

/// The kinds of class a Tenant restricts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKind {
    Storage,
    Priority,
    Runtime,
    Ingress,
}

impl ClassKind {
    /// The Tenant spec field that lists the allowed classes.
    pub fn field(self) -> &'static str {
        match self {
            Self::Storage => "storageClasses",
            Self::Priority => "priorityClasses",
            Self::Runtime => "runtimeClasses",
            Self::Ingress => "ingressClasses",
        }
    }

    /// The tenant's rules for this kind.
    pub fn rules(self, tenant: &Tenant) -> Option<&AllowedClasses> {
        match self {
            Self::Storage => tenant.spec.storage_classes.as_ref(),
            Self::Priority => tenant.spec.priority_classes.as_ref(),
            Self::Runtime => tenant.spec.runtime_classes.as_ref(),
            Self::Ingress => tenant.spec.ingress_classes.as_ref(),
        }
    }
}

/// A class the tenant does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "Tenant {tenant} does not allow {kind:?} class {class:?} (spec.{field}): use one of {allowed}"
)]
pub struct ClassRefused {
    pub tenant: String,
    pub kind: ClassKind,
    pub field: &'static str,
    pub class: String,
    pub allowed: String,
}

/// Checks the class an object asks for. `Ok(Some(default))`: none was given, inject
/// the tenant's default; `Ok(None)`: leave the object as it is. A tenant without
/// rules for `kind` allows anything. The default is always allowed.
pub fn check_class(
    tenant: &Tenant,
    kind: ClassKind,
    requested: Option<&str>,
) -> Result<Option<String>, ClassRefused> {
    let Some(rules) = kind.rules(tenant) else {
        return Ok(None);
    };
    let Some(class) = requested.filter(|c| !c.is_empty()) else {
        return Ok(rules.default.clone());
    };
    if rules.allowed.iter().any(|a| a == class) || rules.default.as_deref() == Some(class) {
        return Ok(None);
    }
    let allowed: BTreeSet<&str> = rules
        .allowed
        .iter()
        .map(String::as_str)
        .chain(rules.default.as_deref())
        .collect();
    Err(ClassRefused {
        tenant: tenant.metadata.name.clone().unwrap_or_default(),
        kind,
        field: kind.field(),
        class: class.to_owned(),
        allowed: if allowed.is_empty() {
            "none (name no class)".to_owned()
        } else {
            allowed.into_iter().collect::<Vec<_>>().join(", ")
        },
    })
}

/// A pod's node selector that contradicts its tenant's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "Tenant {tenant} places its pods with nodeSelector {key}={required:?}; the pod asks for {key}={asked:?}"
)]
pub struct NodeSelectorConflict {
    pub tenant: String,
    pub key: String,
    pub required: String,
    pub asked: String,
}

/// The tenant's node-selector entries the pod lacks (to inject), or the first entry
/// it contradicts.
pub fn missing_node_selector(
    tenant: &Tenant,
    pod: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, NodeSelectorConflict> {
    let mut missing = BTreeMap::new();
    for (key, required) in &tenant.spec.node_selector {
        match pod.get(key) {
            None => {
                missing.insert(key.clone(), required.clone());
            }
            Some(asked) if asked == required => {}
            Some(asked) => {
                return Err(NodeSelectorConflict {
                    tenant: tenant.metadata.name.clone().unwrap_or_default(),
                    key: key.clone(),
                    required: required.clone(),
                    asked: asked.clone(),
                });
            }
        }
    }
    Ok(missing)
}

/// The refusal of a write in a cordoned tenant's namespace, if it is cordoned.
pub fn cordon_refusal(tenant: &Tenant, namespace: &str) -> Option<String> {
    tenant.spec.cordoned.then(|| {
        format!(
            "Tenant {} is cordoned (spec.cordoned): writes in its namespace {namespace} are refused until an admin uncordons it",
            tenant.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

#[cfg(test)]
#[path = "tenant_admission_tests.rs"]
mod tests;
