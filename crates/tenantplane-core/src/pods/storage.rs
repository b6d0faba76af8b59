//! A tenant PersistentVolumeClaim, the PersistentVolume bound to it and the CSI
//! Secrets of that volume, as host objects. The host PV is cluster-scoped, so its
//! name and metadata carry the tenant's identity (TenantCluster and host namespace):
//! two tenants can never share one host PV.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::kinds::{GroupKind, Scope};
use crate::metadata::{
    ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, LABEL_KIND, LABEL_MANAGED_BY,
    LABEL_TENANT, MANAGED_BY_VALUE, is_reserved_key,
};
use crate::naming::{SourceName, host_name};
use crate::transform::{Placement, TenantTarget, TransformError, string_map, to_host};

use super::host_pod::dependency_host_name;

/// On a host PV: the host namespace of the TenantCluster it was copied for.
pub const ANNOTATION_TENANT_NAMESPACE: &str = "tenantplane.io/tenant-namespace";

/// Annotations the tenant's PV controller writes about its own binding; on the
/// host they would describe a binding that never happened there.
const BINDING_ANNOTATIONS: &[&str] = &[
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/selected-node",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// The CSI secret references of a PV spec.
const CSI_SECRET_REFS: [&str; 5] = [
    "nodePublishSecretRef",
    "nodeStageSecretRef",
    "controllerPublishSecretRef",
    "controllerExpandSecretRef",
    "nodeExpandSecretRef",
];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error(
        "PersistentVolumeClaim {namespace}/{name} is not Bound yet (phase {phase}); the Pod waits for it"
    )]
    NotBound {
        namespace: String,
        name: String,
        phase: String,
    },
    #[error("PersistentVolume {name} is malformed: no {field}")]
    Malformed { name: String, field: &'static str },
}

/// The host name of tenant PV `pv`: `<pv>-x-<host namespace>-x-<tenant>` (hashed when
/// needed), from the one naming function.
pub fn pv_host_name(target: &TenantTarget, pv: &str) -> String {
    host_name(&SourceName {
        name: pv,
        virtual_namespace: &target.host_namespace,
        tenant: &target.tenant,
    })
    .name
}

/// The name of the PV a Bound tenant PVC uses.
pub fn bound_volume(pvc: &Value) -> Result<String, StorageError> {
    let meta = |f: &str| {
        pvc.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let phase = pvc
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let volume = pvc
        .pointer("/spec/volumeName")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty());
    match (phase, volume) {
        ("Bound", Some(volume)) => Ok(volume.to_owned()),
        _ => Err(StorageError::NotBound {
            namespace: meta("namespace"),
            name: meta("name"),
            phase: phase.to_owned(),
        }),
    }
}

/// The host PVC: the generic copy, bound by name to the host copy of its PV.
pub fn host_pvc(
    target: &TenantTarget,
    tenant_pvc: &Value,
) -> Result<(Placement, Value), StorageError> {
    let volume = bound_volume(tenant_pvc)?;
    let (placement, mut object) = to_host(
        target,
        &GroupKind::new("", "PersistentVolumeClaim"),
        Scope::Namespaced,
        tenant_pvc,
    )?;
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        for key in BINDING_ANNOTATIONS {
            annotations.remove(*key);
        }
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(
            "volumeName".into(),
            Value::String(pv_host_name(target, &volume)),
        );
    }
    Ok((placement, object))
}

/// A CSI Secret a PV needs, in the tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSecret {
    pub namespace: String,
    pub name: String,
    /// `spec.csi.nodePublishSecretRef`, ...
    pub field: String,
}

/// The CSI Secrets of a tenant PV.
pub fn volume_secrets(pv: &Value) -> Vec<VolumeSecret> {
    let Some(csi) = pv.pointer("/spec/csi") else {
        return Vec::new();
    };
    CSI_SECRET_REFS
        .iter()
        .filter_map(|key| {
            let r = csi.get(*key)?;
            Some(VolumeSecret {
                namespace: r.get("namespace").and_then(Value::as_str)?.to_owned(),
                name: r.get("name").and_then(Value::as_str)?.to_owned(),
                field: format!("spec.csi.{key}"),
            })
        })
        .collect()
}

