//! The Ingress path of a [`KindSyncer`]: the generic sync (the transform renames
//! the backends and TLS Secrets), refused when a host name is already served by
//! another Ingress on the host; the host's load balancer status flows back.

use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde_json::Value;
use tenantplane_core::services::address::load_balancer_status;
use tenantplane_core::services::ingress::host_collision;

use super::pod::{put_status, str_at};
use super::{Key, KindSyncer, SyncError};

impl KindSyncer {
    pub(super) async fn sync_ingress(&self, key: &Key) -> Result<(), SyncError> {
        let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
        let Some(tenant) = tenant_obj else {
            return match host_obj {
                Some(host_obj) => self.collect(key, &host_name, &host_obj).await,
                None => Ok(()),
            };
        };
        // Every Ingress on the host: an ingress controller serves them all alike.
        let all: Api<DynamicObject> = Api::all_with(self.ctx.host.clone(), &self.host_resource);
        let others: Vec<Value> = all
            .list(&ListParams::default())
            .await
            .map_err(|source| SyncError::Api {
                verb: "list",
                name: "host Ingresses".into(),
                source,
            })?
            .items
            .iter()
            .filter_map(|i| serde_json::to_value(i).ok())
            .collect();
        if let Some(reason) = host_collision(
            &tenant,
            &self.ctx.target.host_namespace,
            &host_name,
            &others,
        ) {
            self.skip_once(
                key,
                str_at(&tenant, "/metadata/uid"),
                &host_name,
                "ingress-host-name",
                format!("cannot be synced: {reason}"),
            );
            return Ok(());
        }
        self.apply(key, &tenant, host_obj.clone()).await?;
        if let Some(host) = host_obj
            && self.is_our_copy(key, &host)
            && let Some(status) = load_balancer_status(&tenant, &host)
        {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.ctx.tenant.clone(), &key.0, &self.tenant_resource);
            put_status(&api, &tenant, status).await?;
        }
        Ok(())
    }
}
