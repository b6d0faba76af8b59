//! Finalizers on tenant Pod dependencies (ConfigMaps, Secrets, PVCs copied only
//! because a Pod uses them): the tenant object cannot disappear before its host
//! copy is removed.
//!
//! The finalizer `tenantplane.io/host-copy` comes with a label of the same key
//! (what a TenantCluster's removal selects to release them). A deletion is noticed
//! from the tenant watch of its kind ([`super::dependency_cache`]), not at the next
//! full pass. Deleting a dependency a running Pod uses is allowed, as in Kubernetes: the
//! host Pod keeps running (it is not recreated without it).
//!
//! A claim copy's volume copy goes with it ([`delete_volume_copy`]), here and in
//! the dependency garbage collection.
//!
//! Not a kube-runtime `Controller` with `finalizer()`: finalizing needs the Pod
//! syncer's host caches, outage clock and write budget, and the engine's work
//! queue already gives deduplication and delayed retries.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::status::FINALIZER;
use tenantplane_core::pods::storage::copied_volume;
use tenantplane_core::transform::dependency_to_host;

use super::dependency_cache::{DEPENDENCY_KINDS, DependencyRef, has_finalizer, resource};
use super::fields::{core_resource, get_value, str_at, string_list};
use super::outage::{is_unreachable, released_reason};
use super::pod_path::PodPath;
use super::{Key, KindSyncer, SyncError};
use crate::deletion::{delete_exact, exactly};

/// Marks tenant objects carrying [`FINALIZER`] as dependencies, for the watch.
pub const LABEL_HOST_COPY: &str = FINALIZER;

fn selector() -> String {
    format!("{LABEL_HOST_COPY}=true")
}

/// The merge patch removing [`FINALIZER`] from `object`, guarded by its version.
fn without_finalizer(object: &Value) -> Value {
    let remaining: Vec<String> = string_list(object.pointer("/metadata/finalizers"))
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    json!({"metadata": {
        "finalizers": remaining,
        "resourceVersion": object.pointer("/metadata/resourceVersion"),
    }})
}

/// Removes [`FINALIZER`] from tenant object `name` as observed in `object`
/// (already gone is fine).
pub(super) async fn remove_finalizer(
    api: &Api<DynamicObject>,
    name: &str,
    object: &Value,
) -> Result<(), SyncError> {
    match api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(without_finalizer(object)),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(SyncError::Api {
            verb: "remove the finalizer from",
            name: name.to_owned(),
            source,
        }),
    }
}

/// Where removing a dependency's host copy stands.
enum CopyRemoval {
    Removed(String),
    /// The host did not answer for longer than the bound, for this long.
    Abandoned(Duration),
}