/// The host PV for tenant PV `tenant_pv`, claimed by the host copy of its PVC.
/// Retained on release: deleting the copy must never delete the tenant's volume.
pub fn host_pv(
    target: &TenantTarget,
    tenant_pv: &Value,
    host_pvc_name: &str,
) -> Result<Value, StorageError> {
    let name = tenant_pv
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or(StorageError::Malformed {
            name: String::new(),
            field: "metadata.name",
        })?;
    let mut spec = tenant_pv
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| StorageError::Malformed {
            name: name.to_owned(),
            field: "spec",
        })?;
    spec.insert(
        "claimRef".into(),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": target.host_namespace, "name": host_pvc_name}),
    );
    spec.insert(
        "persistentVolumeReclaimPolicy".into(),
        Value::String("Retain".into()),
    );
    if let Some(csi) = spec.get_mut("csi").and_then(Value::as_object_mut) {
        for key in CSI_SECRET_REFS {
            let Some(r) = csi.get_mut(key).and_then(Value::as_object_mut) else {
                continue;
            };
            let (Some(ns), Some(n)) = (
                r.get("namespace").and_then(Value::as_str),
                r.get("name").and_then(Value::as_str),
            ) else {
                continue;
            };
            let host = dependency_host_name(target, ns, n);
            r.insert("name".into(), Value::String(host));
            r.insert(
                "namespace".into(),
                Value::String(target.host_namespace.clone()),
            );
        }
    }
    let meta = tenant_pv.get("metadata");
    let keep = |m: BTreeMap<String, String>| -> Map<String, Value> {
        m.into_iter()
            .filter(|(k, _)| !is_reserved_key(k) && !BINDING_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k, Value::String(v)))
            .collect()
    };
    let mut labels = keep(string_map(meta.and_then(|m| m.get("labels"))));
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
    labels.insert(LABEL_TENANT.into(), Value::String(target.tenant.clone()));
    labels.insert(LABEL_KIND.into(), "PersistentVolume".into());
    let mut annotations = keep(string_map(meta.and_then(|m| m.get("annotations"))));
    annotations.insert(
        ANNOTATION_VIRTUAL_NAME.into(),
        Value::String(name.to_owned()),
    );
    annotations.insert(
        ANNOTATION_VIRTUAL_GROUP_KIND.into(),
        "PersistentVolume".into(),
    );
    annotations.insert(
        ANNOTATION_TENANT_NAMESPACE.into(),
        Value::String(target.host_namespace.clone()),
    );
    Ok(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_host_name(target, name), "labels": labels, "annotations": annotations},
        "spec": spec,
    }))
}

/// Whether a host PV was made by tenantplane from tenant PV `pv` of `target`:
/// only then may it be updated or deleted.
pub fn pv_is_ours(target: &TenantTarget, pv: &str, observed: &Value) -> bool {
    let labels = string_map(observed.pointer("/metadata/labels"));
    let annotations = string_map(observed.pointer("/metadata/annotations"));
    let name = observed.pointer("/metadata/name").and_then(Value::as_str);
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_TENANT) == Some(&target.tenant)
        && annotations.get(ANNOTATION_TENANT_NAMESPACE) == Some(&target.host_namespace)
        && annotations.get(ANNOTATION_VIRTUAL_NAME).map(String::as_str) == Some(pv)
        && name == Some(pv_host_name(target, pv).as_str())
}

/// The tenant PV that host PV `observed` is `target`'s copy of, if it is one (its
/// virtual-name annotation, checked with [`pv_is_ours`]).
pub fn copied_volume<'a>(target: &TenantTarget, observed: &'a Value) -> Option<&'a str> {
    let virtual_name = observed
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_VIRTUAL_NAME))
        .and_then(Value::as_str)?;
    pv_is_ours(target, virtual_name, observed).then_some(virtual_name)
}

