//! One synced kind of one tenant: watches both sides, and for every tenant object
//! keeps exactly one up-to-date host copy, or records why not.
//!
//! Events on either side put the object's key in a work queue; a full pass (on
//! start and every drift interval) queues every key. Workers plan each key from
//! the two caches with the pure core ([`tenantplane_core::plan`]) and write only
//! when the plan says so: a pass with nothing to do makes no write and records no
//! decision.
//!
//! Stays over 500 lines: the kind's syncer, its passes and workers; its concerns
//! are already the submodules below.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::explain::sync_reason;
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::metadata::host_kind_selector;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::{
    ApplyPlan, GcPlan, WriteMemo, meta_of, plan_apply, plan_gc, stamp_desired_hash,
};
use tenantplane_core::provenance::{SourceIdentity, SourceKey, is_copy_of, source_in};
use tenantplane_core::transform::{TenantTarget, TransformError, is_system_namespace, to_host_in};
use tenantplane_core::write_outcome::{RefusedAs, WriteOutcome};
use tokio_util::sync::CancellationToken;

use crate::decisions::{DecisionSender, MANAGER};
use crate::deletion::exactly;
use crate::fairness::WriteBudget;
use crate::host_watches::{HostWatches, Interest};
use crate::metrics::{Metrics, TenantLabels, VerbLabels};
use crate::queue::WorkQueue;
use crate::status_alarm::StatusAlarm;

mod dependency_cache;
mod dependency_copy;
mod dependency_finalizer;
mod dependency_gc;
mod fields;
mod host_events;
mod ingress;
mod namespaces;
mod outage;
mod pass_memory;
mod pod;
mod pod_path;
mod problems;
mod recording;
mod service;
mod service_endpoint_slice;
mod service_endpoints;
mod service_env;
mod service_rules;
mod storage;
mod tenant_view;
mod two_way;
mod watches;
mod writes;

#[cfg(test)]
mod mock_tests;

pub use dependency_finalizer::LABEL_HOST_COPY;
pub use host_events::{HOST_EVENTS_BURST, HOST_EVENTS_PER_SECOND, SyncedKinds, watch_host_events};
pub use pod::release_pod_finalizers;
pub use pod_path::{DEFAULT_HOST_UNREACHABLE_RELEASE, PodSettings};
pub use problems::{ConflictedObjects, ObjectProblems, ServiceCidrMismatches};
pub use two_way::TwoWaySettings;

/// Watch retries: quick at first and capped at a few seconds (kube's default grows
/// to 30s), so a tenant API server that comes back is seen again promptly; with
/// jitter, so the watches of every tenant do not all retry in the same instant
/// after a host API server restarts.
pub(crate) fn watch_backoff() -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(3))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The watch of one tenant resource that every tenant-side cache is fed from:
/// jittered backoff, and no `managedFields` (nothing reads them, and they are
/// often the largest part of an object held in memory per TenantCluster).
pub(crate) fn tenant_watch(
    api: Api<DynamicObject>,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<DynamicObject>>> + Send {
    watcher(api, watcher::Config::default())
        .backoff(watch_backoff())
        .modify(drop_managed_fields)
}

/// Clears what the API server records of field ownership: the engine never reads
/// it (its transforms drop it too), and a cache should not pay for it.
pub(crate) fn drop_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// A write refused for one desired state (by its hash), and the Skip recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    hash: String,
    reason: String,
    /// The host API server refused the write itself (422, 403), rather than a
    /// foreign object holding the name: retried only once the desired state
    /// changes.
    refused_by_host: bool,
}

/// A tenant object's key: its virtual namespace and name.
pub type Key = (String, String);

/// One item of a syncer's work queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    /// Sync tenant object `key` with its host copy.
    Object(Key),
    /// The Pod path, after a full pass: remove the dependency copies and tenant
    /// Nodes that no Pod uses any more (their last Pod may have gone unwatched).
    CollectUnused,
}

/// What every kind of one tenant shares.
pub struct SyncContext {
    pub target: TenantTarget,
    pub host: Client,
    pub tenant: Client,
    pub budget: Arc<WriteBudget>,
    pub decisions: DecisionSender,
    pub metrics: Arc<Metrics>,
    /// Concurrent host writes per kind.
    pub workers: usize,
    /// Time between full passes; `None` disables drift detection.
    pub resync: Option<Duration>,
    /// How core Pods are synced (their kind takes the Pod path).
    pub pods: PodSettings,
    /// Tenant Services refused their host address, for the TenantCluster's condition.
    pub service_cidr: Arc<ServiceCidrMismatches>,
    /// Bidirectional objects with unresolved conflicts, for the `Conflicted` condition.
    pub conflicts: Arc<ConflictedObjects>,
    /// The running kinds, for the host Events watch.
    pub synced: SyncedKinds,
    /// The process's shared host watches (one per kind for every TenantCluster).
    pub host_watches: HostWatches,
    /// Raised when a tenant watch starts failing or answers again (the problem
    /// sets above raise their own copy).
    pub status_alarm: StatusAlarm,
}

