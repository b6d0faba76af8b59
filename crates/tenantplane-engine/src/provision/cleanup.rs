//! Removing a provisioned control plane: nothing in the `-cp` namespace can be
//! owned by the TenantCluster (see the module comment of `provision`), so the
//! finalizer deletes it by its labels.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret, Service};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tenantplane_api::TenantCluster;
use tenantplane_core::control_plane::names::{
    ControlPlaneNames, bootstrap_name, headless_name, kubeconfig_secret_name, load_balancer_name,
    namespace_is_ours, serving_name,
};

use super::{ProvisionError, converge_error, host_error};
use crate::converge::{ObjectAction, converge};
use crate::deletion::exactly;

/// What [`cleanup_control_plane`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupOutcome {
    /// `Kind namespace/name` of every object deleted.
    pub deleted: Vec<String>,
    /// Whether the `-cp` namespace was deleted (the namespace controller finishes it).
    pub namespace_deleted: bool,
}

/// Removes what [`ensure_control_plane`] provisioned for `tc`: its objects in the
/// `-cp` namespace (only those labelled as its control plane), its PVCs, its
/// kubeconfig Secret, and the `-cp` namespace once no other live TenantCluster of
/// the namespace needs a provisioned control plane. Called by the controller's
/// finalizer; safe to call repeatedly and when nothing was ever provisioned.
pub async fn cleanup_control_plane(
    host: &Client,
    tc: &TenantCluster,
) -> Result<CleanupOutcome, ProvisionError> {
    let names = ControlPlaneNames::of(tc)?;
    let cp_ns = names.cp_namespace.as_str();
    let mut outcome = CleanupOutcome::default();

    // The kubeconfig Secret is owned by the TenantCluster (GC removes it when the
    // TenantCluster goes), but a switch to `external` keeps the TenantCluster. Never
    // the Secret the external control plane is read from.
    let secret_name = kubeconfig_secret_name(&names.tenant);
    let external_secret = tc
        .spec
        .control_plane
        .external
        .as_ref()
        .map(|e| e.kubeconfig_secret_ref.name.as_str());
    if external_secret != Some(secret_name.as_str()) {
        let api: Api<Secret> = Api::namespaced(host.clone(), &names.namespace);
        let action = converge::<Secret>(
            &api,
            &secret_name,
            None,
            &|l| names.is_our_kubeconfig(l),
            &[],
        )
        .await
        .map_err(converge_error("Secret", &names.namespace, &secret_name))?;
        if action == ObjectAction::Deleted {
            outcome
                .deleted
                .push(format!("Secret {}/{secret_name}", names.namespace));
        }
    }

    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns_err = host_error("Namespace", "", cp_ns);
    let Some(namespace) = namespaces
        .get_opt(cp_ns)
        .await
        .map_err(|e| ns_err("get", e))?
    else {
        return Ok(outcome);
    };
    // We never create anything in a namespace that is not ours.
    if !namespace_is_ours(namespace.labels(), &names.namespace) {
        return Ok(outcome);
    }

    let ours = |labels: &BTreeMap<String, String>| names.is_ours(labels);
    let sts_api: Api<StatefulSet> = Api::namespaced(host.clone(), cp_ns);
    if converge::<StatefulSet>(&sts_api, &names.cp_name, None, &ours, &[])
        .await
        .map_err(converge_error("StatefulSet", cp_ns, &names.cp_name))?
        == ObjectAction::Deleted
    {
        outcome
            .deleted
            .push(format!("StatefulSet {cp_ns}/{}", names.cp_name));
    }
    let services: Api<Service> = Api::namespaced(host.clone(), cp_ns);
    for name in [
        headless_name(&names.tenant),
        names.cp_name.clone(),
        load_balancer_name(&names.tenant),
    ] {
        if converge::<Service>(&services, &name, None, &ours, &[])
            .await
            .map_err(converge_error("Service", cp_ns, &name))?
            == ObjectAction::Deleted
        {
            outcome.deleted.push(format!("Service {cp_ns}/{name}"));
        }
    }
    let secrets: Api<Secret> = Api::namespaced(host.clone(), cp_ns);
    for name in [bootstrap_name(&names.tenant), serving_name(&names.tenant)] {
        if converge::<Secret>(&secrets, &name, None, &ours, &[])
            .await
            .map_err(converge_error("Secret", cp_ns, &name))?
            == ObjectAction::Deleted
        {
            outcome.deleted.push(format!("Secret {cp_ns}/{name}"));
        }
    }
    // A StatefulSet leaves its PVCs behind (the retention policy that could delete
    // them is newer than the servers we support).
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), cp_ns);
    let selector = names.selector_string();
    let list = claims
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| host_error("PersistentVolumeClaim", cp_ns, "")("list", e))?;
    for claim in list.items.iter().filter(|c| names.is_ours(c.labels())) {
        let name = claim.name_any();
        match claims.delete(&name, &exactly(claim.uid())).await {
            Ok(_) => outcome
                .deleted
                .push(format!("PersistentVolumeClaim {cp_ns}/{name}")),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(host_error("PersistentVolumeClaim", cp_ns, &name)(
                    "delete", e,
                ));
            }
        }
    }

    // The namespace is shared by the TenantClusters of one namespace: it goes with the
    // last one that needs it. TenantClusters being deleted do not count, or two
    // deleted together would each wait for the other.
    let tcs: Api<TenantCluster> = Api::namespaced(host.clone(), &names.namespace);
    let others_need_it = tcs
        .list(&ListParams::default())
        .await
        .map_err(|e| host_error("TenantCluster", &names.namespace, "")("list", e))?
        .items
        .iter()
        .any(|other| {
            other.metadata.name.as_deref() != Some(names.tenant.as_str())
                && other.metadata.deletion_timestamp.is_none()
                && other.spec.control_plane.external.is_none()
        });
    let this_needs_it =
        tc.metadata.deletion_timestamp.is_none() && tc.spec.control_plane.external.is_none();
    if !others_need_it && !this_needs_it && namespace.metadata.deletion_timestamp.is_none() {
        match namespaces.delete(cp_ns, &exactly(namespace.uid())).await {
            Ok(_) => outcome.namespace_deleted = true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(ns_err("delete", e)),
        }
    }
    tracing::info!(tenant = %names.tenant, namespace = %names.namespace, ?outcome, "control plane cleaned up");
    Ok(outcome)
}
