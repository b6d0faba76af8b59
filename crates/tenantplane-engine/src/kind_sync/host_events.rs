//! Host Events about this tenant's host Pods, copied onto the tenant Pods (see
//! [`tenantplane_core::pods::host_events`]). Events about anything else in the
//! host namespace never cross. Copies are rate-limited per TenantCluster.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tenantplane_api::ApiFairness;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::pods::host_events::{EventTarget, EventWrite, is_about_pod, tenant_event};
use tenantplane_core::provenance::reverse_lookup;

use super::pod::{get_value, str_at};
use super::{KindSyncer, WatchBackoff, post_params, typed_value};
use crate::fairness::WriteBudget;
use crate::metrics::OutcomeLabels;

/// Tenant Events copied per second per TenantCluster, and the burst.
pub const HOST_EVENTS_PER_SECOND: u32 = 10;
pub const HOST_EVENTS_BURST: u32 = 50;

impl KindSyncer {
    fn count_host_event(&self, outcome: &'static str) {
        self.ctx
            .metrics
            .host_events
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Watches Events in the host namespace and copies those about this tenant's
    /// host Pods. Returns when the task is aborted.
    pub(super) async fn watch_host_events(self: Arc<Self>) {
        // The host Pod cache decides what is ours: wait until it is complete.
        self.ready.cancelled().await;
        let budget = WriteBudget::new(ApiFairness {
            qps: HOST_EVENTS_PER_SECOND,
            burst: HOST_EVENTS_BURST,
        });
        let api: Api<Event> =
            Api::namespaced(self.ctx.host.clone(), &self.ctx.target.host_namespace);
        let mut stream = watcher(api, watcher::Config::default())
            .backoff(WatchBackoff::default())
            .applied_objects()
            .boxed();
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    if let Err(err) = self.copy_host_event(&event, &budget).await {
                        tracing::debug!(%err, tenant = %self.ctx.target.tenant, "host event not copied");
                    }
                }
                Err(err) => {
                    tracing::debug!(%err, tenant = %self.ctx.target.tenant, "host event watch");
                }
            }
        }
    }

    /// The tenant Pod the host Pod `name` stands for, when it is a synced host Pod
    /// of this TenantCluster.
    async fn event_target(&self, event: &Value) -> Option<EventTarget> {
        let name = str_at(event, "/involvedObject/name")?;
        let namespace = &self.ctx.target.host_namespace;
        let cached = self
            .host_store
            .get(&ObjectRef::new_with(&name, self.host_resource.clone()).within(namespace))
            .and_then(|o| typed_value(&o, &self.host_resource).ok());
        let host_pod = match cached {
            Some(pod) => pod,
            // Not seen yet (the Event came first): ask.
            None => get_value(&self.host_api, &self.host_resource, &name)
                .await
                .ok()
                .flatten()?,
        };
        let host_uid = str_at(&host_pod, "/metadata/uid");
        if !is_about_pod(event, namespace, &name, host_uid.as_deref()) {
            return None;
        }
        let (actual, labels, annotations) = tenantplane_core::plan::meta_of(&host_pod);
        let identity = reverse_lookup(actual, &labels, &annotations).ok()?;
        if identity.tenant != self.ctx.target.tenant
            || identity.group_kind != GroupKind::new("", "Pod")
        {
            return None;
        }
        let tenant_ref = ObjectRef::new_with(&identity.name, self.tenant_resource.clone())
            .within(&identity.virtual_namespace);
        let tenant_uid = self
            .tenant_store
            .get(&tenant_ref)
            .and_then(|p| p.metadata.uid.clone())
            .or(identity.uid);
        let view = &self.ctx.pods.nodes;
        let node = str_at(&host_pod, "/spec/nodeName")
            .filter(|n| !n.is_empty())
            .map(|n| {
                let tenant_node = view.tenant_node_name(&n);
                (n, tenant_node)
            });
        Some(EventTarget {
            namespace: identity.virtual_namespace,
            name: identity.name,
            uid: tenant_uid,
            host_namespace: namespace.clone(),
            host_pod: name,
            node,
        })
    }

    async fn copy_host_event(
        &self,
        event: &Event,
        budget: &WriteBudget,
    ) -> Result<(), kube::Error> {
        let Ok(event) = serde_json::to_value(event) else {
            return Ok(());
        };
        if event
            .pointer("/involvedObject/kind")
            .and_then(Value::as_str)
            != Some("Pod")
        {
            self.count_host_event("foreign");
            return Ok(());
        }
        let Some(target) = self.event_target(&event).await else {
            self.count_host_event("foreign");
            return Ok(());
        };
        let resource = kube::api::ApiResource::erase::<Event>(&());
        let events: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), &target.namespace, &resource);
        // What the name would be: look at the tenant Event of the same Pod, type,
        // reason and message.
        let EventWrite::Create(fresh) = tenant_event(&event, &target, None) else {
            return Ok(());
        };
        let name = str_at(&fresh, "/metadata/name").unwrap_or_default();
        let existing = events.get_opt(&name).await?;
        let existing = existing.and_then(|e| serde_json::to_value(e).ok());
        let write = tenant_event(&event, &target, existing.as_ref());
        if write == EventWrite::Nothing {
            return Ok(());
        }
        if !budget.try_acquire() {
            self.count_host_event("rate_limited");
            return Ok(());
        }
        match write {
            EventWrite::Create(object) => {
                let Ok(body) = serde_json::from_value::<DynamicObject>(object) else {
                    return Ok(());
                };
                match events.create(&post_params(), &body).await {
                    Ok(_) => self.count_host_event("copied"),
                    // Created meanwhile: the next change of the host Event counts it.
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(err) => return Err(err),
                }
            }
            EventWrite::Bump(patch) => {
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                self.count_host_event("deduplicated");
            }
            EventWrite::Nothing => {}
        }
        Ok(())
    }
}