/// The kind one [`KindSyncer`] syncs, resolved on both API servers.
pub struct KindTarget {
    pub api_version: String,
    pub group_kind: GroupKind,
    pub tenant_resource: ApiResource,
    pub host_resource: ApiResource,
    /// Set for bidirectional kinds.
    pub two_way: Option<TwoWaySettings>,
}

/// Progress of one kind, read by the controller for conditions and by tests.
#[derive(Debug, Default)]
pub struct KindProgress {
    /// Full passes completed.
    pub passes: AtomicU64,
    /// Errors in the last completed pass.
    pub last_pass_errors: AtomicU64,
    /// Errors since the current pass began.
    errors_in_pass: AtomicU64,
    /// The last error, for the condition message.
    pub last_error: Mutex<Option<String>>,
}

impl KindProgress {
    fn error(&self, message: String) {
        self.errors_in_pass.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(message);
    }
}

/// Why one object could not be synced this time (it is retried).
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("{verb} {name}: {source}")]
    Api {
        verb: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Decode(String),
}

pub struct KindSyncer {
    ctx: Arc<SyncContext>,
    api_version: String,
    group_kind: GroupKind,
    tenant_resource: ApiResource,
    host_resource: ApiResource,
    tenant_store: Store<DynamicObject>,
    host_store: Store<DynamicObject>,
    host_api: Api<DynamicObject>,
    queue: Arc<WorkQueue<Work>>,
    /// What the server made of our last write per host name (see [`WriteMemo`]).
    memos: Mutex<HashMap<String, WriteMemo>>,
    /// Host objects this syncer created that its host watch has not shown yet, by
    /// name: planning reads them as the host copy, so a key synced again before the
    /// watch catches up is not created a second time (a 409 and a read).
    unseen_creates: Mutex<HashMap<String, Value>>,
    /// Host objects this syncer deleted (by name, the UID deleted) that its host
    /// watch still shows (terminating, or the event not there yet): a key synced
    /// again meanwhile does not send the same delete a second time.
    sent_deletes: Mutex<HashMap<String, String>>,
    /// Per host name: the desired hash a write was refused for, and the Skip
    /// recorded, so neither is repeated while nothing changes.
    refused: Mutex<HashMap<String, Refusal>>,
    /// When each key was first seen changed, for the latency histogram.
    seen_at: Mutex<HashMap<Key, Instant>>,
    attempts: Mutex<HashMap<Work, u32>>,
    /// Fired once both caches hold a complete list. (A store's own
    /// `wait_until_ready` wakes only one waiter, so one task waits and fires this.)
    ready: CancellationToken,
    pub progress: Arc<KindProgress>,
    /// Set for core Pods: the Pod path (dependencies, finalizers, status back).
    pods: Option<pod_path::PodPath>,
    /// Set for kinds whose host copy depends on the tenant's namespaces.
    namespaces: Option<Store<DynamicObject>>,
    /// Set for core Services: the tenant Service carries its host copy's address.
    services: Option<service::ServicePath>,
    /// Set for bidirectional kinds.
    two_way: Option<TwoWaySettings>,
    /// Versions our own two-way writes replaced, to recognise a lagging cache.
    superseded: two_way::SupersededVersions,
    /// Per bidirectional object: quiet versions and conflict reporting.
    passes: pass_memory::PassMemory,
}