/// Host names of the Secrets that `target`'s live host PV copies point at (their CSI
/// secret references). Such a Secret stays while the copy lives, whatever Pods use:
/// the kubelet needs it for every mount of the volume, and no Pod names it.
pub fn secrets_held_by_volumes<'a>(
    target: &TenantTarget,
    host_pvs: impl IntoIterator<Item = &'a Value>,
) -> BTreeSet<String> {
    let mut held = BTreeSet::new();
    for pv in host_pvs {
        if copied_volume(target, pv).is_none()
            || pv.pointer("/metadata/deletionTimestamp").is_some()
        {
            continue;
        }
        let Some(csi) = pv.pointer("/spec/csi") else {
            continue;
        };
        for key in CSI_SECRET_REFS {
            let Some(r) = csi.get(key) else { continue };
            if r.get("namespace").and_then(Value::as_str) == Some(target.host_namespace.as_str())
                && let Some(name) = r.get("name").and_then(Value::as_str)
            {
                held.insert(name.to_owned());
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(tenant: &str, ns: &str) -> TenantTarget {
        TenantTarget::new(tenant, ns).unwrap()
    }

    fn pvc(phase: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": "shop", "uid": "pvc-uid",
                            "annotations": {"pv.kubernetes.io/bind-completed": "yes", "keep": "me"}},
               "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1", "storageClassName": "fast",
                        "resources": {"requests": {"storage": "1Gi"}}},
               "status": {"phase": phase}})
    }

    fn pv() -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
               "metadata": {"name": "pv-1", "uid": "pv-uid", "labels": {"tier": "a", "tenantplane.io/tenant": "forged"},
                            "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                        "persistentVolumeReclaimPolicy": "Delete",
                        "claimRef": {"namespace": "shop", "name": "data", "uid": "pvc-uid"},
                        "csi": {"driver": "x.csi", "volumeHandle": "h",
                                "nodePublishSecretRef": {"name": "csi-creds", "namespace": "storage"}}},
               "status": {"phase": "Bound"}})
    }

    #[test]
    fn a_pvc_waits_until_bound() {
        assert_eq!(
            host_pvc(&target("dev", "team-dev"), &pvc("Pending"))
                .unwrap_err()
                .to_string(),
            "PersistentVolumeClaim shop/data is not Bound yet (phase Pending); the Pod waits for it"
        );
    }

    #[test]
    fn the_host_pvc_binds_to_the_host_pv() {
        let t = target("dev", "team-dev");
        let (placement, object) = host_pvc(&t, &pvc("Bound")).unwrap();
        assert_eq!(placement.host_name.name, "data-x-shop-x-dev");
        assert_eq!(object["spec"]["volumeName"], "pv-1-x-team-dev-x-dev");
        assert!(object.get("status").is_none());
        let annotations = object["metadata"]["annotations"].as_object().unwrap();
        assert!(!annotations.contains_key("pv.kubernetes.io/bind-completed"));
        assert_eq!(annotations["keep"], "me");
    }

    #[test]
    fn the_host_pv_carries_the_tenant_identity_claim_and_retain() {
        let t = target("dev", "team-dev");
        let host = host_pv(&t, &pv(), "data-x-shop-x-dev").unwrap();
        assert_eq!(host["metadata"]["name"], "pv-1-x-team-dev-x-dev");
        assert_eq!(host["metadata"]["labels"]["tenantplane.io/tenant"], "dev");
        assert_eq!(host["metadata"]["labels"]["tier"], "a");
        assert_eq!(
            host["metadata"]["annotations"][ANNOTATION_TENANT_NAMESPACE],
            "team-dev"
        );
        assert!(
            host["metadata"]["annotations"]
                .get("pv.kubernetes.io/bound-by-controller")
                .is_none()
        );
        assert_eq!(
            host["spec"]["claimRef"],
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "team-dev", "name": "data-x-shop-x-dev"})
        );
        assert_eq!(host["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(
            host["spec"]["csi"]["nodePublishSecretRef"],
            json!({"name": "csi-creds-x-storage-x-dev", "namespace": "team-dev"})
        );
        assert!(host.get("status").is_none() && host["metadata"].get("uid").is_none());
        assert!(pv_is_ours(&t, "pv-1", &host));
        assert_eq!(
            volume_secrets(&pv()),
            vec![VolumeSecret {
                namespace: "storage".into(),
                name: "csi-creds".into(),
                field: "spec.csi.nodePublishSecretRef".into()
            }]
        );
    }

    #[test]
    fn two_tenants_never_share_a_host_pv() {
        let a = target("dev", "team-a");
        let b = target("dev", "team-b");
        let c = target("prod", "team-a");
        assert_ne!(pv_host_name(&a, "pv-1"), pv_host_name(&b, "pv-1"));
        assert_ne!(pv_host_name(&a, "pv-1"), pv_host_name(&c, "pv-1"));
        let host_a = host_pv(&a, &pv(), "x").unwrap();
        assert!(!pv_is_ours(&b, "pv-1", &host_a));
        assert!(!pv_is_ours(&c, "pv-1", &host_a));
        assert!(!pv_is_ours(&a, "pv-2", &host_a));
    }

    #[test]
    fn malformed_pvs_are_errors() {
        let t = target("dev", "team-dev");
        assert!(host_pv(&t, &json!({}), "x").is_err());
        assert!(host_pv(&t, &json!({"metadata": {"name": "p"}}), "x").is_err());
        assert!(
            volume_secrets(&json!({"spec": {"csi": {"nodePublishSecretRef": {"name": "x"}}}}))
                .is_empty()
        );
    }

    #[test]
    fn live_volume_copies_hold_their_csi_secrets() {
        let t = target("dev", "team-dev");
        let mut tenant_pv = pv();
        tenant_pv["spec"]["csi"]["nodeStageSecretRef"] =
            json!({"name": "stage", "namespace": "storage"});
        let copy = host_pv(&t, &tenant_pv, "data-x-shop-x-dev").unwrap();
        assert_eq!(copied_volume(&t, &copy), Some("pv-1"));
        let held = secrets_held_by_volumes(&t, [&copy]);
        assert_eq!(
            held,
            BTreeSet::from([
                dependency_host_name(&t, "storage", "csi-creds"),
                dependency_host_name(&t, "storage", "stage"),
            ])
        );
        // Another tenant's copy, a copy being deleted, and a foreign PV hold nothing.
        let other = target("dev", "team-other");
        assert_eq!(copied_volume(&other, &copy), None);
        assert!(secrets_held_by_volumes(&other, [&copy]).is_empty());
        let mut deleting = copy.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(secrets_held_by_volumes(&t, [&deleting]).is_empty());
        let mut foreign = copy.clone();
        foreign["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(LABEL_MANAGED_BY);
        assert!(secrets_held_by_volumes(&t, [&foreign]).is_empty());
    }
}
