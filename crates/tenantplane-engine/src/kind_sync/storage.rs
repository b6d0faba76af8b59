//! The PVC dependency of a Pod: the tenant claim must be Bound; its PV is copied
//! to the host first (with its CSI Secrets), under a name that carries the tenant's
//! identity, then the claim, bound by name to that copy.

use kube::Api;
use kube::api::DynamicObject;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::status::pvc_status_update;
use tenantplane_core::pods::storage::{
    bound_volume, host_pv, pv_host_name, pv_is_ours, volume_secrets,
};

use super::dependency_cache::Cached;
use super::dependency_copy::{DependencyState, refusal};
use super::fields::{core_resource, get_value, put_status, str_at};
use super::pod_path::PodPath;
use super::{Key, KindSyncer, SyncError, post_params};

pub(super) async fn ensure_claim(
    syncer: &KindSyncer,
    path: &PodPath,
    pod: &Key,
    namespace: &str,
    name: &str,
    field: &str,
) -> Result<DependencyState, SyncError> {
    let ctx = &syncer.ctx;
    let pvc_resource = core_resource("PersistentVolumeClaim");
    let tenant_pvcs: Api<DynamicObject> =
        Api::namespaced_with(ctx.tenant.clone(), namespace, &pvc_resource);
    let cached = path
        .caches
        .tenant(DependencyKind::PersistentVolumeClaim, namespace, name);
    let tenant_pvc = match cached {
        Cached::Found(pvc) => Some(pvc),
        Cached::Absent | Cached::Unknown => get_value(&tenant_pvcs, &pvc_resource, name).await?,
    };
    let Some(tenant_pvc) = tenant_pvc else {
        return Ok(DependencyState::Waiting(
            "it does not exist in the tenant".into(),
        ));
    };
    if tenant_pvc.pointer("/metadata/deletionTimestamp").is_some() {
        // Its copies are being removed (finalizer): its PV is not copied again.
        return Ok(DependencyState::Waiting(
            "it is being deleted in the tenant".into(),
        ));
    }
    let volume = match bound_volume(&tenant_pvc) {
        Ok(volume) => volume,
        Err(err) => return Ok(DependencyState::Waiting(err.to_string())),
    };
    // The PV first, with its CSI Secrets, so the claim copy binds as soon as it exists.
    let pv_resource = core_resource("PersistentVolume");
    let tenant_pvs: Api<DynamicObject> = Api::all_with(ctx.tenant.clone(), &pv_resource);
    let Some(tenant_pv) = get_value(&tenant_pvs, &pv_resource, &volume).await? else {
        return Ok(DependencyState::Waiting(format!(
            "its PersistentVolume {volume} does not exist in the tenant"
        )));
    };
    for secret in volume_secrets(&tenant_pv) {
        let why = format!("{field} -> PersistentVolume {volume} {}", secret.field);
        if let DependencyState::Waiting(reason) = syncer
            .ensure_copy(
                Some(&path.caches),
                pod,
                DependencyKind::Secret,
                &secret.namespace,
                &secret.name,
                &why,
            )
            .await?
        {
            return Ok(DependencyState::Waiting(format!(
                "the Secret {}/{} of its PersistentVolume {volume}: {reason}",
                secret.namespace, secret.name
            )));
        }
    }
    let host_pvc_name =
        tenantplane_core::pods::host_pod::dependency_host_name(&ctx.target, namespace, name);
    let host_pvs: Api<DynamicObject> = Api::all_with(ctx.host.clone(), &pv_resource);
    let pv_name = pv_host_name(&ctx.target, &volume);
    match get_value(&host_pvs, &pv_resource, &pv_name).await? {
        Some(existing) => {
            if !pv_is_ours(&ctx.target, &volume, &existing) {
                return Ok(DependencyState::Waiting(format!(
                    "the host PersistentVolume {pv_name} is not tenantplane's copy of {volume} for this tenant; it is never touched"
                )));
            }
            // A PV's source is immutable: an existing copy of ours stays as it is.
        }
        None => {
            let object = host_pv(&ctx.target, &tenant_pv, &host_pvc_name)
                .map_err(|e| SyncError::Decode(e.to_string()))?;
            let body: DynamicObject =
                serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
            let waited = syncer.write_budget().await;
            syncer.count_write("create");
            let created = host_pvs.create(&post_params(), &body).await;
            // A Conflict is an error: the next look finds the copy and checks it.
            if let Some(refused) = refusal(created, "create", &pv_name)? {
                return Ok(DependencyState::Waiting(format!(
                    "the host API server refused the copy of PersistentVolume {volume}: {refused}"
                )));
            }
            ctx.decisions.send(
                DecisionAction::Create,
                "v1",
                "PersistentVolume",
                TenantObjectRef { namespace: String::new(), name: volume.clone(), uid: str_at(&tenant_pv, "/metadata/uid") },
                HostTarget { namespace: String::new(), name: pv_name.clone() },
                format!(
                    "bound to PersistentVolumeClaim {namespace}/{name}, used by Pod {}/{} ({field}); claimed by the host copy {}/{host_pvc_name}, reclaim policy Retain{waited}",
                    pod.0, pod.1, ctx.target.host_namespace
                ),
            );
        }
    }
    // Then the claim, through the same path as every copy, bound to the PV copy.
    let state = syncer
        .ensure_copy(
            Some(&path.caches),
            pod,
            DependencyKind::PersistentVolumeClaim,
            namespace,
            name,
            field,
        )
        .await?;
    if let DependencyState::Waiting(_) = state {
        return Ok(state);
    }
    // The host claim's capacity and conditions back to the tenant claim.
    let host_pvcs: Api<DynamicObject> =
        Api::namespaced_with(ctx.host.clone(), &ctx.target.host_namespace, &pvc_resource);
    if let Some(host) = get_value(&host_pvcs, &pvc_resource, &host_pvc_name).await?
        && let Some(status) = pvc_status_update(tenant_pvc.get("status"), host.get("status"))
    {
        put_status(&tenant_pvcs, &tenant_pvc, status).await?;
    }
    Ok(DependencyState::Ready)
}