impl KindSyncer {
    /// Builds the syncer and starts its watchers, workers and passes. Returns when
    /// `cancel` fires.
    pub async fn run(
        ctx: Arc<SyncContext>,
        kind: KindTarget,
        progress: Arc<KindProgress>,
        cancel: CancellationToken,
    ) {
        let tenant_api: Api<DynamicObject> =
            Api::all_with(ctx.tenant.clone(), &kind.tenant_resource);
        let host_api: Api<DynamicObject> = Api::namespaced_with(
            ctx.host.clone(),
            &ctx.target.host_namespace,
            &kind.host_resource,
        );
        let tenant_writer = reflector::store::Writer::new(kind.tenant_resource.clone());
        let tenant_store = tenant_writer.as_reader();
        let host_writer = reflector::store::Writer::new(kind.host_resource.clone());
        let host_store = host_writer.as_reader();
        let host_events = ctx.host_watches.subscribe(
            &kind.host_resource,
            Some(host_kind_selector(&kind.group_kind)),
            Interest::copies_of(&ctx.target),
            Some(host_writer),
        );
        let namespace_cache =
            namespaces::needs_namespaces(&kind.group_kind).then(namespaces::namespace_cache);
        let mut tasks = tokio::task::JoinSet::new();
        let syncer = Arc::new(KindSyncer::new(
            Arc::clone(&ctx),
            kind,
            (tenant_store, host_store),
            namespace_cache.as_ref().map(|(_, store)| store.clone()),
            progress,
        ));
        ctx.synced.register(host_events::KindCaches {
            kind: tenantplane_core::host_events::SyncedKind {
                api_version: syncer.api_version.clone(),
                group_kind: syncer.group_kind.clone(),
            },
            host_resource: syncer.host_resource.clone(),
            tenant_resource: syncer.tenant_resource.clone(),
            host_store: syncer.host_store.clone(),
            tenant_store: syncer.tenant_store.clone(),
            host_api: host_api.clone(),
            ready: syncer.ready.clone(),
        });
        if let Some((writer, _)) = namespace_cache {
            let s = Arc::clone(&syncer);
            let tenant = ctx.tenant.clone();
            tasks.spawn(async move { s.watch_namespaces(tenant, writer).await });
        }

        {
            let s = Arc::clone(&syncer);
            let stream = reflector::reflector(tenant_writer, tenant_watch(tenant_api)).boxed();
            tasks.spawn(async move {
                s.watch("tenant", stream, |_, obj| Self::key_of(obj), true)
                    .await
            });
        }
        {
            let s = Arc::clone(&syncer);
            let seen = Arc::clone(&s);
            let stream = host_events
                .into_events()
                .inspect(move |event| seen.host_event_seen(event))
                .map(Ok);
            tasks.spawn(async move { s.watch("host", stream, Self::key_of_host, false).await });
        }
        {
            let s = Arc::clone(&syncer);
            tasks.spawn(async move {
                let namespaces_ready = match &s.namespaces {
                    Some(store) => store.wait_until_ready().await.is_ok(),
                    None => true,
                };
                if s.tenant_store.wait_until_ready().await.is_ok()
                    && s.host_store.wait_until_ready().await.is_ok()
                    && namespaces_ready
                {
                    s.ready.cancel();
                }
            });
        }
        for _ in 0..ctx.workers.max(1) {
            let s = Arc::clone(&syncer);
            tasks.spawn(async move { s.work().await });
        }
        {
            let s = Arc::clone(&syncer);
            tasks.spawn(async move { s.passes().await });
        }
        if let Some(writer) = syncer.services.as_ref().and_then(|s| {
            s.endpoints_writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        }) {
            let s = Arc::clone(&syncer);
            tasks.spawn(async move { s.watch_host_endpoints(writer).await });
        }
        if let Some(path) = &syncer.pods {
            let watches = dependency_cache::DependencyWatches {
                ctx: Arc::clone(&ctx),
                pods: Arc::clone(&syncer.queue),
                finalize: Arc::clone(&path.dependencies),
                synced_kinds: path.synced_kinds.clone(),
            };
            tasks.spawn(Arc::clone(&path.caches).run(watches));
            let s = Arc::clone(&syncer);
            tasks.spawn(async move { s.finalize_dependencies().await });
        }
        cancel.cancelled().await;
        ctx.synced.unregister(&syncer.group_kind);
        syncer.queue.shut_down();
        if let Some(path) = &syncer.pods {
            path.dependencies.shut_down();
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    /// The syncer of `kind` over these caches (filled by the caller's watches).
    fn new(
        ctx: Arc<SyncContext>,
        kind: KindTarget,
        (tenant_store, host_store): (Store<DynamicObject>, Store<DynamicObject>),
        namespaces: Option<Store<DynamicObject>>,
        progress: Arc<KindProgress>,
    ) -> Self {
        let KindTarget {
            api_version,
            group_kind,
            tenant_resource,
            host_resource,
            two_way,
        } = kind;
        let group_kind_is_pod = group_kind == GroupKind::new("", "Pod");
        let group_kind_is_service = group_kind == GroupKind::new("", "Service");
        let host_api: Api<DynamicObject> =
            Api::namespaced_with(ctx.host.clone(), &ctx.target.host_namespace, &host_resource);
        KindSyncer {
            api_version,
            group_kind,
            tenant_resource,
            host_resource,
            tenant_store,
            host_store,
            host_api,
            queue: WorkQueue::new(),
            memos: Mutex::new(HashMap::new()),
            unseen_creates: Mutex::new(HashMap::new()),
            sent_deletes: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            seen_at: Mutex::new(HashMap::new()),
            attempts: Mutex::new(HashMap::new()),
            ready: CancellationToken::new(),
            progress,
            pods: (group_kind_is_pod)
                .then(|| pod_path::PodPath::new(ctx.pods.clone(), ctx.tenant.clone())),
            namespaces,
            services: group_kind_is_service.then(service::ServicePath::new),
            two_way,
            superseded: Default::default(),
            passes: Default::default(),
            ctx,
        }
    }

    /// Queues every key on either side.
    fn full_pass(&self) {
        for obj in self.tenant_store.state() {
            if let Some(key) = Self::key_of(&obj)
                && !is_system_namespace(&key.0)
            {
                self.queue.add(Work::Object(key));
            }
        }
        for obj in self.host_store.state() {
            if let Some(key) = self.key_of_host(&obj) {
                self.queue.add(Work::Object(key));
            }
        }
        if self.pods.is_some() {
            // Dependency copies whose last Pod went while nobody was watching.
            self.queue.add(Work::CollectUnused);
        }
    }

    /// Waits for both caches, then runs a pass now and every resync interval, and
    /// records each pass's outcome once its keys are all processed.
    async fn passes(self: Arc<Self>) {
        self.ready.cancelled().await;
        loop {
            self.progress.errors_in_pass.store(0, Ordering::Relaxed);
            self.full_pass();
            while self.queue.outstanding() > 0 {
                self.ctx
                    .metrics
                    .queue_depth
                    .get_or_create(&TenantLabels {
                        tenant: self.ctx.target.tenant.clone(),
                    })
                    .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let errors = self.progress.errors_in_pass.load(Ordering::Relaxed);
            self.progress
                .last_pass_errors
                .store(errors, Ordering::Relaxed);
            if errors == 0 {
                *self
                    .progress
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
            }
            self.progress.passes.fetch_add(1, Ordering::Relaxed);
            self.ctx
                .metrics
                .passes
                .get_or_create(&TenantLabels {
                    tenant: self.ctx.target.tenant.clone(),
                })
                .inc();
            match self.ctx.resync {
                Some(every) => tokio::time::sleep(every).await,
                None => return,
            }
        }
    }

    async fn work(self: Arc<Self>) {
        // Never plan from a half-filled cache: an object missing from a tenant cache
        // that is still listing would look deleted, and be garbage-collected.
        self.ready.cancelled().await;
        while let Some(work) = self.queue.next().await {
            // Boxed: a sync's state is several KiB, and a worker waits on the queue
            // most of its life. Inline, every idle worker of every kind of every
            // TenantCluster would hold that much (48 per TenantCluster by default).
            let (result, key) = match &work {
                Work::Object(key) => (Box::pin(self.sync(key)).await, key.clone()),
                // Logged and reported under an empty key, as no object has one.
                Work::CollectUnused => {
                    let result = match &self.pods {
                        Some(path) => Box::pin(self.collect_unused(path)).await,
                        None => Ok(()),
                    };
                    (result, Key::default())
                }
            };
            match result {
                Ok(()) => {
                    self.attempts
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&work);
                }
                Err(err) => {
                    self.ctx.metrics.sync_errors.inc();
                    let attempt = {
                        let mut attempts =
                            self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
                        let n = attempts.entry(work.clone()).or_insert(0);
                        *n = n.saturating_add(1);
                        *n
                    };
                    tracing::warn!(error = %err, kind = %self.group_kind, namespace = %key.0, name = %key.1, attempt, "sync failed; retrying");
                    self.progress
                        .error(format!("{} {}/{}: {err}", self.group_kind, key.0, key.1));
                    let backoff = Duration::from_millis(100u64.saturating_mul(1 << attempt.min(8)));
                    self.queue
                        .add_after(work.clone(), backoff.min(Duration::from_secs(30)));
                }
            }
            self.queue.done(&work);
        }
    }

    /// Syncs `key` again after `delay`.
    fn requeue_after(&self, key: &Key, delay: Duration) {
        self.queue.add_after(Work::Object(key.clone()), delay);
    }
}

/// An object from a cache as JSON. Watch and list items carry no type; the
/// resource says what they are.
fn typed_value(object: &DynamicObject, resource: &ApiResource) -> Result<Value, SyncError> {
    let mut value = serde_json::to_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            Value::String(resource.api_version.clone()),
        );
        map.insert("kind".into(), Value::String(resource.kind.clone()));
    }
    Ok(value)
}

/// Whether a tenant object is tenantplane's fromHost copy of a host object.
fn is_from_host_copy(object: &DynamicObject) -> bool {
    use kube::ResourceExt;
    use tenantplane_core::from_host::{ANNOTATION_HOST_SOURCE, LABEL_FROM_HOST};
    object
        .labels()
        .get(LABEL_FROM_HOST)
        .is_some_and(|v| v == "true")
        && object.annotations().contains_key(ANNOTATION_HOST_SOURCE)
}

pub(crate) fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(MANAGER.into()),
    }
}

fn placement_reason(
    target: &TenantTarget,
    placement: &tenantplane_core::transform::Placement,
) -> String {
    sync_reason(target, placement)
}

#[cfg(test)]
#[path = "kind_sync_tests.rs"]
mod tests;
