//! The Ingress path of a [`KindSyncer`]: the generic sync (the transform renames
//! the backends and TLS Secrets), refused when a host name is already served by
//! another Ingress on the host or when its IngressClass is not allowed; its TLS
//! Secrets are copied like Pod dependencies; the host's load balancer status
//! flows back.

use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde_json::Value;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::services::address::load_balancer_status;
use tenantplane_core::services::ingress::host_collision;
use tenantplane_core::services::ingress_refs::{class_refusal, tls_secrets};

use super::dependency_copy::DependencyState;
use super::fields::{put_status, str_at};
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
        let uid = str_at(&tenant, "/metadata/uid");
        if let Some(reason) =
            class_refusal(&tenant, self.ctx.pods.allowed_ingress_classes.as_deref())
        {
            let reason = format!("cannot be synced: {reason}");
            if self.ingress_skip_is_new(&host_name, &reason) {
                self.warn_tenant_object(
                    &self.api_version,
                    "Ingress",
                    &tenant,
                    "IsolationRefused",
                    format!("not synced to the host: {reason}"),
                )
                .await;
            }
            self.skip_once(key, uid, &host_name, "ingress-class", reason);
            return Ok(());
        }
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
                uid.clone(),
                &host_name,
                "ingress-host-name",
                format!("cannot be synced: {reason}"),
            );
            return Ok(());
        }
        if let Some(reason) = self.ensure_tls_secrets(key, &tenant).await? {
            self.skip_once(key, uid, &host_name, "ingress-tls", reason);
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

    /// Whether a Skip with this reason was not yet recorded for `host_name`.
    fn ingress_skip_is_new(&self, host_name: &str, reason: &str) -> bool {
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        refused
            .get(host_name)
            .is_none_or(|refusal| refusal.reason != reason)
    }

    /// Copies each TLS Secret the Ingress names to the host (the Pod dependency
    /// path: finalizer, reference counting). Why the Ingress must wait, if it must.
    async fn ensure_tls_secrets(
        &self,
        key: &Key,
        tenant: &Value,
    ) -> Result<Option<String>, SyncError> {
        let synced = &self.ctx.pods.synced_kinds;
        for (name, field) in tls_secrets(tenant) {
            if !synced.contains(&GroupKind::new("", "Secret"))
                && !synced.contains(&GroupKind::new("", "Pod"))
            {
                // Only the Pod path finalizes and collects dependency copies.
                return Ok(Some(format!(
                    "waits for Secret {}/{name} ({field}): neither Secrets nor Pods are in the SyncPolicy, so no copy of it can be kept",
                    key.0
                )));
            }
            let state = self
                .ensure_copy(None, key, DependencyKind::Secret, &key.0, &name, &field)
                .await?;
            if let DependencyState::Waiting(why) = state {
                return Ok(Some(format!(
                    "waits for Secret {}/{name} ({field}): {why}",
                    key.0
                )));
            }
        }
        Ok(None)
    }
}
