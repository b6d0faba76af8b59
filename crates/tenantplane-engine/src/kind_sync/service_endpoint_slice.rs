//! EndpointSlices fromHost: next to a synced Service's tenant Endpoints, one
//! EndpointSlice rendered from the same plan, where the tenant API server serves
//! discovery.k8s.io. Written only when it differs; removed with the Service; a
//! slice without tenantplane's managed-by label is never touched.

use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use serde_json::Value;
use tenantplane_core::services::endpoint_slice::{
    endpoint_slice_holds, managed_by_tenantplane, tenant_endpoint_slice,
};

use super::fields::get_value;
use super::service_endpoints::replace_or_create;
use super::{Key, KindSyncer, SyncError};

const GROUP: &str = "discovery.k8s.io";

impl KindSyncer {
    /// The newest discovery.k8s.io version the tenant serves EndpointSlices in,
    /// or `None` where it serves none.
    async fn tenant_slice_version(&self) -> Result<Option<String>, SyncError> {
        let group = match kube::discovery::group(&self.ctx.tenant, GROUP).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(source) => {
                return Err(SyncError::Api {
                    verb: "discover the EndpointSlice version for",
                    name: GROUP.into(),
                    source,
                });
            }
        };
        Ok(["v1", "v1beta1"]
            .into_iter()
            .find(|v| group.versions().any(|served| served == *v))
            .map(str::to_string))
    }

    fn tenant_slices(&self, namespace: &str, version: &str) -> (Api<DynamicObject>, ApiResource) {
        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, version, "EndpointSlice"));
        let api = Api::namespaced_with(self.ctx.tenant.clone(), namespace, &resource);
        (api, resource)
    }

    /// Writes the Service's EndpointSlice from its desired tenant Endpoints, when
    /// it differs.
    pub(super) async fn sync_tenant_endpoint_slice(
        &self,
        key: &Key,
        tenant_endpoints: &Value,
    ) -> Result<(), SyncError> {
        let Some(version) = self.tenant_slice_version().await? else {
            return Ok(());
        };
        let desired = tenant_endpoint_slice(tenant_endpoints, &version);
        let (api, resource) = self.tenant_slices(&key.0, &version);
        let observed = get_value(&api, &resource, &key.1).await?;
        let result = match &observed {
            Some(observed) if !managed_by_tenantplane(observed) => {
                tracing::debug!(tenant = %self.ctx.target.tenant, namespace = %key.0, service = %key.1, "an EndpointSlice tenantplane does not manage has the Service's name; left alone");
                return Ok(());
            }
            Some(observed) if endpoint_slice_holds(&desired, observed) => return Ok(()),
            _ => replace_or_create(&api, &key.1, desired, observed.as_ref()).await?,
        };
        match result {
            Ok(_) => {
                tracing::debug!(tenant = %self.ctx.target.tenant, namespace = %key.0, service = %key.1, "tenant EndpointSlice updated from the host");
                Ok(())
            }
            Err(source) => Err(SyncError::Api {
                verb: "write the EndpointSlice of",
                name: key.1.clone(),
                source,
            }),
        }
    }

    /// The tenant Service is gone: so is its EndpointSlice, if tenantplane's.
    pub(super) async fn remove_tenant_endpoint_slice(&self, key: &Key) -> Result<(), SyncError> {
        let Some(version) = self.tenant_slice_version().await? else {
            return Ok(());
        };
        let (api, resource) = self.tenant_slices(&key.0, &version);
        let Some(observed) = get_value(&api, &resource, &key.1).await? else {
            return Ok(());
        };
        if !managed_by_tenantplane(&observed) {
            return Ok(());
        }
        // Preconditioned on the uid seen, so a slice someone else made in between
        // is not deleted.
        let mut params = DeleteParams::default();
        if let Some(uid) = observed.pointer("/metadata/uid").and_then(Value::as_str) {
            params = params.preconditions(kube::api::Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            });
        }
        match api.delete(&key.1, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(source) => Err(SyncError::Api {
                verb: "delete the EndpointSlice of",
                name: key.1.clone(),
                source,
            }),
        }
    }
}
