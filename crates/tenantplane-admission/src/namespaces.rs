//! `POST /namespaces`: the mutating admission of namespace creations and updates
//! for namespace tenants.
//!
//! CREATE: a namespace created by a Tenant owner joins the tenant [`assign_tenant`]
//! picks, takes a quota slot in the Tenant's status with a compare-and-swap (the
//! status is written with the `resourceVersion` it was read at, so of two concurrent
//! writers one gets 409 Conflict and reads again; see [`reserve_slot`]), and is
//! patched with the Tenant's owner reference and the `tenantplane.io/tenant` label.
//! A non-admin may name no other tenant (no forged owner reference or label); an
//! admin's namespace that names a Tenant by owner reference takes a slot too.
//! Namespaces that already exist are let through (the API server says AlreadyExists).
//!
//! UPDATE (PUT, merge/JSON/apply patches, and the `status` and `finalize`
//! subresources, which all arrive as an old and a new object): a non-admin may not
//! change the namespace's Tenant owner references or tenant label (no claiming of
//! unowned namespaces, no escape, no moves, no forged UIDs); an admin who moves a
//! namespace into a tenant takes a quota slot there. Who is an admin: [`Admins`].
//!
//! Cordon: a non-admin may neither update nor DELETE a namespace of a cordoned
//! tenant (deletions arrive through their own webhook, which sees tenant
//! namespaces only).

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::{Tenant, TenantNamespaceStatus};
use tenantplane_core::tenancy::{
    Requester, assign_tenant, is_owner, is_tenant_owner_reference, owner_reference, owning_tenant,
    reserve_slot,
};
use tenantplane_core::tenant_admission::{
    Admins, TenantIdentity, cordon_refusal, creation_identity, unchanged_identity,
};

use crate::answer::{Refusal, decided, escape};

pub use tenantplane_core::tenant_admission::{DEFAULT_CONTROLLER_USER, TENANT_LABEL};
/// Compare-and-swap attempts before giving up under contention.
const MAX_ATTEMPTS: usize = 20;

/// Answers one AdmissionReview body for a namespace. Never fails or panics: a body
/// that cannot be read is answered with a refusal that says why.
pub async fn review(
    client: &Client,
    admins: &Admins,
    body: &[u8],
) -> AdmissionReview<DynamicObject> {
    match crate::review::parse(body) {
        Ok(request) => respond(client, admins, &request).await.into_review(),
        Err(refusal) => refusal.into_review(),
    }
}

/// The response to one namespace request.
pub async fn respond(
    client: &Client,
    admins: &Admins,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    decided(
        AdmissionResponse::from(request),
        decide(client, admins, request).await,
    )
}

/// `Ok(None)`: allow unchanged; `Ok(Some(patch))`: allow with this JSONPatch.
async fn decide(
    client: &Client,
    admins: &Admins,
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
    let username = request.user_info.username.as_deref().unwrap_or_default();
    let groups = request.user_info.groups.as_deref().unwrap_or_default();
    let requester = Requester { username, groups };
    let admin = admins.contains(&requester);
    let object = request.object.as_ref();
    match (&request.operation, object, request.old_object.as_ref()) {
        (Operation::Create, Some(object), _) => {
            create(client, admin, &requester, request, object).await
        }
        (Operation::Update, Some(new), Some(old)) => update(client, admin, request, old, new).await,
        (Operation::Delete, _, Some(old)) if !admin => {
            refuse_if_cordoned(client, old, &request.name).await?;
            Ok(None)
        }
        (Operation::Create | Operation::Update, _, _) => Err(Refusal::forbidden(format!(
            "the namespace {:?} request carries no object (or no old object)",
            request.operation
        ))),
        _ => Ok(None),
    }
}

fn identity(object: &DynamicObject) -> TenantIdentity {
    TenantIdentity::of(
        object.metadata.owner_references.as_deref(),
        object.metadata.labels.as_ref(),
    )
}

async fn list_tenants(client: &Client) -> Result<Vec<Tenant>, Refusal> {
    Ok(Api::<Tenant>::all(client.clone())
        .list(&Default::default())
        .await
        .map_err(|err| Refusal::internal(format!("cannot list Tenants: {err}")))?
        .items)
}

/// The Tenant `object`'s owner references make it a member of (by UID), if any.
fn member_of(object: &DynamicObject, tenants: &[Tenant]) -> Option<String> {
    owning_tenant(
        object
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default(),
        tenants,
    )
    .and_then(|t| t.metadata.name.clone())
}

