//! The toHost transform: a tenant object in, the host object tenantplane would write
//! out. Works on any kind as JSON, so core kinds and custom resources share one path.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::kinds::{GroupKind, KindError, Scope, check_syncable};
use crate::metadata::{
    DROPPED_TENANT_ANNOTATIONS, ReverseMapping, is_reserved_key, merge_metadata, reverse_mapping,
};
use crate::name_rules::{NameError, validate_namespace_name, validate_tenant_name};
use crate::naming::{HostName, SourceName, host_name};
use crate::provenance::SourceIdentity;
use crate::selectors::{SelectorRewriteError, SelectorScope, TenantNamespaces, rewrite_selectors};

/// Namespaces of the tenant cluster that are never synced.
pub const SYSTEM_NAMESPACES: &[&str] = &["kube-system", "kube-public", "kube-node-lease"];

/// Whether a virtual namespace is a tenant system namespace.
pub fn is_system_namespace(namespace: &str) -> bool {
    SYSTEM_NAMESPACES.contains(&namespace)
}

/// Objects every tenant API server makes for itself; the host has its own.
pub fn is_tenant_infrastructure(group_kind: &GroupKind, namespace: &str, name: &str) -> bool {
    match (group_kind.group.as_str(), group_kind.kind.as_str()) {
        // The tenant API server's own Service and Endpoints.
        ("", "Service" | "Endpoints") => namespace == "default" && name == "kubernetes",
        // The tenant's cluster CA, published into every namespace.
        ("", "ConfigMap") => name == "kube-root-ca.crt",
        _ => false,
    }
}

/// Metadata fields the API server populates or the host owns; never copied.
const STRIPPED_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
    "generateName",
];

/// Labels the API server puts on a Job's pod template, derived from the Job's UID.
const JOB_GENERATED_LABELS: &[&str] = &[
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
];

/// One TenantCluster as the transform sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantTarget {
    /// The TenantCluster's name.
    pub tenant: String,
    /// The host namespace its objects land in (the TenantCluster's namespace).
    pub host_namespace: String,
}

impl TenantTarget {
    /// Checks both names before anything is derived from them.
    pub fn new(
        tenant: impl Into<String>,
        host_namespace: impl Into<String>,
    ) -> Result<Self, TransformError> {
        let target = Self {
            tenant: tenant.into(),
            host_namespace: host_namespace.into(),
        };
        validate_tenant_name(&target.tenant).map_err(|error| TransformError::InvalidName {
            field: "tenant",
            error,
        })?;
        validate_namespace_name(&target.host_namespace).map_err(|error| {
            TransformError::InvalidName {
                field: "host namespace",
                error,
            }
        })?;
        Ok(target)
    }
}

/// Where a tenant object lands and what it is stamped with: everything about the host
/// object that does not depend on the object's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub group_kind: GroupKind,
    pub virtual_namespace: String,
    pub virtual_name: String,
    pub host_namespace: String,
    pub host_name: HostName,
    pub metadata: ReverseMapping,
}

impl Placement {
    pub fn source_identity(&self, tenant: &str, uid: Option<&str>) -> SourceIdentity {
        SourceIdentity {
            tenant: tenant.to_owned(),
            virtual_namespace: self.virtual_namespace.clone(),
            name: self.virtual_name.clone(),
            group_kind: self.group_kind.clone(),
            uid: uid.map(str::to_owned),
        }
    }
}

