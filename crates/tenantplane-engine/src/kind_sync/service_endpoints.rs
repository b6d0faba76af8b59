//! Endpoints fromHost for the Service path: the host copy's Endpoints (filled by
//! the host's endpoints controller) become the tenant Service's Endpoints, with
//! tenant Pod names in `targetRef`. Written only when they differ; removed when
//! the tenant Service goes.

use futures::StreamExt;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_kind_selector;
use tenantplane_core::plan::meta_of;
use tenantplane_core::provenance::source_in;
use tenantplane_core::services::endpoints::{
    TenantPodRef, endpoints_from_host, endpoints_hold, tenant_endpoints,
};

use super::fields::{get_value, str_at};
use super::{Key, KindSyncer, SyncError, post_params};
use crate::host_watches::Interest;

fn endpoints_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Endpoints"))
}

fn pod_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
}

impl KindSyncer {
    /// Watches the host Endpoints of this tenant's Service copies (they carry the
    /// Services' labels) into `writer`, queueing the Service each belongs to.
    pub(super) async fn watch_host_endpoints(
        self: Arc<Self>,
        writer: reflector::store::Writer<DynamicObject>,
    ) {
        // Shared by every TenantCluster of the process, like the Services' own watch.
        let stream = self
            .ctx
            .host_watches
            .subscribe(
                &endpoints_resource(),
                Some(host_kind_selector(&self.group_kind)),
                Interest::copies_of(&self.ctx.target),
                Some(writer),
            )
            .into_events()
            .map(Ok);
        self.watch("host endpoints", stream, Self::key_of_host_endpoints, false)
            .await;
    }

    /// The tenant Service a host Endpoints belongs to: the one of its host
    /// Service copy (Endpoints carry no reverse-mapping annotations of their own).
    fn key_of_host_endpoints(&self, endpoints: &DynamicObject) -> Option<Key> {
        let name = endpoints.metadata.name.as_deref()?;
        let service_ref = ObjectRef::new_with(name, self.host_resource.clone())
            .within(&self.ctx.target.host_namespace);
        let service = self.host_store.get(&service_ref)?;
        self.key_of_host(&service)
    }

    /// Brings the host copy's Endpoints into the tenant, when they differ.
    pub(super) async fn sync_tenant_endpoints(
        &self,
        key: &Key,
        tenant_service: &Value,
        host_name: &str,
        endpoints: &Store<DynamicObject>,
    ) -> Result<(), SyncError> {
        if !endpoints_from_host(tenant_service) {
            return Ok(());
        }
        let host_ref = ObjectRef::new_with(host_name, endpoints_resource())
            .within(&self.ctx.target.host_namespace);
        let host_endpoints = endpoints
            .get(&host_ref)
            .map(|e| serde_json::to_value(&*e))
            .transpose()
            .map_err(|e| SyncError::Decode(e.to_string()))?;
        if host_endpoints.is_none() {
            // Not made yet by the host's endpoints controller, or not yet in our
            // cache (a restart): the tenant's Endpoints stay as they are rather
            // than flap to empty; the host watch brings this Service back.
            return Ok(());
        }
        let pods = self.host_pods_of(host_endpoints.as_ref()).await?;
        let desired = tenant_endpoints(tenant_service, host_endpoints.as_ref(), &|name| {
            pods.get(name).cloned().flatten()
        });
        let resource = endpoints_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), &key.0, &resource);
        let observed = get_value(&api, &resource, &key.1).await?;
        let result = match &observed {
            Some(observed) if endpoints_hold(&desired, observed) => {
                return self.sync_tenant_endpoint_slice(key, &desired).await;
            }
            _ => replace_or_create(&api, &key.1, desired.clone(), observed.as_ref()).await?,
        };
        match result {
            Ok(_) => {
                tracing::debug!(tenant = %self.ctx.target.tenant, namespace = %key.0, service = %key.1, "tenant Endpoints updated from the host");
                self.sync_tenant_endpoint_slice(key, &desired).await
            }
            Err(source) => Err(SyncError::Api {
                verb: "write the Endpoints of",
                name: key.1.clone(),
                source,
            }),
        }
    }

    /// For every Pod an Endpoints names: the tenant Pod it stands for, when it is
    /// this tenant's (read from its reverse-mapping metadata).
    async fn host_pods_of(
        &self,
        host_endpoints: Option<&Value>,
    ) -> Result<HashMap<String, Option<TenantPodRef>>, SyncError> {
        let mut names: Vec<String> = Vec::new();
        for subset in host_endpoints
            .and_then(|e| e.get("subsets"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for field in ["addresses", "notReadyAddresses"] {
                for address in subset
                    .get(field)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if address.pointer("/targetRef/kind").and_then(Value::as_str) == Some("Pod")
                        && let Some(name) = str_at(address, "/targetRef/name")
                    {
                        names.push(name);
                    }
                }
            }
        }
        let resource = pod_resource();
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.ctx.host.clone(),
            &self.ctx.target.host_namespace,
            &resource,
        );
        let mut pods = HashMap::new();
        for name in names {
            if pods.contains_key(&name) {
                continue;
            }
            let pod = get_value(&api, &resource, &name).await?;
            let tenant_pod = pod.as_ref().and_then(|pod| {
                let (host_name, labels, annotations) = meta_of(pod);
                let pod_kind = GroupKind::new("", "Pod");
                let id = source_in(
                    host_name,
                    &labels,
                    &annotations,
                    &self.ctx.target.tenant,
                    &pod_kind,
                )?;
                Some(TenantPodRef {
                    namespace: id.virtual_namespace,
                    name: id.name,
                    uid: id.uid,
                })
            });
            pods.insert(name, tenant_pod);
        }
        Ok(pods)
    }

    /// The tenant Service is gone: so are its Endpoints (the tenant's own endpoints
    /// controller, which would remove them, is off).
    pub(super) async fn remove_tenant_endpoints(&self, key: &Key) -> Result<(), SyncError> {
        let resource = endpoints_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), &key.0, &resource);
        match api.delete(&key.1, &DeleteParams::default()).await {
            Ok(_) => self.remove_tenant_endpoint_slice(key).await,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.remove_tenant_endpoint_slice(key).await
            }
            Err(source) => Err(SyncError::Api {
                verb: "delete the Endpoints of",
                name: key.1.clone(),
                source,
            }),
        }
    }
}

/// Writes `desired` over `observed` (a PUT with its resourceVersion, so a change made
/// meanwhile is a conflict, not lost), or creates it when nothing is there. The outer
/// error is a body that does not decode; the inner one is the API server's answer.
pub(super) async fn replace_or_create(
    api: &Api<DynamicObject>,
    name: &str,
    mut desired: Value,
    observed: Option<&Value>,
) -> Result<Result<DynamicObject, kube::Error>, SyncError> {
    if let Some(observed) = observed {
        desired["metadata"]["resourceVersion"] = observed
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
    }
    let body: DynamicObject =
        serde_json::from_value(desired).map_err(|e| SyncError::Decode(e.to_string()))?;
    Ok(match observed {
        Some(_) => api.replace(name, &post_params(), &body).await,
        None => api.create(&post_params(), &body).await,
    })
}
