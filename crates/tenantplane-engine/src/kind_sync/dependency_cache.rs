//! Watch-fed caches of the Pod path's dependencies (ConfigMaps, Secrets, claims)
//! on both sides: every tenant object of each kind (one tenant watch per kind,
//! which also notices deletions for the finalizer), and this TenantCluster's host
//! copies from the process's shared host watch. A Pod sync reads its dependencies
//! here instead of two GETs each; what the caches cannot answer (not listed yet, a
//! tenant object newer than the cache) is read from the API server.
//!
//! The tenant watch also keeps copies current: a change to a tenant dependency
//! syncs the Pods that use it again when its copy is out of date, or when they
//! wait for it ([`dependency_change`]), instead of at the next full pass.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::Value;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_kind_selector;
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::dependents::{
    DependencyChange, Dependents, dependency_change, desired_copy,
};
use tenantplane_core::pods::refcount::DependencyKey;
use tenantplane_core::pods::status::FINALIZER;
use tokio_util::sync::CancellationToken;

use super::fields::string_list;
use super::{Key, KindSyncer, SyncContext, Work, tenant_watch, typed_value};
use crate::host_watches::Interest;
use crate::queue::WorkQueue;

/// The kinds a Pod depends on, each cached on both sides.
pub(super) const DEPENDENCY_KINDS: [DependencyKind; 3] = [
    DependencyKind::ConfigMap,
    DependencyKind::Secret,
    DependencyKind::PersistentVolumeClaim,
];

pub(super) fn resource(kind: DependencyKind) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind.as_str()))
}

/// What a cache knows of one object.
pub(super) enum Cached {
    Found(Value),
    Absent,
    /// Not listed yet: ask the API server.
    Unknown,
}

/// A dependency of a tenant Pod: its kind and `(namespace, name)`.
pub(super) type DependencyRef = (DependencyKind, Key);

/// One side of one kind: its store, and whether it holds a complete list.
struct Side {
    store: Store<DynamicObject>,
    writer: Mutex<Option<Writer<DynamicObject>>>,
    ready: CancellationToken,
}

impl Side {
    fn new(resource: &ApiResource) -> Self {
        let writer = Writer::new(resource.clone());
        Self {
            store: writer.as_reader(),
            writer: Mutex::new(Some(writer)),
            ready: CancellationToken::new(),
        }
    }

    fn take_writer(&self) -> Option<Writer<DynamicObject>> {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn lookup(&self, resource: &ApiResource, namespace: &str, name: &str) -> Cached {
        if !self.ready.is_cancelled() {
            return Cached::Unknown;
        }
        match self
            .store
            .get(&ObjectRef::new_with(name, resource.clone()).within(namespace))
        {
            Some(object) => typed_value(&object, resource).map_or(Cached::Unknown, Cached::Found),
            None => Cached::Absent,
        }
    }

    /// Fires `ready` once the store holds a complete list (a store's own wait
    /// wakes one waiter only).
    async fn mark_ready(store: Store<DynamicObject>, ready: CancellationToken) {
        if store.wait_until_ready().await.is_ok() {
            ready.cancel();
        }
    }
}

struct KindCache {
    kind: DependencyKind,
    resource: ApiResource,
    tenant: Side,
    host: Side,
}

/// The caches of one Pod path, and who uses which dependency.
pub(super) struct DependencyCaches {
    kinds: Vec<KindCache>,
    pub(super) dependents: Mutex<Dependents>,
}

impl DependencyCaches {
    /// Empty caches; [`DependencyCaches::run`] fills them. Until then
    /// (and in a syncer that never runs them) every lookup is [`Cached::Unknown`].
    pub(super) fn new() -> Self {
        let kinds = DEPENDENCY_KINDS
            .into_iter()
            .map(|kind| {
                let resource = resource(kind);
                KindCache {
                    kind,
                    tenant: Side::new(&resource),
                    host: Side::new(&resource),
                    resource,
                }
            })
            .collect();
        Self {
            kinds,
            dependents: Mutex::new(Dependents::default()),
        }
    }

    fn of(&self, kind: DependencyKind) -> Option<&KindCache> {
        self.kinds.iter().find(|k| k.kind == kind)
    }

    /// Tenant object `namespace/name` of `kind`. A tenant object missing from
    /// the cache may be newer than it (a Pod seen before its ConfigMap), so only
    /// a hit is an answer.
    pub(super) fn tenant(&self, kind: DependencyKind, namespace: &str, name: &str) -> Cached {
        let Some(cache) = self.of(kind) else {
            return Cached::Unknown;
        };
        match cache.tenant.lookup(&cache.resource, namespace, name) {
            Cached::Absent => Cached::Unknown,
            other => other,
        }
    }

    /// This TenantCluster's host copy `namespace/name` of `kind`.
    pub(super) fn host(&self, kind: DependencyKind, namespace: &str, name: &str) -> Cached {
        let Some(cache) = self.of(kind) else {
            return Cached::Unknown;
        };
        cache.host.lookup(&cache.resource, namespace, name)
    }

