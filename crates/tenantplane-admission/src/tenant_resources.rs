//! `POST /tenant-resources`: the mutating admission of writes inside tenant
//! namespaces.
//!
//! The webhook configuration sends only namespaces labelled `tenantplane.io/tenant`
//! (a pre-filter that works on Kubernetes 1.20, which has no
//! `kubernetes.io/metadata.name` label); here membership is decided by the
//! namespace's owner reference to a Tenant with that Tenant's UID alone, and a
//! namespace without one is let through unchanged (a forged label gains nothing and
//! costs nothing).
//!
//! For a member namespace: a cordoned tenant refuses every write by non-admins;
//! for everyone, admins included (a Deployment's pods are created by a controller),
//! Pods get the tenant's priority and runtime class and node selector, PVCs its
//! storage class and Ingresses its ingress class (the default injected when none is
//! given, a class the tenant does not allow refused, a node selector that contradicts
//! the tenant's refused).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::Tenant;
use tenantplane_core::tenancy::{Requester, is_tenant_owner_reference};
use tenantplane_core::tenant_admission::{
    Admins, ClassKind, check_class, cordon_refusal, is_tenant_reference, missing_node_selector,
};

use crate::answer::{Refusal, decided, escape};
use crate::ingress_claims::IngressClaims;

/// The legacy annotation that names an Ingress's class.
pub const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Answers one AdmissionReview body. Never fails or panics.
pub async fn review(
    client: &Client,
    admins: &Admins,
    claims: &IngressClaims,
    body: &[u8],
) -> AdmissionReview<DynamicObject> {
    match crate::review::parse(body) {
        Ok(request) => decided(
            AdmissionResponse::from(&request),
            decide(client, admins, claims, &request).await,
        )
        .into_review(),
        Err(refusal) => refusal.into_review(),
    }
}

async fn decide(
    client: &Client,
    admins: &Admins,
    claims: &IngressClaims,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Option<Value>, Refusal> {
    let Some(namespace) = request.namespace.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let Some(tenant) = member_tenant(client, namespace).await? else {
        return Ok(None);
    };
    let requester = Requester {
        username: request.user_info.username.as_deref().unwrap_or_default(),
        groups: request.user_info.groups.as_deref().unwrap_or_default(),
    };
    let admin = admins.contains(&requester);
    if !admin && let Some(message) = cordon_refusal(&tenant, namespace) {
        return Err(Refusal::forbidden(message));
    }
    crate::rules::check_tenant_resource(&tenant, admin, request)?;
    let (Some(object), None) = (request.object.as_ref(), request.sub_resource.as_deref()) else {
        return Ok(None);
    };
    let object = serde_json::to_value(object)
        .map_err(|err| Refusal::internal(format!("cannot read the object: {err}")))?;
    let old = request
        .old_object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok());
    let resource = &request.resource;
    let ops = match (
        resource.group.as_str(),
        resource.resource.as_str(),
        &request.operation,
    ) {
        // Class names and node selectors of Pods and PVCs are immutable: creation only.
        ("", "pods", Operation::Create) => pod(&tenant, &object)?,
        ("", "persistentvolumeclaims", Operation::Create) => pvc(&tenant, &object)?,
        (
            "networking.k8s.io" | "extensions",
            "ingresses",
            Operation::Create | Operation::Update,
        ) => {
            let tenant_name = tenant.metadata.name.as_deref().unwrap_or_default();
            let at = (namespace, request.name.as_str());
            claims
                .claim(tenant_name, at, &object, old.as_ref(), request.dry_run)
                .await?;
            ingress(&tenant, &object, old.as_ref())?
        }
        _ => Vec::new(),
    };
    Ok((!ops.is_empty()).then_some(Value::Array(ops)))
}