impl KindSyncer {
    fn tenant_dependencies(&self, kind: DependencyKind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.tenant.clone(), namespace, &resource(kind))
    }

    /// Adds the finalizer and its label to a tenant dependency whose copy is about
    /// to be made (a write only when they are missing). `tenant_object` may come
    /// from a cache: when it is out of date (409), the object is read again and
    /// the finalizer added to what the API server holds.
    pub(super) async fn ensure_dependency_finalizer(
        &self,
        kind: DependencyKind,
        tenant_object: &Value,
    ) -> Result<(), SyncError> {
        let namespace = str_at(tenant_object, "/metadata/namespace").unwrap_or_default();
        let name = str_at(tenant_object, "/metadata/name").unwrap_or_default();
        let api = self.tenant_dependencies(kind, &namespace);
        let mut current = tenant_object.clone();
        for attempt in 0..2 {
            if has_finalizer(&current) {
                return Ok(());
            }
            let mut finalizers = string_list(current.pointer("/metadata/finalizers"));
            finalizers.push(FINALIZER.to_owned());
            let patch = json!({"metadata": {
                "finalizers": finalizers,
                "labels": {LABEL_HOST_COPY: "true"},
                "resourceVersion": current.pointer("/metadata/resourceVersion"),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 && attempt == 0 => {
                    match get_value(&api, &resource(kind), &name).await? {
                        Some(fresh) => current = fresh,
                        // Gone meanwhile: no copy; the Pod's next look says why.
                        None => {
                            return Err(SyncError::Decode(format!(
                                "{kind} {namespace}/{name} was deleted while its finalizer was added"
                            )));
                        }
                    }
                }
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "add the finalizer to",
                        name,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Finalizes queued dependencies, retrying each with backoff until it is done.
    pub(super) async fn finalize_dependencies(self: Arc<Self>) {
        // Spawned only for a syncer with the Pod path.
        let Some(path) = self.pods.as_ref() else {
            return;
        };
        let queue = Arc::clone(&path.dependencies);
        let mut attempts: std::collections::HashMap<DependencyRef, u32> =
            std::collections::HashMap::new();
        while let Some(item) = queue.next().await {
            match self.finalize_dependency(path, item.0, &item.1).await {
                Ok(()) => {
                    attempts.remove(&item);
                }
                Err(err) => {
                    let attempt = attempts.entry(item.clone()).or_insert(0);
                    *attempt = attempt.saturating_add(1);
                    tracing::warn!(error = %err, kind = %item.0, namespace = %item.1.0, name = %item.1.1, attempt = *attempt, "finalizing a dependency failed; retrying");
                    let backoff =
                        Duration::from_millis(100u64.saturating_mul(1 << (*attempt).min(8)));
                    queue.add_after(item.clone(), backoff.min(Duration::from_secs(30)));
                }
            }
            queue.done(&item);
        }
    }

    /// The tenant dependency `key` is being deleted: delete its host copy (if it is
    /// ours, UID precondition), then remove the finalizer.
    async fn finalize_dependency(
        &self,
        path: &PodPath,
        kind: DependencyKind,
        key: &Key,
    ) -> Result<(), SyncError> {
        let tenant_api = self.tenant_dependencies(kind, &key.0);
        let Some(tenant_object) = get_value(&tenant_api, &resource(kind), &key.1).await? else {
            return Ok(());
        };
        if tenant_object
            .pointer("/metadata/deletionTimestamp")
            .is_none()
            || !has_finalizer(&tenant_object)
        {
            return Ok(());
        }
        let host_name = dependency_to_host(&self.ctx.target, &kind.group_kind(), &tenant_object)
            .map(|(placement, _)| placement.host_name.name)
            .ok();
        let removal = match &host_name {
            None => CopyRemoval::Removed(String::new()),
            Some(host_name) => match self.remove_dependency_copy(kind, key, host_name).await {
                Ok(waited) => {
                    path.outages.answered(kind.as_str(), key);
                    CopyRemoval::Removed(waited)
                }
                Err(err) if is_unreachable(&err) => match path.outages.failed(kind.as_str(), key) {
                    Some(down_for) => CopyRemoval::Abandoned(down_for),
                    None => return Err(err),
                },
                Err(err) => return Err(err),
            },
        };
        remove_finalizer(&tenant_api, &key.1, &tenant_object).await?;
        path.outages.answered(kind.as_str(), key);
        let Some(host_name) = host_name else {
            return Ok(());
        };
        let (action, reason) = match removal {
            CopyRemoval::Removed(waited) => (
                DecisionAction::Delete,
                format!(
                    "the tenant {kind} is being deleted: its host copy is removed, then the tenant \
                     object; Pods using it keep running, as in Kubernetes{waited}"
                ),
            ),
            CopyRemoval::Abandoned(down_for) => (
                DecisionAction::Skip,
                released_reason("copy", down_for, path.outages.bound()),
            ),
        };
        self.ctx.decisions.send(
            action,
            "v1",
            kind.as_str(),
            TenantObjectRef {
                namespace: key.0.clone(),
                name: key.1.clone(),
                uid: str_at(&tenant_object, "/metadata/uid"),
            },
            HostTarget {
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name,
            },
            reason,
        );
        Ok(())
    }

    /// Deletes host copy `host_name` of dependency `key` when it reverse-maps to
    /// it (a PVC copy's PV copy with it). Returns the write budget's wait note.
    async fn remove_dependency_copy(
        &self,
        kind: DependencyKind,
        key: &Key,
        host_name: &str,
    ) -> Result<String, SyncError> {
        let host_api: Api<DynamicObject> = Api::namespaced_with(
            self.ctx.host.clone(),
            &self.ctx.target.host_namespace,
            &resource(kind),
        );
        let Some(copy) = get_value(&host_api, &resource(kind), host_name).await? else {
            return Ok(String::new());
        };
        let ours = self.is_copy(&kind.group_kind(), key, &copy);
        // Not ours: never touched. Already terminating (pvc-protection): the host
        // finishes it.
        if !ours || copy.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(String::new());
        }
        let params = exactly(str_at(&copy, "/metadata/uid"));
        let waited = self.write_budget().await;
        self.count_write("delete");
        match delete_exact(&host_api, host_name, &params).await {
            Ok(_) => {}
            Err(source) => {
                return Err(SyncError::Api {
                    verb: "delete",
                    name: host_name.to_owned(),
                    source,
                });
            }
        }
        if kind == DependencyKind::PersistentVolumeClaim
            && let Some(volume) = str_at(&copy, "/spec/volumeName")
        {
            delete_volume_copy(self, &volume).await?;
        }
        Ok(waited)
    }
}

/// Removes tenantplane's finalizer from every tenant object of `resource` that
/// matches `selector`: the TenantCluster is going and nothing would release them
/// otherwise. Returns how many were released.
pub(super) async fn release_finalizers(
    tenant: &Client,
    resource: &ApiResource,
    selector: Option<&str>,
) -> Result<usize, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(tenant.clone(), resource);
    let params = selector.map_or_else(ListParams::default, |s| ListParams::default().labels(s));
    let mut released = 0;
    for object in api.list(&params).await? {
        let (Some(namespace), Some(name)) = (
            object.metadata.namespace.clone(),
            object.metadata.name.clone(),
        ) else {
            continue;
        };
        let value = serde_json::to_value(&object).unwrap_or_default();
        if !has_finalizer(&value) {
            continue;
        }
        let namespaced: Api<DynamicObject> =
            Api::namespaced_with(tenant.clone(), &namespace, resource);
        match namespaced
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(without_finalizer(&value)),
            )
            .await
        {
            Ok(_) => released += 1,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(released)
}

/// Releases the finalizers of every tenant dependency ([`release_finalizers`]).
pub(super) async fn release_dependency_finalizers(tenant: &Client) -> Result<usize, kube::Error> {
    let mut released = 0;
    for kind in DEPENDENCY_KINDS {
        released += release_finalizers(tenant, &resource(kind), Some(&selector())).await?;
    }
    Ok(released)
}

/// Deletes host PV `name` once its claim copy is gone, if it is this tenant's copy.
pub(super) async fn delete_volume_copy(syncer: &KindSyncer, name: &str) -> Result<(), SyncError> {
    let pv_resource = core_resource("PersistentVolume");
    let host_pvs: Api<DynamicObject> = Api::all_with(syncer.ctx.host.clone(), &pv_resource);
    let Some(pv) = get_value(&host_pvs, &pv_resource, name).await? else {
        return Ok(());
    };
    let Some(virtual_name) = copied_volume(&syncer.ctx.target, &pv).map(str::to_owned) else {
        return Ok(());
    };
    if pv.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    syncer.count_write("delete");
    let deleted = delete_exact(&host_pvs, name, &exactly(str_at(&pv, "/metadata/uid")))
        .await
        .map_err(|source| SyncError::Api {
            verb: "delete",
            name: name.to_owned(),
            source,
        })?;
    if !deleted {
        return Ok(());
    }
    syncer.ctx.decisions.send(
        DecisionAction::Delete,
        "v1",
        "PersistentVolume",
        TenantObjectRef { namespace: String::new(), name: virtual_name, uid: None },
        HostTarget { namespace: String::new(), name: name.to_owned() },
        "its claim copy was removed: no synced Pod uses the claim any more (the volume itself is retained)".into(),
    );
    Ok(())
}
