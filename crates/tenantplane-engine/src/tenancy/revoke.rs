//! Revocation in every Tenant reconcile: what the Tenant put in namespaces that are
//! no longer its members goes (see `tenantplane_core::revocation`).
//!
//! The Tenant's children are listed cluster-wide by their labels, not looked for in
//! the namespaces it remembers, so a move or release that happened while the
//! controller was down is revoked too. Every delete has a UID precondition; every
//! metadata patch a resourceVersion precondition.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::PoisonError;

use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tenantplane_core::revocation::{LiveChild, released_metadata_patch, stale_children};
use tenantplane_core::tenant_plan::child_selector;

use super::members::delete_checked;
use super::{Context, TenantError};
use crate::decisions::MANAGER;

/// Deletes `tenant`'s children outside `members` and cleans the metadata of the
/// namespaces released from it. Returns the writes made.
pub(super) async fn revoke(
    ctx: &Context,
    tenant: &str,
    tenant_uid: &str,
    members: &BTreeSet<String>,
) -> Result<usize, TenantError> {
    let mut writes = 0;
    writes += stale::<RoleBinding>(&ctx.host, tenant, members).await?;
    writes += stale::<NetworkPolicy>(&ctx.host, tenant, members).await?;
    writes += stale::<LimitRange>(&ctx.host, tenant, members).await?;
    writes += stale::<ResourceQuota>(&ctx.host, tenant, members).await?;
    writes += released(ctx, tenant, tenant_uid).await?;
    Ok(writes)
}

/// Deletes the objects of one kind labelled as `tenant`'s outside `members`.
async fn stale<K>(
    host: &Client,
    tenant: &str,
    members: &BTreeSet<String>,
) -> Result<usize, TenantError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + fmt::Debug
        + DeserializeOwned,
{
    let kind = K::kind(&());
    let live = Api::<K>::all(host.clone())
        .list(&ListParams::default().labels(&child_selector(tenant)))
        .await
        .map_err(TenantError::host(
            "list",
            format!("{kind}s of Tenant {tenant}"),
        ))?;
    let children = live.items.iter().map(|o| LiveChild {
        namespace: o.meta().namespace.as_deref().unwrap_or_default(),
        name: o.meta().name.as_deref().unwrap_or_default(),
        labels: o.labels(),
    });
    let stale: BTreeSet<(String, String)> = stale_children(tenant, members, children)
        .into_iter()
        .map(|c| (c.namespace.to_owned(), c.name.to_owned()))
        .collect();
    let mut deleted = 0;
    for object in &live.items {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        if !stale.contains(&(namespace.clone(), name.clone())) {
            continue;
        }
        let api: Api<K> = Api::namespaced(host.clone(), &namespace);
        if delete_checked(&api, object)
            .await
            .map_err(TenantError::host(
                "delete",
                format!("{kind} {namespace}/{name}"),
            ))?
        {
            tracing::info!(%tenant, %namespace, %kind, %name,
                "revoked: the namespace is no longer a member of this Tenant");
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Removes this tenant's label and recorded metadata from namespaces released from
/// it: those labelled for it without an owner reference to it, and those the index
/// remembers as formerly naming it.
async fn released(ctx: &Context, tenant: &str, tenant_uid: &str) -> Result<usize, TenantError> {
    let (labelled, formerly) = {
        let index = ctx.index.read().unwrap_or_else(PoisonError::into_inner);
        (
            index.only_labelled(tenant, tenant_uid),
            index.formerly_named(tenant),
        )
    };
    let formerly: BTreeSet<String> = formerly.into_iter().collect();
    let candidates: BTreeSet<&String> = labelled.iter().chain(&formerly).collect();
    let mut patched = 0;
    for name in candidates {
        let Some(ns) = ctx.namespaces.get(&ObjectRef::new(name)) else {
            continue;
        };
        let Some(mut patch) = released_metadata_patch(
            tenant,
            ns.owner_references(),
            ns.labels(),
            ns.annotations(),
            formerly.contains(name),
        ) else {
            continue;
        };
        // Only over the namespace as read: adopted meanwhile, the patch fails (409)
        // and the retry sees the new owner.
        patch["metadata"]["resourceVersion"] = ns.resource_version().unwrap_or_default().into();
        let params = PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match Api::<Namespace>::all(ctx.host.clone())
            .patch(name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(%tenant, namespace = %name,
                    "released namespace: the Tenant's label and recorded metadata removed");
                patched += 1;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(TenantError::Release {
                    namespace: name.clone(),
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(patched)
}
