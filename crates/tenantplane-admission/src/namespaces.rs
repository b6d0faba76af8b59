//! `POST /namespaces`: the mutating admission of namespace creations for namespace
//! tenants.
//!
//! A namespace created by a Tenant owner joins the tenant [`assign_tenant`] picks,
//! takes a quota slot in the Tenant's status with a compare-and-swap (the status is
//! written with the `resourceVersion` it was read at, so of two concurrent writers
//! one gets 409 Conflict and reads again; see [`reserve_slot`]), and is patched with
//! the Tenant's owner reference and the `tenantplane.io/tenant` label. Requests by
//! system users, by users who own no Tenant and for namespaces that already exist
//! are allowed unchanged.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::{Tenant, TenantNamespaceStatus};
use tenantplane_core::tenancy::{
    Requester, assign_tenant, is_owner, is_tenant_owner_reference, owner_reference, reserve_slot,
};

/// The label that names a member namespace's tenant.
pub const TENANT_LABEL: &str = "tenantplane.io/tenant";
/// Compare-and-swap attempts before giving up under contention.
const MAX_ATTEMPTS: usize = 20;

/// Answers one AdmissionReview body for a namespace. Never fails or panics: a body
/// that cannot be read is answered with a refusal that says why.
pub async fn review(client: &Client, body: &[u8]) -> AdmissionReview<DynamicObject> {
    match crate::review::parse(body) {
        Ok(request) => respond(client, &request).await.into_review(),
        Err(refusal) => refusal.into_review(),
    }
}

/// A refusal: the message, the HTTP code and reason the API server returns.
#[derive(Debug)]
struct Refusal {
    message: String,
    code: u16,
    reason: &'static str,
}

impl Refusal {
    fn forbidden(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 403,
            reason: "Forbidden",
        }
    }

    fn internal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 500,
            reason: "InternalError",
        }
    }
}

/// The response to one namespace request.
pub async fn respond(
    client: &Client,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    match decide(client, request).await {
        Ok(None) => response,
        Ok(Some(patch)) => match serde_json::from_value::<json_patch::Patch>(patch) {
            Ok(patch) => match response.clone().with_patch(patch) {
                Ok(patched) => patched,
                Err(err) => deny(
                    response,
                    Refusal::internal(format!("cannot encode the patch: {err}")),
                ),
            },
            Err(err) => deny(
                response,
                Refusal::internal(format!("cannot build the patch: {err}")),
            ),
        },
        Err(refusal) => deny(response, refusal),
    }
}

fn deny(response: AdmissionResponse, refusal: Refusal) -> AdmissionResponse {
    let mut denied = response.deny(&refusal.message);
    denied.result = Status::failure(&refusal.message, refusal.reason).with_code(refusal.code);
    denied
}

/// Whether the requester is the cluster's own machinery, never a tenant owner:
/// `system:masters` and `system:` users. Service accounts
/// (`system:serviceaccount:...`) can own Tenants, so they are not exempt here (one
/// that owns no Tenant is let through by the ownership check).
pub fn is_system(username: &str, groups: &[String]) -> bool {
    (username.starts_with("system:") && !username.starts_with("system:serviceaccount:"))
        || groups.iter().any(|g| g == "system:masters")
}