/// A namespace CREATE: a Tenant owner's namespace joins their tenant within its
/// quota; an admin's namespace that names a Tenant by owner reference takes a quota
/// slot too; nobody else may name a tenant.
async fn create(
    client: &Client,
    admin: bool,
    requester: &Requester<'_>,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Option<Value>, Refusal> {
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
    if admin && identity(object).references.is_empty() {
        // The cluster's own namespaces need nothing from the Tenants (nor that
        // their API answers).
        return Ok(None);
    }
    let tenants = list_tenants(client).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());

    if admin {
        // An admin may create a namespace straight into a tenant, but not past its quota.
        return match member_of(object, &tenants) {
            Some(tenant) if !exists(&namespaces, name).await? => {
                join(client, object, &tenant, name, request.dry_run).await
            }
            _ => Ok(None),
        };
    }

    let asked = identity(object);
    if !tenants.iter().any(|t| is_owner(requester, t)) {
        // Not a tenant owner: RBAC alone decides, but no tenant may be named.
        creation_identity(&asked, None).map_err(|err| Refusal::forbidden(err.to_string()))?;
        return Ok(None);
    }
    let tenant = assign_tenant(requester, name, &tenants)
        .map_err(|err| Refusal::forbidden(err.to_string()))?;
    let tenant_name = tenant
        .metadata
        .name
        .clone()
        .ok_or_else(|| Refusal::internal("a listed Tenant has no name"))?;
    let tenant_uid = tenant.metadata.uid.clone().unwrap_or_default();
    creation_identity(&asked, Some((&tenant_name, &tenant_uid)))
        .map_err(|err| Refusal::forbidden(err.to_string()))?;
    // A cordoned tenant takes no new namespaces either.
    if let Some(message) = cordon_refusal(tenant, name) {
        return Err(Refusal::forbidden(message));
    }
    crate::rules::check_namespace(tenant, request, None, object)?;

    // An existing namespace takes no slot: the API server answers AlreadyExists.
    if exists(&namespaces, name).await? {
        return Ok(None);
    }
    join(client, object, &tenant_name, name, request.dry_run).await
}

/// Takes a slot in `tenant_name` for the namespace `name` and returns the patch
/// that makes `object` its member (owner reference and label, whichever is missing).
async fn join(
    client: &Client,
    object: &DynamicObject,
    tenant_name: &str,
    name: &str,
    dry_run: bool,
) -> Result<Option<Value>, Refusal> {
    let tenant = reserve(client, tenant_name, name, dry_run).await?;
    let reference = owner_reference(&tenant)
        .ok_or_else(|| Refusal::internal(format!("Tenant {tenant_name} has no name or UID")))?;
    patch(object, &reference, tenant_name).map(Some)
}

async fn exists(namespaces: &Api<Namespace>, name: &str) -> Result<bool, Refusal> {
    namespaces
        .get_opt(name)
        .await
        .map(|found| found.is_some())
        .map_err(|err| {
            Refusal::internal(format!(
                "cannot check whether namespace {name} exists: {err}"
            ))
        })
}

/// A namespace UPDATE, through PUT, any patch, `status` or `finalize`: non-admins
/// may not change its tenant identity or owners at all; an admin who moves it into
/// a tenant (adoption) takes a quota slot there, so an update never exceeds the
/// quota, and the tenant label is set to match.
async fn update(
    client: &Client,
    admin: bool,
    request: &AdmissionRequest<DynamicObject>,
    old: &DynamicObject,
    new: &DynamicObject,
) -> Result<Option<Value>, Refusal> {
    if !admin {
        unchanged_identity(&identity(old), &identity(new))
            .map_err(|err| Refusal::forbidden(format!("namespace {}: {err}", request.name)))?;
        refuse_if_cordoned(client, old, &request.name).await?;
        if let Some(tenant) = tenant_of(client, old).await? {
            crate::rules::check_namespace(&tenant, request, Some(old), new)?;
        }
        return Ok(None);
    }
    if identity(old).references == identity(new).references {
        return Ok(None);
    }
    let tenants = list_tenants(client).await?;
    match member_of(new, &tenants) {
        Some(joined) if member_of(old, &tenants).as_ref() != Some(&joined) => {
            join(client, new, &joined, &request.name, request.dry_run).await
        }
        _ => Ok(None),
    }
}

/// Refuses a write to namespace `name` (as it was before the write) when it is a
/// member of a cordoned Tenant. Tenants are listed only for namespaces that name
/// one by owner reference.
async fn refuse_if_cordoned(
    client: &Client,
    old: &DynamicObject,
    name: &str,
) -> Result<(), Refusal> {
    if identity(old).references.is_empty() {
        return Ok(());
    }
    let tenants = list_tenants(client).await?;
    let references = old.metadata.owner_references.as_deref().unwrap_or_default();
    match owning_tenant(references, &tenants).and_then(|tenant| cordon_refusal(tenant, name)) {
        Some(message) => Err(Refusal::forbidden(message)),
        None => Ok(()),
    }
}

/// The Tenant `namespace` (as it was before the write) belongs to, by owner
/// reference with its UID. Tenants are listed only for namespaces that name one.
async fn tenant_of(client: &Client, namespace: &DynamicObject) -> Result<Option<Tenant>, Refusal> {
    if identity(namespace).references.is_empty() {
        return Ok(None);
    }
    let tenants = list_tenants(client).await?;
    let references = namespace
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    Ok(owning_tenant(references, &tenants).cloned())
}

/// Takes a quota slot for `namespace` in `tenant_name`'s status by compare-and-swap,
/// returning the Tenant as read. A dry run only checks.
async fn reserve(
    client: &Client,
    tenant_name: &str,
    namespace: &str,
    dry_run: bool,
) -> Result<Tenant, Refusal> {
    let tenants: Api<Tenant> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for _ in 0..MAX_ATTEMPTS {
        let mut tenant = tenants
            .get(tenant_name)
            .await
            .map_err(|err| Refusal::internal(format!("cannot read Tenant {tenant_name}: {err}")))?;
        // The members are the namespaces that really belong to the tenant now (by
        // an owner reference with its UID, found through the label), not whatever
        // the status last said: a reservation expires once its namespace exists,
        // and the namespace must keep counting after that.
        let members = members_of(&namespaces, &tenant).await?;
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
