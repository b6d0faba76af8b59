//! Deleting a Tenant orphans its namespaces by default (they hold the teams'
//! workloads): every member loses the Tenant's owner reference and label, and the
//! RoleBindings and policies the Tenant put there are deleted, before the finalizer
//! is removed. So the garbage collector never deletes a namespace, even once a
//! Tenant of the same name exists again, and a recreated Tenant does not silently
//! re-adopt them.
//!
//! With `namespaceOptions.onDelete: delete` the members are deleted instead (each
//! with its UID as precondition: only a namespace found owned by this Tenant's UID),
//! and the finalizer goes once the API server accepted every delete; the namespace
//! controller finishes them.

use std::fmt;

use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tenantplane_api::{OnDelete, Tenant};
use tenantplane_core::tenant_plan::{child_selector, is_tenant_child, release_patch};

use super::members::delete_checked;
use super::{TenantError, find_members, status};
use crate::decisions::MANAGER;
use crate::deletion::{delete_exact, exactly};

pub async fn release(tenant: &Tenant, host: &Client) -> Result<Action, TenantError> {
    let name = tenant.name_any();
    let uid = tenant.uid().unwrap_or_default();
    let (members, _) = find_members(host, tenant).await?;
    let names: Vec<String> = members.iter().map(|ns| ns.name_any()).collect();
    let on_delete = tenant.spec.namespace_options.on_delete;
    // Terminating, for anyone looking while the namespaces are released.
    let releasing = status::Verdict::blocked(
        "Terminating",
        match on_delete {
            OnDelete::Orphan => {
                "the Tenant is being deleted: its namespaces are released, not deleted".into()
            }
            OnDelete::Delete => {
                "the Tenant is being deleted with onDelete: delete: its namespaces are deleted"
                    .into()
            }
        },
    );
    status::write(host, tenant, &names, Err(releasing), Timestamp::now()).await?;
    let mut released = 0usize;
    for ns in &members {
        let namespace = ns.name_any();
        // Also before a namespace is deleted: its owners lose access at once, not
        // when the namespace controller gets to the RoleBindings.
        delete_children::<RoleBinding>(host, &name, &namespace).await?;
        delete_children::<NetworkPolicy>(host, &name, &namespace).await?;
        delete_children::<LimitRange>(host, &name, &namespace).await?;
        delete_children::<ResourceQuota>(host, &name, &namespace).await?;
        if on_delete == OnDelete::Delete {
            if ns.metadata.deletion_timestamp.is_none() {
                // `find_members` read it owned by this Tenant's UID; the precondition
                // makes sure that is the namespace deleted.
                let deleted = delete_exact(
                    &Api::<Namespace>::all(host.clone()),
                    &namespace,
                    &exactly(ns.uid()),
                )
                .await
                .map_err(TenantError::host(
                    "delete",
                    format!("namespace {namespace}"),
                ))?;
                if deleted {
                    tracing::info!(tenant = %name, %namespace, "onDelete: delete: member namespace deleted");
                    released += 1;
                }
            }
            continue;
        }
        let Some(mut patch) =
            release_patch(ns.owner_references(), &uid, ns.labels(), ns.annotations())
        else {
            continue;
        };
        // Only over the namespace as read: a concurrent change (another owner
        // reference added) makes this a 409 and the whole release is retried.
        patch["metadata"]["resourceVersion"] = ns.resource_version().unwrap_or_default().into();
        let params = PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match Api::<Namespace>::all(host.clone())
            .patch(&namespace, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => released += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(TenantError::Release {
                    namespace,
                    message: e.to_string(),
                });
            }
        }
    }
    match on_delete {
        OnDelete::Orphan => {
            tracing::info!(tenant = %name, released, "Tenant deleted; its namespaces were orphaned, not deleted");
        }
        OnDelete::Delete => {
            tracing::info!(tenant = %name, deleted = released, "Tenant deleted with its namespaces");
        }
    }
    Ok(Action::await_change())
}

/// Deletes the objects `tenant` put in `namespace` (labelled as its, checked again).
async fn delete_children<K>(host: &Client, tenant: &str, namespace: &str) -> Result<(), TenantError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + fmt::Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(host.clone(), namespace);
    let what = || format!("{} in {namespace}", K::kind(&()));
    let live = api
        .list(&ListParams::default().labels(&child_selector(tenant)))
        .await
        .map_err(TenantError::host("list", what()))?;
    for object in live
        .items
        .iter()
        .filter(|o| is_tenant_child(o.labels(), tenant))
    {
        delete_checked(&api, object)
            .await
            .map_err(TenantError::host("delete", what()))?;
    }
    Ok(())
}