/// `Ok(None)`: allow unchanged; `Ok(Some(patch))`: allow with this JSONPatch.
async fn decide(
    client: &Client,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Option<Value>, Refusal> {
    let gvk = &request.kind;
    if !gvk.group.is_empty() || gvk.kind != "Namespace" {
        return Err(Refusal::forbidden(format!(
            "tenantplane's namespace webhook handles only core Namespaces, not {} ({} group): limit the MutatingWebhookConfiguration's rules to namespaces",
            gvk.kind,
            if gvk.group.is_empty() {
                "core"
            } else {
                &gvk.group
            }
        )));
    }
    if !matches!(request.operation, Operation::Create) {
        return Ok(None);
    }
    let username = request.user_info.username.as_deref().unwrap_or_default();
    let groups = request.user_info.groups.as_deref().unwrap_or_default();
    if is_system(username, groups) {
        return Ok(None);
    }
    let requester = Requester { username, groups };

    let tenants_api: Api<Tenant> = Api::all(client.clone());
    let tenants = tenants_api
        .list(&Default::default())
        .await
        .map_err(|err| Refusal::internal(format!("cannot list Tenants: {err}")))?
        .items;
    if !tenants.iter().any(|t| is_owner(&requester, t)) {
        // Not a tenant owner: RBAC alone decides.
        return Ok(None);
    }

    let object = request
        .object
        .as_ref()
        .ok_or_else(|| Refusal::forbidden("the namespace CREATE request carries no object"))?;
    let name = object
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(Some(request.name.as_str()).filter(|n| !n.is_empty()))
        .ok_or_else(|| {
            Refusal::forbidden(
                "the namespace has no name: tenant namespaces must be created with metadata.name",
            )
        })?;

    let tenant_name = assign_tenant(&requester, name, &tenants)
        .map_err(|err| Refusal::forbidden(err.to_string()))?
        .metadata
        .name
        .clone()
        .ok_or_else(|| Refusal::internal("a listed Tenant has no name"))?;

    // An existing namespace takes no slot: the API server answers AlreadyExists.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(name).await {
        Ok(Some(_)) => return Ok(None),
        Ok(None) => {}
        Err(err) => {
            return Err(Refusal::internal(format!(
                "cannot check whether namespace {name} exists: {err}"
            )));
        }
    }

    let tenant = reserve(
        &tenants_api,
        &namespaces,
        &tenant_name,
        name,
        request.dry_run,
    )
    .await?;
    let reference = owner_reference(&tenant)
        .ok_or_else(|| Refusal::internal(format!("Tenant {tenant_name} has no name or UID")))?;
    patch(object, &reference, &tenant_name).map(Some)
}

/// Takes a quota slot for `namespace` in `tenant_name`'s status by compare-and-swap,
/// returning the Tenant as read. A dry run only checks.
async fn reserve(
    tenants: &Api<Tenant>,
    namespaces: &Api<Namespace>,
    tenant_name: &str,
    namespace: &str,
    dry_run: bool,
) -> Result<Tenant, Refusal> {
    for _ in 0..MAX_ATTEMPTS {
        let mut tenant = tenants
            .get(tenant_name)
            .await
            .map_err(|err| Refusal::internal(format!("cannot read Tenant {tenant_name}: {err}")))?;
        // The members are the namespaces that really belong to the tenant now (by
        // an owner reference with its UID, found through the label), not whatever
        // the status last said: a reservation expires once its namespace exists,
        // and the namespace must keep counting after that.
        let members = members_of(namespaces, &tenant).await?;
        let mut status = tenant.status.clone().unwrap_or_default();
        status.namespaces = members
            .into_iter()
            .map(|name| TenantNamespaceStatus {
                name,
                conditions: Vec::new(),
            })
            .collect();
        tenant.status = Some(status);
        match reserve_slot(&tenant, namespace, Timestamp::now()) {
            Err(full) => return Err(Refusal::forbidden(full.to_string())),
            Ok(None) => return Ok(tenant),
            Ok(Some(_)) if dry_run => return Ok(tenant),
            Ok(Some(status)) => {
                // The object carries the resourceVersion it was read at: a concurrent
                // writer makes this a 409 Conflict, and the loop reads again.
                tenant.status = Some(status);
                match tenants
                    .replace_status(tenant_name, &PostParams::default(), &tenant)
                    .await
                {
                    Ok(written) => return Ok(written),
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(err) => {
                        return Err(Refusal::internal(format!(
                            "cannot reserve a namespace slot in Tenant {tenant_name}: {err}"
                        )));
                    }
                }
            }
        }
    }
    Err(Refusal::internal(format!(
        "could not reserve a namespace slot in Tenant {tenant_name} after {MAX_ATTEMPTS} conflicting attempts: try again"
    )))
}

