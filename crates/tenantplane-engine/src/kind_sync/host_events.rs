//! Host Events about this tenant's synced host objects (Pods, Services, PVCs,
//! ConfigMaps, ... every kind a [`KindSyncer`] runs for), copied onto the tenant
//! objects (see [`tenantplane_core::host_events`]). The Events of its host
//! namespace, from the process's one watch of host Events, whatever the number
//! of kinds: each Event is matched to the synced
//! kind it names, and to the host object through that kind's cache. Events about
//! anything else in the host namespace never cross. Copies are rate-limited per
//! TenantCluster.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::Value;
use tenantplane_api::ApiFairness;
use tenantplane_core::host_events::{
    EventTarget, EventWrite, SyncedKind, event_target, involved_group_kind, tenant_event,
};
use tenantplane_core::kinds::GroupKind;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::fields::{get_value, str_at};
use super::{SyncContext, post_params, typed_value};
use crate::fairness::WriteBudget;
use crate::host_watches::Interest;
use crate::metrics::OutcomeLabels;

/// Tenant Events copied per second per TenantCluster, and the burst.
pub const HOST_EVENTS_PER_SECOND: u32 = 10;
pub const HOST_EVENTS_BURST: u32 = 50;

/// What the Events watch uses of one running kind: its caches and host API.
#[derive(Clone)]
pub(super) struct KindCaches {
    pub(super) kind: SyncedKind,
    pub(super) host_resource: ApiResource,
    pub(super) tenant_resource: ApiResource,
    pub(super) host_store: Store<DynamicObject>,
    pub(super) tenant_store: Store<DynamicObject>,
    pub(super) host_api: Api<DynamicObject>,
    /// Fired once both caches are complete.
    pub(super) ready: CancellationToken,
}

/// The kinds of one TenantCluster whose host objects' Events may cross: each
/// running [`super::KindSyncer`] registers its caches here.
#[derive(Clone, Default)]
pub struct SyncedKinds {
    inner: Arc<SyncedKindsInner>,
}

#[derive(Default)]
struct SyncedKindsInner {
    /// The kinds the engine started a syncer for (registered or about to be).
    expected: Mutex<BTreeSet<GroupKind>>,
    running: Mutex<HashMap<GroupKind, KindCaches>>,
    registered: Notify,
}

impl SyncedKinds {
    /// Notes that a syncer for `group_kind` is starting: Events about it wait for
    /// its caches instead of being dropped as foreign.
    pub fn starting(&self, group_kind: GroupKind) {
        self.inner
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(group_kind);
    }

    pub(super) fn register(&self, caches: KindCaches) {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(caches.kind.group_kind.clone(), caches);
        self.inner.registered.notify_waiters();
    }

    pub(super) fn unregister(&self, group_kind: &GroupKind) {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(group_kind);
        self.inner
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(group_kind);
    }

    /// The caches of `group_kind` once complete; `None` when it is not synced.
    async fn ready(&self, group_kind: &GroupKind) -> Option<KindCaches> {
        loop {
            let registered = self.inner.registered.notified();
            tokio::pin!(registered);
            // Registered from now on wakes us, even before we wait.
            registered.as_mut().enable();
            let found = self
                .inner
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(group_kind)
                .cloned();
            if let Some(caches) = found {
                caches.ready.cancelled().await;
                return Some(caches);
            }
            let expected = self
                .inner
                .expected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(group_kind);
            if !expected {
                return None;
            }
            registered.await;
        }
    }
}

fn count_host_event(ctx: &SyncContext, outcome: &'static str) {
    ctx.metrics
        .host_events
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Copies the Events in the TenantCluster's host namespace about its synced host
/// objects, until `cancel` fires. (The process watches host Events once, for
/// every TenantCluster; this one receives its namespace's.)
pub async fn watch_host_events(ctx: Arc<SyncContext>, cancel: CancellationToken) {
    let budget = WriteBudget::new(ApiFairness {
        qps: HOST_EVENTS_PER_SECOND,
        burst: HOST_EVENTS_BURST,
    });
    let mut stream = ctx
        .host_watches
        .subscribe(
            &ApiResource::erase::<Event>(&()),
            None,
            Interest::Namespace(ctx.target.host_namespace.clone()),
            None,
        )
        .into_events();
    let copy_all = async {
        while let Some(item) = stream.next().await {
            if let watcher::Event::Apply(event) | watcher::Event::InitApply(event) = item
                && let Err(err) = copy_host_event(&ctx, &event, &budget).await
            {
                tracing::debug!(%err, tenant = %ctx.target.tenant, "host event not copied");
            }
        }
    };
    tokio::select! {
        () = copy_all => {}
        () = cancel.cancelled() => {}
    }
}

/// The tenant object host Event `event` is about, when the host object it names
/// is the host copy of a synced object of this TenantCluster.
async fn target_of(ctx: &SyncContext, event: &Value) -> Option<EventTarget> {
    let group_kind = involved_group_kind(event)?;
    let caches = ctx.synced.ready(&group_kind).await?;
    let name = str_at(event, "/involvedObject/name")?;
    let namespace = &ctx.target.host_namespace;
    let cached = caches
        .host_store
        .get(&ObjectRef::new_with(&name, caches.host_resource.clone()).within(namespace))
        .and_then(|o| typed_value(&o, &caches.host_resource).ok());
    let host_object = match cached {
        Some(object) => object,
        // Not seen yet (the Event came first), or not ours (the cache holds only
        // objects labelled for this tenant): ask.
        None => get_value(&caches.host_api, &caches.host_resource, &name)
            .await
            .ok()
            .flatten()?,
    };
    let mut target = event_target(
        event,
        &host_object,
        &caches.kind,
        namespace,
        &ctx.target.tenant,
    )?;
    let tenant_ref =
        ObjectRef::new_with(&target.name, caches.tenant_resource.clone()).within(&target.namespace);
    if let Some(uid) = caches
        .tenant_store
        .get(&tenant_ref)
        .and_then(|o| o.metadata.uid.clone())
    {
        target.uid = Some(uid);
    }
    if group_kind == GroupKind::new("", "Pod") {
        target.node = str_at(&host_object, "/spec/nodeName")
            .filter(|n| !n.is_empty())
            .map(|n| {
                let tenant_node = ctx.pods.nodes.tenant_node_name(&n);
                (n, tenant_node)
            });
    }
    Some(target)
}

async fn copy_host_event(
    ctx: &SyncContext,
    event: &DynamicObject,
    budget: &WriteBudget,
) -> Result<(), kube::Error> {
    let Ok(event) = serde_json::to_value(event) else {
        return Ok(());
    };
    let Some(target) = target_of(ctx, &event).await else {
        count_host_event(ctx, "foreign");
        return Ok(());
    };
    let resource = ApiResource::erase::<Event>(&());
    let events: Api<DynamicObject> =
        Api::namespaced_with(ctx.tenant.clone(), &target.namespace, &resource);
    // What the name would be: look at the tenant Event of the same object, type,
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
        count_host_event(ctx, "rate_limited");
        return Ok(());
    }
    match write {
        EventWrite::Create(object) => {
            let Ok(body) = serde_json::from_value::<DynamicObject>(object) else {
                return Ok(());
            };
            match events.create(&post_params(), &body).await {
                Ok(_) => count_host_event(ctx, "copied"),
                // Created meanwhile: the next change of the host Event counts it.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(err) => return Err(err),
            }
        }
        EventWrite::Bump(patch) => {
            events
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            count_host_event(ctx, "deduplicated");
        }
        EventWrite::Nothing => {}
    }
    Ok(())
}