    /// Every host copy of `kind` this TenantCluster has, when the cache holds a
    /// complete list.
    pub(super) fn host_copies(&self, kind: DependencyKind) -> Option<Vec<Value>> {
        let cache = self.of(kind)?;
        if !cache.host.ready.is_cancelled() {
            return None;
        }
        Some(
            cache
                .host
                .store
                .state()
                .iter()
                .filter_map(|o| typed_value(o, &cache.resource).ok())
                .collect(),
        )
    }

    pub(super) fn dependents(&self) -> std::sync::MutexGuard<'_, Dependents> {
        self.dependents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a tenant object carries tenantplane's finalizer.
pub(super) fn has_finalizer(object: &Value) -> bool {
    string_list(object.pointer("/metadata/finalizers"))
        .iter()
        .any(|f| f == FINALIZER)
}

/// What the dependency watches need from their syncer.
pub(super) struct DependencyWatches {
    pub(super) ctx: Arc<SyncContext>,
    /// The Pod syncer's queue: Pods a dependency change concerns go here.
    pub(super) pods: Arc<WorkQueue<Work>>,
    /// Tenant dependencies being deleted, to finalize.
    pub(super) finalize: Arc<WorkQueue<DependencyRef>>,
    /// Kinds synced for their own sake (their copies are not marked for Pods).
    pub(super) synced_kinds: BTreeSet<GroupKind>,
}

impl DependencyCaches {
    /// Fills the caches and reacts to their tenant events until the tasks are
    /// aborted. Runs once (the writers are taken).
    pub(super) async fn run(self: Arc<Self>, watches: DependencyWatches) {
        let watches = Arc::new(watches);
        let mut tasks = tokio::task::JoinSet::new();
        for (index, cache) in self.kinds.iter().enumerate() {
            let (Some(tenant_writer), Some(host_writer)) =
                (cache.tenant.take_writer(), cache.host.take_writer())
            else {
                return;
            };
            tasks.spawn(Side::mark_ready(
                cache.tenant.store.clone(),
                cache.tenant.ready.clone(),
            ));
            tasks.spawn(Side::mark_ready(
                cache.host.store.clone(),
                cache.host.ready.clone(),
            ));
            let host_events = watches.ctx.host_watches.subscribe(
                &cache.resource,
                Some(host_kind_selector(&cache.kind.group_kind())),
                Interest::copies_of(&watches.ctx.target),
                Some(host_writer),
            );
            // The shared watch keeps the store; its events are only drained here.
            tasks.spawn(async move {
                let mut events = host_events.into_events();
                while events.next().await.is_some() {}
            });
            let caches = Arc::clone(&self);
            let watches = Arc::clone(&watches);
            tasks.spawn(async move { caches.watch_tenant(index, &watches, tenant_writer).await });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Every tenant object of one kind, into its cache: one being deleted with the
    /// finalizer is queued for finalizing, a changed one syncs its Pods again when
    /// they need it.
    async fn watch_tenant(
        &self,
        index: usize,
        watches: &DependencyWatches,
        writer: Writer<DynamicObject>,
    ) {
        let Some(cache) = self.kinds.get(index) else {
            return;
        };
        let kind = cache.kind;
        let api: Api<DynamicObject> = Api::all_with(watches.ctx.tenant.clone(), &cache.resource);
        let mut stream = reflector::reflector(writer, tenant_watch(api)).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitApply(obj)) => {
                    if obj.metadata.deletion_timestamp.is_some()
                        && let Some(key) = KindSyncer::key_of(&obj)
                    {
                        watches.finalize.add((kind, key));
                    }
                }
                Ok(watcher::Event::Apply(obj)) => {
                    let (Some(key), Ok(value)) =
                        (KindSyncer::key_of(&obj), typed_value(&obj, &cache.resource))
                    else {
                        continue;
                    };
                    if obj.metadata.deletion_timestamp.is_some() {
                        if has_finalizer(&value) {
                            watches.finalize.add((kind, key));
                        }
                        continue;
                    }
                    self.changed(watches, kind, key, Some(&value));
                }
                Ok(watcher::Event::Delete(obj)) => {
                    if let Some(key) = KindSyncer::key_of(&obj) {
                        self.changed(watches, kind, key, None);
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(err) => {
                    tracing::warn!(%err, %kind, tenant = %watches.ctx.target.tenant, "dependency watch failed; retrying");
                }
            }
        }
    }

    /// Syncs again the Pods a change to tenant dependency `key` concerns.
    fn changed(
        &self,
        watches: &DependencyWatches,
        kind: DependencyKind,
        (namespace, name): Key,
        tenant_object: Option<&Value>,
    ) {
        let target = &watches.ctx.target;
        let kind_synced = watches.synced_kinds.contains(&kind.group_kind());
        let host_copy = tenant_object
            .and_then(|object| desired_copy(target, kind, object, kind_synced).ok())
            .and_then(|(placement, _)| {
                match self.host(kind, &target.host_namespace, &placement.host_name.name) {
                    Cached::Found(copy) => Some(copy),
                    Cached::Absent | Cached::Unknown => None,
                }
            });
        let key = DependencyKey {
            kind,
            namespace,
            name,
        };
        let change = dependency_change(
            &self.dependents(),
            target,
            &key,
            tenant_object,
            host_copy.as_ref(),
            kind_synced,
        );
        if let DependencyChange::Resync(pods) = change {
            for pod in pods {
                watches.pods.add(Work::Object(pod));
            }
        }
    }
}
