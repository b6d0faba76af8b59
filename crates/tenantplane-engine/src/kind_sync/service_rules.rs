//! The IsolationProfile's `spec.rules` on a virtual tenant's Services: a tenant
//! Service that breaks the Service rules (type, `externalIPs`, ExternalName target)
//! or the `metadata.services` key rules is not written to the host. Its host copy,
//! if one was synced before, is kept as it was (not updated, not deleted). The
//! refusal is a Skip decision and a Warning Event `IsolationRefused` on the tenant
//! Service, as on the Pod path.

use kube::runtime::events::{Recorder, Reporter};
use serde_json::Value;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::pods::check_service;

use super::{Key, KindSyncer};

impl KindSyncer {
    /// Checks a tenant Service against the profile's rules before any host write is
    /// planned. Returns true (after recording the refusal) when it must not be synced.
    pub(super) async fn refuses_service(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        tenant_value: &Value,
    ) -> bool {
        if self.group_kind != GroupKind::new("", "Service") {
            return false;
        }
        let refusals = check_service(tenant_value, self.ctx.pods.controls.rules.as_ref());
        if refusals.is_empty() {
            return false;
        }
        let fields: Vec<String> = refusals
            .iter()
            .map(|r| format!("{} ({})", r.field, r.control))
            .collect();
        // The same wording as a refused Pod's decision.
        let refused = format!("refused by the IsolationProfile: {}", fields.join(", "));
        if self.skip_is_new(host_name, &refused) {
            self.warn_tenant_object(
                "v1",
                "Service",
                tenant_value,
                "IsolationRefused",
                format!(
                    "not synced to the host: the IsolationProfile refuses {}",
                    fields.join(", ")
                ),
            )
            .await;
        }
        self.skip_once(
            key,
            uid,
            host_name,
            "",
            format!("cannot be synced: {refused}"),
        );
        true
    }

    /// A Warning Event on a tenant object, where its owner looks (the Pod, Service
    /// and Ingress refusals all go through here).
    pub(super) async fn warn_tenant_object(
        &self,
        api_version: &str,
        kind: &str,
        object: &Value,
        reason: &str,
        note: String,
    ) {
        let recorder = Recorder::new(
            self.ctx.tenant.clone(),
            Reporter {
                controller: "tenantplane.io/sync-engine".into(),
                instance: None,
            },
        );
        super::fields::warn_tenant_object(&recorder, api_version, kind, object, reason, note).await;
    }
}
