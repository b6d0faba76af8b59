//! Garbage collection of Pod dependency copies: a ConfigMap, Secret or claim copied
//! only because something used it is removed once no synced Pod, Ingress or
//! needed volume uses it.

use std::collections::BTreeSet;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_selector;
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::refcount::{DependencyKey, is_collectable, needed_dependencies};
use tenantplane_core::pods::storage::{secrets_held_by_volumes, volume_secrets};
use tenantplane_core::provenance::source_in;
use tenantplane_core::services::ingress::is_ingress;
use tenantplane_core::services::ingress_refs::needed_by_ingresses;

use super::dependency_finalizer::delete_volume_copy;
use super::fields::{api_error, core_resource, get_value, str_at, to_value};
use super::pod_path::PodPath;
use super::{KindSyncer, SyncError, typed_value};
use crate::deletion::{delete_exact, exactly};

impl KindSyncer {
    /// Removes every dependency copy made for Pods that no tenant Pod uses any more.
    pub(super) async fn collect_dependencies(&self, path: &PodPath) -> Result<(), SyncError> {
        let pods: Vec<Value> = self
            .tenant_store
            .state()
            .iter()
            .filter_map(|p| typed_value(p, &self.tenant_resource).ok())
            .collect();
        let mut needed = needed_dependencies(&pods);
        // TLS Secrets of tenant Ingresses are copied the same way.
        self.add_ingress_secrets(&mut needed).await?;
        // A needed claim's volume needs its CSI Secrets, which no Pod names. Read
        // from the tenant, so a Pod sync still copying them is never raced.
        self.add_volume_secrets(&mut needed).await?;
        // Claims first: a volume copy deleted with its claim releases its CSI
        // Secrets in this same pass.
        for kind in [
            DependencyKind::PersistentVolumeClaim,
            DependencyKind::ConfigMap,
            DependencyKind::Secret,
        ] {
            let kind_synced = path.synced_kinds.contains(&kind.group_kind());
            if kind_synced {
                continue;
            }
            let held_by_volumes = if kind == DependencyKind::Secret {
                self.secrets_held_by_volumes().await?
            } else {
                BTreeSet::new()
            };
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.ctx.host.clone(),
                &self.ctx.target.host_namespace,
                &core_resource(kind.as_str()),
            );
            // The shared host watch's copies when it has listed them, else a list.
            let copies = match path.caches.host_copies(kind) {
                Some(copies) => copies,
                None => {
                    let selector = host_selector(&self.ctx.target.tenant, &kind.group_kind());
                    api.list(&ListParams::default().labels(&selector))
                        .await
                        .map_err(api_error("list", kind.as_str()))?
                        .iter()
                        .map(to_value)
                        .collect::<Result<Vec<_>, _>>()?
                }
            };
            for copy in copies {
                let (name, labels, annotations) = tenantplane_core::plan::meta_of(&copy);
                let Some(identity) = source_in(
                    name,
                    &labels,
                    &annotations,
                    &self.ctx.target.tenant,
                    &kind.group_kind(),
                ) else {
                    continue;
                };
                let key = DependencyKey {
                    kind,
                    namespace: identity.virtual_namespace.clone(),
                    name: identity.name.clone(),
                };
                // Already deleted, waiting for the host's finalizers (pvc-protection).
                if copy.pointer("/metadata/deletionTimestamp").is_some()
                    || !is_collectable(&key, &copy, &needed, kind_synced)
                    || held_by_volumes.contains(name)
                {
                    continue;
                }
                let host_name = name.to_owned();
                let params = exactly(str_at(&copy, "/metadata/uid"));
                let waited = self.write_budget().await;
                self.count_write("delete");
                match delete_exact(&api, &host_name, &params).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "delete",
                            name: host_name,
                            source,
                        });
                    }
                }
                if kind == DependencyKind::PersistentVolumeClaim
                    && let Some(volume) = str_at(&copy, "/spec/volumeName")
                {
                    delete_volume_copy(self, &volume).await?;
                }
                self.ctx.decisions.send(
                    DecisionAction::Delete,
                    "v1",
                    kind.as_str(),
                    TenantObjectRef { namespace: identity.virtual_namespace, name: identity.name, uid: identity.uid },
                    HostTarget { namespace: self.ctx.target.host_namespace.clone(), name: host_name },
                    format!("no synced Pod uses it any more and {kind} is not synced for its own sake{waited}"),
                );
            }
        }
        Ok(())
    }

    /// Adds the TLS Secrets tenant Ingresses name, when Ingresses are synced. Read
    /// from the tenant, so an Ingress sync still copying them is never raced.
    async fn add_ingress_secrets(
        &self,
        needed: &mut BTreeSet<DependencyKey>,
    ) -> Result<(), SyncError> {
        if !self.ctx.pods.synced_kinds.iter().any(is_ingress) {
            return Ok(());
        }
        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk("networking.k8s.io", "v1", "Ingress"));
        let ingresses = Api::<DynamicObject>::all_with(self.ctx.tenant.clone(), &resource)
            .list(&ListParams::default())
            .await
            .map_err(api_error("list", "Ingress"))?
            .into_iter()
            .map(|i| to_value(&i))
            .collect::<Result<Vec<_>, _>>()?;
        needed.extend(needed_by_ingresses(&ingresses));
        Ok(())
    }

    /// Adds the CSI Secrets of the volumes bound to the needed claims.
    async fn add_volume_secrets(
        &self,
        needed: &mut BTreeSet<DependencyKey>,
    ) -> Result<(), SyncError> {
        let claims: Vec<DependencyKey> = needed
            .iter()
            .filter(|k| k.kind == DependencyKind::PersistentVolumeClaim)
            .cloned()
            .collect();
        let pvc_resource = core_resource("PersistentVolumeClaim");
        let pv_resource = core_resource("PersistentVolume");
        let tenant_pvs: Api<DynamicObject> = Api::all_with(self.ctx.tenant.clone(), &pv_resource);
        for claim in claims {
            let tenant_pvcs: Api<DynamicObject> =
                Api::namespaced_with(self.ctx.tenant.clone(), &claim.namespace, &pvc_resource);
            let Some(pvc) = get_value(&tenant_pvcs, &pvc_resource, &claim.name).await? else {
                continue;
            };
            let Some(volume) = str_at(&pvc, "/spec/volumeName").filter(|v| !v.is_empty()) else {
                continue;
            };
            let Some(pv) = get_value(&tenant_pvs, &pv_resource, &volume).await? else {
                continue;
            };
            needed.extend(volume_secrets(&pv).into_iter().map(|s| DependencyKey {
                kind: DependencyKind::Secret,
                namespace: s.namespace,
                name: s.name,
            }));
        }
        Ok(())
    }

    /// Host names of the Secrets this tenant's live host PV copies use.
    async fn secrets_held_by_volumes(&self) -> Result<BTreeSet<String>, SyncError> {
        let pv_resource = core_resource("PersistentVolume");
        let host_pvs: Api<DynamicObject> = Api::all_with(self.ctx.host.clone(), &pv_resource);
        let selector = host_selector(
            &self.ctx.target.tenant,
            &GroupKind::new("", "PersistentVolume"),
        );
        let copies = host_pvs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error("list", "PersistentVolume"))?
            .into_iter()
            .map(|pv| to_value(&pv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(secrets_held_by_volumes(&self.ctx.target, &copies))
    }
}