/// The Tenant `namespace` belongs to: the one its Tenant owner reference names,
/// with the Tenant's UID. The label is not consulted (it only pre-filters the
/// webhook's selector), so a wrong or forged label neither adds nor removes rules.
pub(crate) async fn member_tenant(
    client: &Client,
    namespace: &str,
) -> Result<Option<Tenant>, Refusal> {
    let found = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
        .map_err(|err| Refusal::internal(format!("cannot read namespace {namespace}: {err}")))?;
    let references = found
        .and_then(|ns| ns.metadata.owner_references)
        .unwrap_or_default();
    let tenants = Api::<Tenant>::all(client.clone());
    for reference in references.iter().filter(|r| is_tenant_reference(r)) {
        let tenant = tenants.get_opt(&reference.name).await.map_err(|err| {
            Refusal::internal(format!("cannot read Tenant {}: {err}", reference.name))
        })?;
        if let Some(tenant) = tenant.filter(|t| is_tenant_owner_reference(reference, t)) {
            return Ok(Some(tenant));
        }
    }
    Ok(None)
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// Checks the class at `pointer` and adds an op that injects the default.
fn class_at(
    tenant: &Tenant,
    kind: ClassKind,
    object: &Value,
    pointer: &str,
    ops: &mut Vec<Value>,
) -> Result<(), Refusal> {
    let requested = text(object, pointer);
    if let Some(default) =
        check_class(tenant, kind, requested).map_err(|err| Refusal::forbidden(err.to_string()))?
    {
        ops.push(json!({"op": "add", "path": pointer, "value": default}));
    }
    Ok(())
}

fn pod(tenant: &Tenant, object: &Value) -> Result<Vec<Value>, Refusal> {
    let mut ops = Vec::new();
    class_at(
        tenant,
        ClassKind::Priority,
        object,
        "/spec/priorityClassName",
        &mut ops,
    )?;
    // The Priority admission plugin already set `priority` from no class; it runs
    // again after this webhook's change and refuses a value it did not compute from
    // the injected class, so the value goes and the plugin recomputes it.
    let injected_priority = !ops.is_empty();
    if injected_priority && object.pointer("/spec/priority").is_some() {
        ops.push(json!({"op": "remove", "path": "/spec/priority"}));
    }
    class_at(
        tenant,
        ClassKind::Runtime,
        object,
        "/spec/runtimeClassName",
        &mut ops,
    )?;
    let selector: Option<BTreeMap<String, String>> = object
        .pointer("/spec/nodeSelector")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let missing = missing_node_selector(tenant, &selector.clone().unwrap_or_default())
        .map_err(|err| Refusal::forbidden(err.to_string()))?;
    if selector.is_none() && !missing.is_empty() {
        ops.push(json!({"op": "add", "path": "/spec/nodeSelector", "value": missing}));
    } else {
        for (key, value) in missing {
            ops.push(json!({"op": "add", "path": format!("/spec/nodeSelector/{}", escape(&key)), "value": value}));
        }
    }
    Ok(ops)
}

fn pvc(tenant: &Tenant, object: &Value) -> Result<Vec<Value>, Refusal> {
    let mut ops = Vec::new();
    class_at(
        tenant,
        ClassKind::Storage,
        object,
        "/spec/storageClassName",
        &mut ops,
    )?;
    Ok(ops)
}

/// Both ways of naming an Ingress's class are checked; the default goes into
/// `spec.ingressClassName` when neither is given. On UPDATE only a class that
/// changed is checked, so an Ingress admitted before the rules can still be edited.
fn ingress(tenant: &Tenant, object: &Value, old: Option<&Value>) -> Result<Vec<Value>, Refusal> {
    let annotation = format!("/metadata/annotations/{}", escape(INGRESS_CLASS_ANNOTATION));
    let field = "/spec/ingressClassName";
    let changed = |pointer: &str| old.is_none_or(|old| text(old, pointer) != text(object, pointer));
    for pointer in [field, annotation.as_str()] {
        if let Some(class) = text(object, pointer).filter(|_| changed(pointer)) {
            check_class(tenant, ClassKind::Ingress, Some(class))
                .map_err(|err| Refusal::forbidden(err.to_string()))?;
        }
    }
    let mut ops = Vec::new();
    if old.is_none() && text(object, field).is_none() && text(object, &annotation).is_none() {
        class_at(tenant, ClassKind::Ingress, object, field, &mut ops)?;
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> Tenant {
        serde_json::from_value(json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "uid": "uid-acme"},
            "spec": {"owners": [],
                "storageClasses": {"allowed": ["fast"], "default": "standard"},
                "priorityClasses": {"allowed": ["high"], "default": "low"},
                "runtimeClasses": {"allowed": [], "default": "gvisor"},
                "ingressClasses": {"allowed": ["public"], "default": "internal"},
                "nodeSelector": {"pool/name": "acme"}},
        }))
        .unwrap()
    }

    fn patched(mut object: Value, ops: Vec<Value>) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
        object
    }

    #[test]
    fn pods_get_defaults_and_the_node_selector() {
        let bare = json!({"spec": {"containers": [], "priority": 0}});
        let out = patched(bare.clone(), pod(&tenant(), &bare).unwrap());
        assert_eq!(out["spec"]["priorityClassName"], "low");
        assert!(out["spec"].get("priority").is_none());
        assert_eq!(out["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(out["spec"]["nodeSelector"], json!({"pool/name": "acme"}));

        let chosen = json!({"spec": {"priorityClassName": "high", "nodeSelector": {"zone": "a"}}});
        let out = patched(chosen.clone(), pod(&tenant(), &chosen).unwrap());
        assert_eq!(out["spec"]["priorityClassName"], "high");
        assert_eq!(
            out["spec"]["nodeSelector"],
            json!({"zone": "a", "pool/name": "acme"})
        );

        let refused = pod(&tenant(), &json!({"spec": {"runtimeClassName": "runc"}})).unwrap_err();
        assert!(refused.message.contains("\"runc\""), "{}", refused.message);
        let conflict = pod(
            &tenant(),
            &json!({"spec": {"nodeSelector": {"pool/name": "x"}}}),
        )
        .unwrap_err();
        assert!(
            conflict.message.contains("nodeSelector"),
            "{}",
            conflict.message
        );
    }

    #[test]
    fn ingresses_check_field_and_annotation() {
        let bare = json!({"metadata": {}, "spec": {}});
        let out = patched(bare.clone(), ingress(&tenant(), &bare, None).unwrap());
        assert_eq!(out["spec"]["ingressClassName"], "internal");
        let legacy =
            json!({"metadata": {"annotations": {INGRESS_CLASS_ANNOTATION: "public"}}, "spec": {}});
        assert!(ingress(&tenant(), &legacy, None).unwrap().is_empty());
        let bad =
            json!({"metadata": {"annotations": {INGRESS_CLASS_ANNOTATION: "nginx"}}, "spec": {}});
        assert!(ingress(&tenant(), &bad, None).is_err());
        // An old class left as it was is not checked again on UPDATE.
        assert!(ingress(&tenant(), &bad, Some(&bad)).unwrap().is_empty());
        let moved = json!({"metadata": {}, "spec": {"ingressClassName": "nginx"}});
        assert!(ingress(&tenant(), &moved, Some(&bare)).is_err());
    }

    #[test]
    fn pvcs_get_the_storage_default() {
        let bare = json!({"spec": {}});
        let out = patched(bare.clone(), pvc(&tenant(), &bare).unwrap());
        assert_eq!(out["spec"]["storageClassName"], "standard");
        assert!(pvc(&tenant(), &json!({"spec": {"storageClassName": "gold"}})).is_err());
    }
}
