//! The tenant's service environment for host Pods (see
//! [`tenantplane_core::services::env`]): the host kubelet's own is off
//! (`enableServiceLinks: false`), so the variables a tenant Pod would get are
//! made from the tenant's Services here.

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::{Key, KindSyncer, SyncError};

impl KindSyncer {
    /// The tenant's service variables for a host Pod, as its kubelet would make
    /// them (only when Services are synced: only then do their addresses route).
    /// Made once, when the host Pod is created: a container's environment cannot
    /// change afterwards, so an existing host Pod keeps the one it was made with.
    pub(super) async fn add_service_env(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_pod: Option<&Value>,
        desired: &mut Value,
    ) -> Result<(), SyncError> {
        let services_synced = self
            .ctx
            .pods
            .synced_kinds
            .contains(&tenantplane_core::kinds::GroupKind::new("", "Service"));
        let Some(spec) = desired.get_mut("spec") else {
            return Ok(());
        };
        if let Some(host_pod) = host_pod {
            for list in ["containers", "initContainers"] {
                let observed = host_pod
                    .pointer(&format!("/spec/{list}"))
                    .and_then(Value::as_array);
                let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
                    continue;
                };
                for container in containers.iter_mut() {
                    let name = container.get("name").cloned();
                    let env = observed
                        .and_then(|o| o.iter().find(|c| c.get("name") == name.as_ref()))
                        .and_then(|c| c.get("env"));
                    if let (Some(env), Some(map)) = (env, container.as_object_mut()) {
                        map.insert("env".into(), env.clone());
                    }
                }
            }
            return Ok(());
        }
        let tenant_spec = tenant_pod.get("spec").cloned().unwrap_or(Value::Null);
        if !services_synced
            || tenant_spec
                .get("enableServiceLinks")
                .and_then(Value::as_bool)
                == Some(false)
        {
            return Ok(());
        }
        let resource = service_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), &key.0, &resource);
        let services: Vec<Value> = api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|source| SyncError::Api {
                verb: "list the Services of",
                name: key.0.clone(),
                source,
            })?
            .items
            .iter()
            .filter_map(|s| serde_json::to_value(s).ok())
            .collect();
        let vars = tenantplane_core::services::env::service_env(&services);
        tenantplane_core::services::env::add_service_env(&tenant_spec, spec, &vars);
        Ok(())
    }
}

fn service_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service"))
}