/// Why a tenant object cannot be placed on the host. Every variant is a clear
/// refusal of tenant input, never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// The name error is part of the message (not a `source`), so it is said once.
    #[error("invalid {field}: {error}")]
    InvalidName {
        field: &'static str,
        error: NameError,
    },
    #[error(transparent)]
    Kind(#[from] KindError),
    #[error("{namespace} is a tenant system namespace; its objects are never synced")]
    SystemNamespace { namespace: String },
    #[error("{namespace}/{name} is the tenant API server's own {kind}; the host has its own")]
    TenantInfrastructure {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error("the object is not a JSON object with {field}")]
    Malformed { field: &'static str },
    #[error("the object is a {actual}, but the sync was for {expected}")]
    KindMismatch {
        expected: GroupKind,
        actual: GroupKind,
    },
    #[error(transparent)]
    Selector(#[from] SelectorRewriteError),
}

/// Where a tenant object of `group_kind` named `virtual_namespace/name` lands. Used
/// as is by `tenantplane explain-sync`, and by [`to_host`] in the engine.
pub fn place(
    target: &TenantTarget,
    group_kind: &GroupKind,
    scope: Scope,
    virtual_namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Placement, TransformError> {
    place_with(
        target,
        group_kind,
        scope,
        virtual_namespace,
        name,
        uid,
        false,
    )
}

/// [`place`], optionally letting through the tenant's own infrastructure: a Pod that
/// mounts `kube-root-ca.crt` needs that ConfigMap on the host, to trust its own API
/// server, even though the ConfigMap is never synced for its own sake.
fn place_with(
    target: &TenantTarget,
    group_kind: &GroupKind,
    scope: Scope,
    virtual_namespace: &str,
    name: &str,
    uid: Option<&str>,
    allow_infrastructure: bool,
) -> Result<Placement, TransformError> {
    check_syncable(group_kind, scope)?;
    validate_namespace_name(virtual_namespace).map_err(|error| TransformError::InvalidName {
        field: "virtual namespace",
        error,
    })?;
    if is_system_namespace(virtual_namespace) {
        return Err(TransformError::SystemNamespace {
            namespace: virtual_namespace.to_owned(),
        });
    }
    if !allow_infrastructure && is_tenant_infrastructure(group_kind, virtual_namespace, name) {
        return Err(TransformError::TenantInfrastructure {
            kind: group_kind.to_string(),
            namespace: virtual_namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    group_kind
        .name_rule()
        .validate(name)
        .map_err(|error| TransformError::InvalidName {
            field: "name",
            error,
        })?;
    let source = SourceName {
        name,
        virtual_namespace,
        tenant: &target.tenant,
    };
    Ok(Placement {
        group_kind: group_kind.clone(),
        virtual_namespace: virtual_namespace.to_owned(),
        virtual_name: name.to_owned(),
        host_namespace: target.host_namespace.clone(),
        host_name: host_name(&source),
        metadata: reverse_mapping(&source, group_kind, uid),
    })
}

/// The host object for a tenant object: a deep copy renamed and re-namespaced, with
/// reverse-mapping metadata merged over the tenant's own (reserved keys replaced),
/// and every server-populated or host-owned field stripped.
pub fn to_host(
    target: &TenantTarget,
    group_kind: &GroupKind,
    scope: Scope,
    tenant_object: &Value,
) -> Result<(Placement, Value), TransformError> {
    to_host_in(
        target,
        group_kind,
        scope,
        tenant_object,
        &TenantNamespaces::new(),
    )
}

/// [`to_host`] knowing the tenant's namespaces: a NetworkPolicy peer's labelled
/// `namespaceSelector` is evaluated against them (without, it matches nothing).
pub fn to_host_in(
    target: &TenantTarget,
    group_kind: &GroupKind,
    scope: Scope,
    tenant_object: &Value,
    namespaces: &TenantNamespaces,
) -> Result<(Placement, Value), TransformError> {
    to_host_with(target, group_kind, scope, tenant_object, false, namespaces)
}

/// [`to_host`] for an object a synced Pod depends on: the tenant's own
/// infrastructure (its `kube-root-ca.crt`) is copied too.
pub fn dependency_to_host(
    target: &TenantTarget,
    group_kind: &GroupKind,
    tenant_object: &Value,
) -> Result<(Placement, Value), TransformError> {
    let none = TenantNamespaces::new();
    to_host_with(
        target,
        group_kind,
        Scope::Namespaced,
        tenant_object,
        true,
        &none,
    )
}

fn to_host_with(
    target: &TenantTarget,
    group_kind: &GroupKind,
    scope: Scope,
    tenant_object: &Value,
    allow_infrastructure: bool,
    namespaces: &TenantNamespaces,
) -> Result<(Placement, Value), TransformError> {
    let object = tenant_object
        .as_object()
        .ok_or(TransformError::Malformed { field: "metadata" })?;
    let api_version = str_field(object, "apiVersion")?;
    let kind = str_field(object, "kind")?;
    let actual = GroupKind::from_api_version(api_version, kind)?;
    if &actual != group_kind {
        return Err(TransformError::KindMismatch {
            expected: group_kind.clone(),
            actual,
        });
    }
    let meta = object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or(TransformError::Malformed { field: "metadata" })?;
    let name = str_field(meta, "name").map_err(|_| TransformError::Malformed {
        field: "metadata.name",
    })?;
    let namespace = str_field(meta, "namespace").map_err(|_| TransformError::Malformed {
        field: "metadata.namespace",
    })?;
    let uid = meta.get("uid").and_then(Value::as_str);
    let placement = place_with(
        target,
        group_kind,
        scope,
        namespace,
        name,
        uid,
        allow_infrastructure,
    )?;

    let mut host = object.clone();
    host.remove("status");
    let mut host_meta = meta.clone();
    for field in STRIPPED_METADATA {
        host_meta.remove(*field);
    }
    host_meta.insert(
        "name".into(),
        Value::String(placement.host_name.name.clone()),
    );
    host_meta.insert(
        "namespace".into(),
        Value::String(placement.host_namespace.clone()),
    );
    let labels = merge_metadata(
        &string_map(meta.get("labels")),
        &placement.metadata.labels,
        &[],
    );
    let annotations = merge_metadata(
        &string_map(meta.get("annotations")),
        &placement.metadata.annotations,
        DROPPED_TENANT_ANNOTATIONS,
    );
    host_meta.insert("labels".into(), map_value(labels));
    host_meta.insert("annotations".into(), map_value(annotations));
    host.insert("metadata".into(), Value::Object(host_meta));
    strip_reserved_from_templates(&mut host);
    strip_kind_specific(group_kind, &mut host);
    detach_service_account_token(group_kind, &mut host);
    let mut host = Value::Object(host);
    let selector_scope = SelectorScope {
        tenant: &target.tenant,
        virtual_namespace: &placement.virtual_namespace,
    };
    rewrite_selectors(group_kind, &mut host, &selector_scope, namespaces)?;
    if crate::services::ingress::is_ingress(group_kind) {
        crate::services::ingress::rewrite_references(&mut host, namespace, &target.tenant);
    }
    Ok((placement, host))
}

fn str_field<'a>(
    object: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, TransformError> {
    object
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(TransformError::Malformed { field })
}

/// A JSON map of strings (labels, annotations) as a `BTreeMap`; non-strings dropped.
pub(crate) fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn map_value(map: BTreeMap<String, String>) -> Value {
    Value::Object(
        map.into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

/// Pod templates (Deployments, StatefulSets, Jobs, CronJobs, any custom kind with
/// `spec.template` or `spec.jobTemplate`) become host objects the host's own
/// controllers create: reserved keys are dropped there too, so no pod on the host
/// carries a forged tenantplane label.
fn strip_reserved_from_templates(host: &mut Map<String, Value>) {
    let Some(spec) = host.get_mut("spec") else {
        return;
    };
    for pointer in [
        "/template/metadata",
        "/jobTemplate/metadata",
        "/jobTemplate/spec/template/metadata",
    ] {
        let Some(meta) = spec.pointer_mut(pointer).and_then(Value::as_object_mut) else {
            continue;
        };
        for field in ["labels", "annotations"] {
            if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
                map.retain(|key, _| !is_reserved_key(key));
            }
        }
    }
}

/// The type of a Secret the token controller fills and owns.
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotations tying such a Secret to its ServiceAccount.
const SERVICE_ACCOUNT_ANNOTATIONS: [&str; 2] = [
    "kubernetes.io/service-account.name",
    "kubernetes.io/service-account.uid",
];

/// A tenant's legacy ServiceAccount token Secret (what a Pod mounts before bound
/// tokens) crosses as an `Opaque` Secret with the same data, without the annotations
/// naming the account: on the host that type and those annotations would name a
/// host ServiceAccount, and the host's token controller deletes a token Secret whose
/// account it does not find (or refills one it does with a host token). The token
/// inside is the tenant API server's, for the tenant API server.
fn detach_service_account_token(group_kind: &GroupKind, host: &mut Map<String, Value>) {
    if group_kind.group.is_empty()
        && group_kind.kind == "Secret"
        && host.get("type").and_then(Value::as_str) == Some(SERVICE_ACCOUNT_TOKEN_TYPE)
    {
        host.insert("type".into(), Value::String("Opaque".into()));
        if let Some(annotations) = host
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
            .and_then(Value::as_object_mut)
        {
            for key in SERVICE_ACCOUNT_ANNOTATIONS {
                annotations.remove(key);
            }
        }
    }
}

/// Fields of particular kinds that the host allocates (Service IPs and node ports),
/// decides (a Pod's node, a PVC's volume) or the tenant's API server generated.
fn strip_kind_specific(group_kind: &GroupKind, host: &mut Map<String, Value>) {
    let Some(spec) = host.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match (group_kind.group.as_str(), group_kind.kind.as_str()) {
        ("", "Service") => {
            // A headless Service's "None" is the tenant's choice, not an allocation.
            let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
            if !headless {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            spec.remove("healthCheckNodePort");
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    port.remove("nodePort");
                }
            }
        }
        ("", "Pod") => {
            spec.remove("nodeName");
        }
        ("", "PersistentVolumeClaim") => {
            spec.remove("volumeName");
        }
        // The tenant's API server generated the selector from the tenant Job's UID;
        // the host generates its own (unless the tenant chose one).
        ("batch", "Job") if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) => {
            spec.remove("selector");
            let labels = spec
                .get_mut("template")
                .and_then(|t| t.pointer_mut("/metadata/labels"))
                .and_then(Value::as_object_mut);
            if let Some(labels) = labels {
                for key in JOB_GENERATED_LABELS {
                    labels.remove(*key);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[path = "transform_tests.rs"]
mod tests;
