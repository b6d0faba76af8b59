//! One synced kind of one tenant: watches both sides, and for every tenant object
//! keeps exactly one up-to-date host copy, or records why not.
//!
//! Events on either side put the object's key in a work queue; a full pass (on
//! start and every drift interval) queues every key. Workers plan each key from
//! the two caches with the pure core ([`tenantplane_core::plan`]) and write only
//! when the plan says so: a pass with nothing to do makes no write and records no
//! decision.

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
mod service;
mod service_endpoint_slice;
mod service_endpoints;
mod service_env;
mod service_rules;
mod storage;
mod tenant_view;
mod two_way;

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
            let stream = reflector::reflector(
                tenant_writer,
                watcher(tenant_api, watcher::Config::default()).backoff(watch_backoff()),
            )
            .boxed();
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
        if syncer.pods.is_some() {
            for kind in dependency_finalizer::DEPENDENCY_KINDS {
                let s = Arc::clone(&syncer);
                tasks.spawn(async move { s.watch_dependencies(kind).await });
            }
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

    fn key_of(object: &DynamicObject) -> Option<Key> {
        Some((
            object.metadata.namespace.clone()?,
            object.metadata.name.clone()?,
        ))
    }

    fn enqueue_changed(&self, key: Key) {
        if is_system_namespace(&key.0) {
            return;
        }
        self.seen_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_insert_with(Instant::now);
        self.queue.add(Work::Object(key));
    }

    /// Feeds one side's watch events into the queue. `key_of` maps an object to the
    /// tenant key it concerns; `changed` marks a tenant-side change (latency is
    /// measured from it).
    async fn watch(
        self: Arc<Self>,
        side: &'static str,
        mut stream: impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
        + Unpin,
        key_of: impl Fn(&Self, &DynamicObject) -> Option<Key>,
        changed: bool,
    ) {
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => match key_of(&self, &obj) {
                    Some(key) if changed => self.enqueue_changed(key),
                    Some(key) => self.queue.add(Work::Object(key)),
                    None => {}
                },
                // A re-list after a disconnect: objects deleted meanwhile are found
                // by the full pass it triggers.
                Ok(watcher::Event::InitDone) => self.full_pass(),
                Ok(watcher::Event::Init) => {}
                Err(err) => {
                    tracing::warn!(%err, side, kind = %self.group_kind, tenant = %self.ctx.target.tenant, "watch failed; retrying");
                }
            }
        }
    }

    /// The tenant key a host object maps back to, if it is one of ours.
    fn key_of_host(&self, obj: &DynamicObject) -> Option<Key> {
        let name = obj.metadata.name.as_deref()?;
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        let annotations = obj.metadata.annotations.clone().unwrap_or_default();
        let identity = source_in(
            name,
            &labels,
            &annotations,
            &self.ctx.target.tenant,
            &self.group_kind,
        )?;
        Some((identity.virtual_namespace, identity.name))
    }

    /// Whether `host` is tenantplane's copy of this tenant's `group_kind` object `key`.
    fn is_copy(&self, group_kind: &GroupKind, key: &Key, host: &Value) -> bool {
        let (name, labels, annotations) = meta_of(host);
        let source = SourceKey {
            tenant: &self.ctx.target.tenant,
            virtual_namespace: &key.0,
            name: &key.1,
            group_kind,
        };
        is_copy_of(name, &labels, &annotations, &source)
    }

    /// Whether `host` is tenantplane's copy of tenant object `key` of this kind.
    fn is_our_copy(&self, key: &Key, host: &Value) -> bool {
        self.is_copy(&self.group_kind, key, host)
    }

    /// A host watch event shows what is there: from now on the cache, not the record
    /// of our create, answers for that name. A relist (`InitDone`) clears every
    /// record: what it did not list is gone.
    fn host_event_seen(&self, event: &watcher::Event<DynamicObject>) {
        self.forget_sent_deletes(event);
        let mut unseen = self
            .unseen_creates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(obj)
            | watcher::Event::Delete(obj)
            | watcher::Event::InitApply(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    unseen.remove(name);
                }
            }
            watcher::Event::InitDone => unseen.clear(),
            watcher::Event::Init => {}
        }
    }

    /// A delete sent is forgotten once its object is gone, replaced (another UID)
    /// or the watch lists anew (what it then still shows is asked about again).
    fn forget_sent_deletes(&self, event: &watcher::Event<DynamicObject>) {
        let mut sent = self
            .sent_deletes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if sent.is_empty() {
            return;
        }
        match event {
            watcher::Event::Delete(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    sent.remove(name);
                }
            }
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                if let Some(name) = obj.metadata.name.as_deref()
                    && sent.get(name).map(String::as_str) != obj.metadata.uid.as_deref()
                {
                    sent.remove(name);
                }
            }
            watcher::Event::Init => sent.clear(),
            watcher::Event::InitDone => {}
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
            let (result, key) = match &work {
                Work::Object(key) => (self.sync(key).await, key.clone()),
                // Logged and reported under an empty key, as no object has one.
                Work::CollectUnused => (self.collect_unused().await, Key::default()),
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

    fn tenant_ref(&self, key: &Key, uid: Option<String>) -> TenantObjectRef {
        TenantObjectRef {
            namespace: key.0.clone(),
            name: key.1.clone(),
            uid,
        }
    }

    fn decide(
        &self,
        action: DecisionAction,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        reason: String,
    ) {
        self.ctx.decisions.send(
            action,
            &self.api_version,
            &self.group_kind.kind,
            self.tenant_ref(key, uid),
            HostTarget {
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name.to_owned(),
            },
            reason,
        );
    }

    /// Whether a Skip with this reason was not yet recorded for `host_name`.
    fn skip_is_new(&self, host_name: &str, reason: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused
            .get(host_name)
            .is_none_or(|refusal| !refusal.reason.ends_with(reason))
    }

    /// Records a Skip once per (host name, desired hash, reason).
    fn skip_once(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
    ) {
        self.skip_recorded(key, uid, host_name, desired_hash, reason, false);
    }

    /// [`Self::skip_once`] for a write the host API server itself refused (422,
    /// 403): it is not sent again until the desired state changes.
    fn skip_until_changed(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
    ) {
        self.skip_recorded(key, uid, host_name, desired_hash, reason, true);
    }

    fn skip_recorded(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
        refused_by_host: bool,
    ) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = Refusal {
            hash: desired_hash.to_owned(),
            reason: reason.clone(),
            refused_by_host,
        };
        if refused.get(host_name) == Some(&entry) {
            return;
        }
        refused.insert(host_name.to_owned(), entry);
        drop(refused);
        self.decide(DecisionAction::Skip, key, uid, host_name, reason);
    }

    fn observe_latency(&self, key: &Key) {
        if let Some(seen) = self
            .seen_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
        {
            self.ctx
                .metrics
                .sync_latency
                .observe(seen.elapsed().as_secs_f64());
        }
    }

    async fn write_budget(&self) -> String {
        let waited = self.ctx.budget.acquire().await;
        if waited > Duration::from_millis(5) {
            format!(
                "; waited {} ms for the tenant's apiFairness budget ({} writes/s)",
                waited.as_millis(),
                self.ctx.budget.qps()
            )
        } else {
            String::new()
        }
    }

    fn count_write(&self, verb: &'static str) {
        self.ctx
            .metrics
            .host_writes
            .get_or_create(&VerbLabels { verb })
            .inc();
    }

    /// The tenant object of `key`, its host name, and its host copy, from the caches.
    fn cached_pair(&self, key: &Key) -> Result<(Option<Value>, String, Option<Value>), SyncError> {
        let tenant_ref = ObjectRef::new_with(&key.1, self.tenant_resource.clone()).within(&key.0);
        // A fromHost copy is the host's object shown in the tenant: never synced back.
        let tenant_obj = self
            .tenant_store
            .get(&tenant_ref)
            .filter(|o| !is_from_host_copy(o))
            .map(|o| typed_value(&o, &self.tenant_resource))
            .transpose()?;
        let host_name = host_name(&SourceName {
            name: &key.1,
            virtual_namespace: &key.0,
            tenant: &self.ctx.target.tenant,
        })
        .name;
        let host_ref = ObjectRef::new_with(&host_name, self.host_resource.clone())
            .within(&self.ctx.target.host_namespace);
        let host_obj = match self.host_store.get(&host_ref) {
            Some(o) => Some(typed_value(&o, &self.host_resource)?),
            None => self
                .unseen_creates
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&host_name)
                .cloned(),
        };
        Ok((tenant_obj, host_name, host_obj))
    }

    async fn sync(&self, key: &Key) -> Result<(), SyncError> {
        if let Some(settings) = &self.two_way {
            let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
            return match (tenant_obj, host_obj) {
                (Some(tenant), Some(host)) => {
                    self.sync_two_way(key, settings, &tenant, &host_name, &host)
                        .await
                }
                (Some(tenant), None) => self.apply(key, &tenant, None).await,
                (None, Some(host)) => {
                    self.passes.forget(key);
                    self.ctx
                        .conflicts
                        .clear(&(self.group_kind.to_string(), key.clone()));
                    self.collect(key, &host_name, &host).await
                }
                (None, None) => {
                    self.passes.forget(key);
                    Ok(())
                }
            };
        }
        if self.pods.is_some() {
            return self.sync_pod(key).await;
        }
        if self.services.is_some() {
            return self.sync_service(key).await;
        }
        if tenantplane_core::services::ingress::is_ingress(&self.group_kind) {
            return self.sync_ingress(key).await;
        }
        let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
        match tenant_obj {
            Some(tenant_value) => self.apply(key, &tenant_value, host_obj).await,
            None => match host_obj {
                Some(host_obj) => self.collect(key, &host_name, &host_obj).await,
                None => Ok(()),
            },
        }
    }

    async fn apply(
        &self,
        key: &Key,
        tenant_value: &Value,
        host_obj: Option<Value>,
    ) -> Result<(), SyncError> {
        let uid = tenant_value
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let namespaces = self
            .namespaces
            .as_ref()
            .map(namespaces::tenant_namespaces)
            .unwrap_or_default();
        let (placement, mut desired) = match to_host_in(
            &self.ctx.target,
            &self.group_kind,
            Scope::Namespaced,
            tenant_value,
            &namespaces,
        ) {
            Ok(ok) => ok,
            Err(
                TransformError::SystemNamespace { .. }
                | TransformError::TenantInfrastructure { .. },
            ) => return Ok(()),
            Err(err) => {
                let name = host_name(&SourceName {
                    name: &key.1,
                    virtual_namespace: &key.0,
                    tenant: &self.ctx.target.tenant,
                })
                .name;
                self.skip_once(key, uid, &name, "", format!("cannot be synced: {err}"));
                return Ok(());
            }
        };
        let hash = stamp_desired_hash(&mut desired);
        let host_name = placement.host_name.name.clone();
        // Before any write is planned, so a refused Service's host copy stays as it was.
        if self
            .refuses_service(key, uid.clone(), &host_name, tenant_value)
            .await
        {
            return Ok(());
        }
        let source = placement.source_identity(&self.ctx.target.tenant, uid.as_deref());

        // A write refused for this very desired state: do not retry until it changes.
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&host_name)
            .cloned();
        let mut observed = host_obj;
        if let Some(refusal) = &refused
            && refusal.hash == hash
        {
            if refusal.refused_by_host {
                // Sending it again would be refused again, on every drift pass.
                return Ok(());
            }
            if observed.is_none() {
                // Refused because a foreign object holds the name: look (a read), and
                // create only once it is gone.
                match self.host_api.get_opt(&host_name).await {
                    Ok(Some(live)) => {
                        observed = Some(
                            serde_json::to_value(&live)
                                .map_err(|e| SyncError::Decode(e.to_string()))?,
                        )
                    }
                    Ok(None) => {}
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "get",
                            name: host_name,
                            source,
                        });
                    }
                }
            } else {
                return Ok(());
            }
        }
        let memo = self.memo_of(&host_name);
        let plan = plan_apply(&source, &desired, observed.as_ref(), memo.as_ref());
        self.carry_out(
            key,
            &source,
            &placement_reason(&self.ctx.target, &placement),
            &hash,
            plan,
            true,
        )
        .await
    }

    async fn carry_out(
        &self,
        key: &Key,
        source: &SourceIdentity,
        create_reason: &str,
        hash: &str,
        plan: ApplyPlan,
        may_retry_conflict: bool,
    ) -> Result<(), SyncError> {
        let host_name = tenantplane_core::naming::host_name(&source.source_name()).name;
        let uid = source.uid.clone();
        match plan {
            ApplyPlan::Noop => {
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&host_name);
                self.observe_latency(key);
                Ok(())
            }
            ApplyPlan::Skip { reason } => {
                // Nothing reaches the host, so there is no latency to observe.
                self.seen_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(key);
                self.skip_once(key, uid, &host_name, hash, reason);
                Ok(())
            }
            ApplyPlan::Create { object } => {
                let waited = self.write_budget().await;
                let body: DynamicObject = serde_json::from_value(object.clone())
                    .map_err(|e| SyncError::Decode(e.to_string()))?;
                self.count_write("create");
                match self.host_api.create(&post_params(), &body).await {
                    Ok(created) => {
                        self.remember(&host_name, &object, &created);
                        if let Ok(value) = typed_value(&created, &self.host_resource) {
                            self.unseen_creates
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(host_name.clone(), value);
                        }
                        self.observe_latency(key);
                        self.decide(
                            DecisionAction::Create,
                            key,
                            uid,
                            &host_name,
                            format!("{create_reason}{waited}"),
                        );
                        Ok(())
                    }
                    Err(kube::Error::Api(status))
                        if may_retry_conflict
                            && WriteOutcome::of_status(status.code) == WriteOutcome::Conflict =>
                    {
                        // Someone holds the name. Look at it and plan again: ours (our
                        // cache lagged) is updated, anything else is a Skip.
                        let live = self.host_api.get_opt(&host_name).await.map_err(|source| {
                            SyncError::Api {
                                verb: "get",
                                name: host_name.clone(),
                                source,
                            }
                        })?;
                        let live = live
                            .map(|l| serde_json::to_value(&l))
                            .transpose()
                            .map_err(|e| SyncError::Decode(e.to_string()))?;
                        let plan = plan_apply(source, &object, live.as_ref(), None);
                        Box::pin(self.carry_out(key, source, create_reason, hash, plan, false))
                            .await
                    }
                    Err(kube::Error::Api(status))
                        if WriteOutcome::of_status(status.code).is_refused() =>
                    {
                        self.skip_until_changed(
                            key,
                            uid,
                            &host_name,
                            hash,
                            format!("the host API server refused it: {}", status.message),
                        );
                        Ok(())
                    }
                    Err(source) => Err(SyncError::Api {
                        verb: "create",
                        name: host_name,
                        source,
                    }),
                }
            }
            ApplyPlan::Update {
                object,
                reason,
                immutable,
            } => {
                let waited = self.write_budget().await;
                let body: DynamicObject = serde_json::from_value(object.clone())
                    .map_err(|e| SyncError::Decode(e.to_string()))?;
                self.count_write("update");
                match self
                    .host_api
                    .replace(&host_name, &post_params(), &body)
                    .await
                {
                    Ok(updated) => {
                        self.remember(&host_name, &object, &updated);
                        self.observe_latency(key);
                        let kept = if immutable.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; kept the live values of fields that cannot change after creation: {}",
                                immutable.join(", ")
                            )
                        };
                        self.decide(
                            DecisionAction::Update,
                            key,
                            uid,
                            &host_name,
                            format!("{reason}{kept}{waited}"),
                        );
                        Ok(())
                    }
                    // A Conflict (changed since our cache saw it) is an error: the watch
                    // brings the new version. A Forbidden update is retried as an error
                    // too; only an Invalid one is recorded, with the fields refused.
                    Err(kube::Error::Api(status))
                        if WriteOutcome::of_status(status.code)
                            == WriteOutcome::Refused(RefusedAs::Invalid) =>
                    {
                        let fields: Vec<String> = status
                            .details
                            .as_ref()
                            .map(|d| {
                                d.causes
                                    .iter()
                                    .map(|c| c.field.clone())
                                    .filter(|f| !f.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default();
                        let reason = if fields.is_empty() {
                            format!("the host API server refused the update: {}", status.message)
                        } else {
                            format!(
                                "the host API server refused to change {} (immutable or invalid); \
                                 recreate the tenant object to change it",
                                fields.join(", ")
                            )
                        };
                        self.skip_once(key, uid, &host_name, hash, reason);
                        Ok(())
                    }
                    Err(source) => Err(SyncError::Api {
                        verb: "update",
                        name: host_name,
                        source,
                    }),
                }
            }
        }
    }

    /// What the server stored at our last write of `host_name`, if we wrote it.
    fn memo_of(&self, host_name: &str) -> Option<WriteMemo> {
        self.memos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(host_name)
            .cloned()
    }

    fn remember(&self, host_name: &str, desired: &Value, stored: &DynamicObject) {
        let stored = serde_json::to_value(stored).unwrap_or(Value::Null);
        let memo = WriteMemo::after_write(desired, &stored);
        self.memos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(host_name.to_owned(), memo);
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(host_name);
    }

    /// Garbage collection of a managed host object whose tenant source is gone.
    async fn collect(&self, key: &Key, host_name: &str, host_obj: &Value) -> Result<(), SyncError> {
        let source = SourceIdentity {
            tenant: self.ctx.target.tenant.clone(),
            virtual_namespace: key.0.clone(),
            name: key.1.clone(),
            group_kind: self.group_kind.clone(),
            uid: None,
        };
        let tenant_uid = host_obj
            .pointer("/metadata/annotations/tenantplane.io~1virtual-uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match plan_gc(&source, host_obj) {
            GcPlan::Keep { reason } => {
                self.skip_once(key, tenant_uid, host_name, "gc", reason);
                Ok(())
            }
            GcPlan::Delete { uid, reason } => {
                let already_sent = uid.as_ref().is_some_and(|uid| {
                    self.sent_deletes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(host_name)
                        .is_some_and(|sent| sent == uid)
                });
                if already_sent {
                    // Deleted already; its watch event brings the key back if it stays.
                    return Ok(());
                }
                let waited = self.write_budget().await;
                let params = exactly(uid.clone());
                self.count_write("delete");
                let answer = self.host_api.delete(host_name, &params).await;
                let done = match &answer {
                    Ok(_) => true,
                    Err(kube::Error::Api(status)) => status.code == 404,
                    Err(_) => false,
                };
                if let (true, Some(uid)) = (done, uid) {
                    self.sent_deletes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(host_name.to_owned(), uid);
                }
                match answer {
                    Ok(_) => {}
                    // Already gone: nothing left to collect, and no decision to record.
                    Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "delete",
                            name: host_name.to_owned(),
                            source,
                        });
                    }
                }
                self.memos
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(host_name);
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(host_name);
                self.observe_latency(key);
                self.decide(
                    DecisionAction::Delete,
                    key,
                    tenant_uid,
                    host_name,
                    format!("{reason}{waited}"),
                );
                Ok(())
            }
        }
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
mod tests {
    use kube::runtime::utils::Backoff;

    use super::*;

    #[test]
    fn watch_retries_start_fast_cap_low_reset_and_differ_between_watches() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = backoff.by_ref().take(8).collect();
        // 200 ms, 400 ms, ... capped at 3 s, each plus a jitter below its own size.
        assert!(delays[0] >= Duration::from_millis(200), "{delays:?}");
        assert!(delays[0] < Duration::from_millis(400), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d < Duration::from_secs(6)),
            "{delays:?}"
        );
        assert!(delays[7] >= Duration::from_secs(3), "{delays:?}");
        backoff.reset();
        assert!(
            backoff
                .next()
                .is_some_and(|d| d < Duration::from_millis(400))
        );
        // Two watches retrying after the same outage do not wait alike.
        let other: Vec<Duration> = watch_backoff().take(8).collect();
        assert_ne!(delays, other);
    }
}