/// Names of the namespaces owned by `tenant`: labelled for it and carrying an owner
/// reference whose kind, group, name and UID match.
async fn members_of(namespaces: &Api<Namespace>, tenant: &Tenant) -> Result<Vec<String>, Refusal> {
    let tenant_name = tenant.metadata.name.clone().unwrap_or_default();
    let labelled = namespaces
        .list(&ListParams::default().labels(&format!("{TENANT_LABEL}={tenant_name}")))
        .await
        .map_err(|err| {
            Refusal::internal(format!(
                "cannot list the namespaces of Tenant {tenant_name}: {err}"
            ))
        })?;
    Ok(labelled
        .items
        .into_iter()
        .filter(|ns| {
            ns.metadata
                .owner_references
                .as_ref()
                .is_some_and(|refs| refs.iter().any(|r| is_tenant_owner_reference(r, tenant)))
        })
        .filter_map(|ns| ns.metadata.name)
        .collect())
}

/// Escapes a JSON-pointer segment (RFC 6901).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The JSONPatch that adds the tenant's label and owner reference to `object`.
fn patch(
    object: &DynamicObject,
    reference: &OwnerReference,
    tenant: &str,
) -> Result<Value, Refusal> {
    let reference = serde_json::to_value(reference)
        .map_err(|err| Refusal::internal(format!("cannot encode the owner reference: {err}")))?;
    let mut ops = Vec::new();
    match &object.metadata.labels {
        None => ops.push(
            json!({"op": "add", "path": "/metadata/labels", "value": {TENANT_LABEL: tenant}}),
        ),
        Some(_) => ops.push(json!({
            "op": "add",
            "path": format!("/metadata/labels/{}", escape(TENANT_LABEL)),
            "value": tenant,
        })),
    }
    match &object.metadata.owner_references {
        None => ops
            .push(json!({"op": "add", "path": "/metadata/ownerReferences", "value": [reference]})),
        Some(existing) if existing.iter().any(|r| r.uid == reference["uid"]) => {}
        Some(_) => ops
            .push(json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": reference})),
    }
    Ok(Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_users_are_exempt_but_service_accounts_are_not() {
        assert!(is_system("system:kube-controller-manager", &[]));
        assert!(is_system("admin", &["system:masters".into()]));
        assert!(!is_system("system:serviceaccount:team:ci", &[]));
        assert!(!is_system("alice", &["system:authenticated".into()]));
    }

    #[test]
    fn the_patch_creates_or_extends_labels_and_owner_references() {
        let reference = OwnerReference {
            api_version: "tenantplane.io/v1alpha1".into(),
            kind: "Tenant".into(),
            name: "acme".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let bare: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "acme-1"}}),
        )
        .unwrap();
        let ops = patch(&bare, &reference, "acme").unwrap();
        assert_eq!(ops[0]["path"], "/metadata/labels");
        assert_eq!(ops[0]["value"]["tenantplane.io/tenant"], "acme");
        assert_eq!(ops[1]["path"], "/metadata/ownerReferences");
        assert_eq!(ops[1]["value"][0]["uid"], "u1");
        serde_json::from_value::<json_patch::Patch>(ops).unwrap();

        let full: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "acme-1", "labels": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x"}]}}))
        .unwrap();
        let ops = patch(&full, &reference, "acme").unwrap();
        assert_eq!(ops[0]["path"], "/metadata/labels/tenantplane.io~1tenant");
        assert_eq!(ops[1]["path"], "/metadata/ownerReferences/-");
        let mut doc = serde_json::to_value(&full).unwrap();
        json_patch::patch(
            &mut doc,
            &serde_json::from_value::<json_patch::Patch>(ops).unwrap(),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"]["tenantplane.io/tenant"], "acme");
        assert_eq!(doc["metadata"]["ownerReferences"][1]["kind"], "Tenant");
    }
}
