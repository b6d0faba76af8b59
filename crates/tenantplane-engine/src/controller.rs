//! The TenantCluster controller: resolves a TenantCluster's references, connects to
//! its API server, runs one sync engine per TenantCluster (restarted when what it
//! was started from changes), reports status, and on deletion removes every host
//! object it synced.
//!
//! Deletion never waits for the tenant API server: cleanup reads and deletes only
//! host objects (found by label, checked by reverse lookup, deleted with a UID
//! precondition), so a TenantCluster whose tenant server is gone is still removed.
//!
//! Stays over 500 lines: the controller's loop, apply and status report; resolve
//! and cleanup are already their own modules.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::discovery::pinned_kind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tenantplane_api::{
    IsolationProfile, SyncDecision, SyncPolicy, SyncedResource, TenantCluster, TenantClusterStatus,
};
use tenantplane_core::compare::digest;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_selector;
use tenantplane_core::provenance::source_in;
use tenantplane_core::tenant_cluster_status::{
    self, Blocker, EngineReport, IsolationVerdict, Observation, StatusInput,
};
use tenantplane_core::transform::TenantTarget;
use tokio::sync::{Mutex, broadcast};
use tokio_util::sync::CancellationToken;

use crate::converge::ObjectAction;
use crate::decisions::{DecisionRoutes, MANAGER, RecorderConfig, TenantDecision, start_recorder};
use crate::deletion::{delete_exact, exactly};
use crate::engine::{Engine, EngineSpec, KindState};
use crate::host_watches::HostWatches;
use crate::isolation::apply_isolation_among;
use crate::kind_sync::{PodSettings, release_pod_finalizers};
use crate::metrics::{Metrics, ResultLabels, TENANT_CLUSTER_CONTROLLER, TenantLabels};
use crate::provision::{ControlPlaneState, cleanup_control_plane, ensure_control_plane_with};
use crate::shards::{ShardConfig, ShardGates};
use crate::status_alarm::StatusAlarm;
use tenantplane_core::metadata::ANNOTATION_VIRTUAL_NAME;
use tenantplane_core::pods::host_pod::TOKEN_SECRET_PREFIX;
use tenantplane_core::pods::storage::pv_is_ours;
use tenantplane_core::pods::tokens::TOKEN_KIND;
use tenantplane_core::pods::{NodeView, PodControls};

/// Holds the TenantCluster until its host objects are gone.
mod cleanup;
mod isolation_memo;
mod resolve;

use cleanup::cleanup;
use resolve::{Resolution, resolve};

pub const FINALIZER: &str = "tenantplane.io/cleanup";
const TENANT_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of one reconcile; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("host API request failed: {0}")]
    Host(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("TenantCluster has no namespace")]
    NoNamespace,
    #[error("control plane: {0}")]
    Provision(#[from] crate::provision::ProvisionError),
}

/// What the controller is run with.
pub struct ControllerConfig {
    pub host: Client,
    pub metrics: Arc<Metrics>,
    /// Every decision of every engine is also sent here (`tenantplane up` prints them).
    pub decisions: broadcast::Sender<TenantDecision>,
    /// Names this replica on Events.
    pub instance: String,
    /// Concurrent host writers per synced kind.
    pub workers: usize,
    /// How long a tenant Pod (or Pod dependency) being deleted waits for a host
    /// API server that does not answer before its finalizer is released anyway
    /// ([`crate::kind_sync::DEFAULT_HOST_UNREACHABLE_RELEASE`] in production).
    pub host_unreachable_release: Duration,
    /// The host's service CIDR, for provisioned tenant API servers
    /// ([`crate::provision::DEFAULT_SERVICE_CIDR`] by default).
    pub service_cidr: String,
    /// Runs a DNS server per TenantCluster and points host Pods at it; `None`
    /// leaves host Pods on the host's DNS.
    pub dns: Option<crate::tenant_dns::DnsDeployment>,
    /// Where tenant API servers reach tenantplane's kubelet endpoint; every tenant
    /// Node advertises it. `None`: tenant Nodes advertise no address and port 0.
    pub kubelet_endpoint: Option<tenantplane_core::pods::KubeletEndpoint>,
    /// Registered in every provisioned tenant control plane whose syncer has its
    /// own identity: refuses the tenant's writes to fromHost copies. `None`: such
    /// writes are only reverted.
    pub tenant_webhook: Option<crate::provision::tenant_webhook::TenantWebhook>,
    /// Sync only the TenantClusters of the shards this replica holds (see
    /// [`crate::shards`]). `None`: every TenantCluster, and the ResourcePool loop
    /// runs here too; sharded, whoever runs this runs the pools (once, as leader).
    pub shards: Option<ShardConfig>,
    /// Sync only the TenantClusters of this host namespace (`None`: every
    /// namespace). Scoped, the ResourcePool loop does not run: pools span
    /// namespaces. For a controller per team namespace, and for tests that share
    /// one host API server between controllers.
    pub namespace: Option<String>,
}

struct RunningEngine {
    fingerprint: String,
    /// What the engine's tenant client was built from (see `resolve`): while it
    /// is the same, reconciles reuse that client and its connections rather than
    /// building one, and handshaking, each time.
    client_key: String,
    engine: Engine,
    recorder: tokio::task::JoinHandle<()>,
    endpoint: String,
}

/// One TenantCluster's engine, when it runs. Its lock is held while that engine
/// starts or stops (network I/O), which delays no other TenantCluster.
type EngineSlot = Arc<Mutex<Option<RunningEngine>>>;

struct Context {
    config: ControllerConfig,
    routes: DecisionRoutes,
    /// Locked only to find, add or remove a slot, never across I/O.
    engines: std::sync::Mutex<HashMap<(String, String), EngineSlot>>,
    /// Sharded: the shards this replica holds.
    gates: Option<Arc<ShardGates>>,
    /// One host watch per synced kind, shared by every engine of this process.
    host_watches: HostWatches,
    /// The controller's caches (filled by the watches that trigger reconciles):
    /// read instead of the host on every reconcile. A miss falls back to a GET.
    caches: Caches,
    /// TenantClusters (uid, generation) with an external control plane whose
    /// provisioned leftovers were found gone: nothing provisions for them until
    /// their spec changes, so the cleanup's reads are not repeated every reconcile.
    external_cleaned: std::sync::Mutex<BTreeSet<(String, i64)>>,
    /// The boundary each TenantCluster last had applied, reused for a while.
    isolation_memo: isolation_memo::IsolationMemo,
    /// Wakes a TenantCluster's reconcile: what its status reports changed in its
    /// engine (see [`StatusAlarm`]).
    wake: futures::channel::mpsc::UnboundedSender<TenantCluster>,
}

/// What the controller watches anyway, kept.
#[derive(Clone)]
struct Caches {
    tenant_clusters: Store<TenantCluster>,
    policies: Store<SyncPolicy>,
    profiles: Store<IsolationProfile>,
}

impl Caches {
    async fn profile(
        &self,
        host: &Client,
        name: &str,
    ) -> Result<Option<Arc<IsolationProfile>>, kube::Error> {
        match self.profiles.get(&ObjectRef::new(name)) {
            Some(profile) => Ok(Some(profile)),
            None => Ok(Api::<IsolationProfile>::all(host.clone())
                .get_opt(name)
                .await?
                .map(Arc::new)),
        }
    }

    async fn policy(
        &self,
        host: &Client,
        name: &str,
    ) -> Result<Option<Arc<SyncPolicy>>, kube::Error> {
        match self.policies.get(&ObjectRef::new(name)) {
            Some(policy) => Ok(Some(policy)),
            None => Ok(Api::<SyncPolicy>::all(host.clone())
                .get_opt(name)
                .await?
                .map(Arc::new)),
        }
    }

    /// The Pod Security levels of the other live TenantClusters of `tc`'s
    /// namespace (see `isolation::namespace_pod_security`), from the caches.
    async fn peer_levels(
        &self,
        host: &Client,
        tc: &TenantCluster,
    ) -> Result<Vec<tenantplane_api::PodSecurityLevel>, kube::Error> {
        let (namespace, name) = (tc.namespace(), tc.name_any());
        let peers = self.tenant_clusters.state_filter(|other| {
            other.namespace() == namespace
                && other.name_any() != name
                && other.metadata.deletion_timestamp.is_none()
        });
        let mut levels = Vec::with_capacity(peers.len());
        for peer in peers {
            if let Some(profile) = self
                .profile(host, &peer.spec.isolation_profile_ref.name)
                .await?
            {
                levels.push(profile.spec.effective_controls().pod_security);
            }
        }
        Ok(levels)
    }
}

/// What of a TenantCluster a reconcile is triggered by: everything but its
/// status (which only this controller writes, and whose every write would
/// otherwise be followed by a reconcile that finds nothing new; the requeue
/// each reconcile asks for still comes).
fn reconcile_trigger(tc: &TenantCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &tc.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &meta.uid,
        meta.generation,
        &meta.finalizers,
        meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        &meta.labels,
        &meta.annotations,
    )
        .hash(&mut hasher);
    Some(hasher.finish())
}

impl Context {
    fn slot(&self, key: &(String, String)) -> EngineSlot {
        let mut engines = self
            .engines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(engines.entry(key.clone()).or_default())
    }

    /// Removes the slots whose key (namespace, name) `which` selects.
    fn take_slots(
        &self,
        which: impl Fn(&(String, String)) -> bool,
    ) -> Vec<((String, String), EngineSlot)> {
        let mut engines = self
            .engines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let keys: Vec<(String, String)> = engines.keys().filter(|k| which(k)).cloned().collect();
        keys.into_iter()
            .filter_map(|key| engines.remove(&key).map(|slot| (key, slot)))
            .collect()
    }

    /// An engine is stopped (or about to be): no decisions routed to it, and it no
    /// longer counts as running here.
    fn engine_stopped(&self, namespace: &str, name: &str) {
        self.routes.remove(namespace, name);
        self.config.metrics.engines_running.remove(&TenantLabels {
            tenant: format!("{namespace}/{name}"),
        });
    }

    /// Stops the engines of one shard (its gate is closed: none starts again).
    async fn stop_shard(&self, gates: &ShardGates, shard: u32) {
        let in_shard =
            |(namespace, name): &(String, String)| gates.shard_of(namespace, name) == shard;
        let slots = self.take_slots(in_shard);
        self.isolation_memo.forget_where(in_shard);
        for ((namespace, name), slot) in slots {
            if let Some(running) = slot.lock().await.take() {
                self.engine_stopped(&namespace, &name);
                stop(running).await;
                tracing::info!(tenant = %name, %namespace, shard, "sync engine stopped: the shard moves to another replica");
            }
        }
    }
}

/// Runs the controller until `shutdown` fires; then stops every engine.
pub async fn run(config: ControllerConfig, shutdown: CancellationToken) {
    run_with_routes(config, DecisionRoutes::new(), shutdown).await;
}

/// [`run`], keeping `routes` pointed at each running engine's decision recorder
/// (so the kubelet endpoint records its refusals in the same SyncDecision).
pub async fn run_with_routes(
    config: ControllerConfig,
    routes: DecisionRoutes,
    shutdown: CancellationToken,
) {
    let host = config.host.clone();
    let tcs: Api<TenantCluster> = match &config.namespace {
        Some(namespace) => Api::namespaced(host.clone(), namespace),
        None => Api::all(host.clone()),
    };
    let scoped = config.namespace.is_some();
    let shard_config = config.shards.clone();
    let gates = shard_config
        .as_ref()
        .map(|c| Arc::new(ShardGates::new(c.shards)));
    let (tc_store, tc_writer) = reflector::store();
    let (policies, policy_writer) = reflector::store();
    let (profiles, profile_writer) = reflector::store();
    let (wake, woken) = futures::channel::mpsc::unbounded::<TenantCluster>();
    let ctx = Arc::new(Context {
        config,
        routes,
        engines: std::sync::Mutex::new(HashMap::new()),
        gates: gates.clone(),
        host_watches: HostWatches::new(host.clone()),
        caches: Caches {
            tenant_clusters: tc_store.clone(),
            policies,
            profiles,
        },
        external_cleaned: std::sync::Mutex::new(BTreeSet::new()),
        isolation_memo: Default::default(),
        wake,
    });
    // ResourcePools are independent of TenantClusters: their own loop, same lifetime.
    let pools = (shard_config.is_none() && !scoped).then(|| {
        tokio::spawn(crate::pools::run(
            host.clone(),
            Arc::clone(&ctx.config.metrics),
            shutdown.clone(),
        ))
    });
    // A shard taken: every TenantCluster is looked at again (those of other
    // shards return at once).
    let (taken, shard_taken) = futures::channel::mpsc::unbounded::<()>();
    let membership = shard_config.zip(gates).map(|(shard_config, gates)| {
        let stopper = Arc::clone(&ctx);
        let stop_gates = Arc::clone(&gates);
        tokio::spawn(crate::shards::run(
            host.clone(),
            shard_config,
            gates,
            Arc::clone(&ctx.config.metrics),
            shutdown.clone(),
            move |_shard| {
                let _ = taken.unbounded_send(());
            },
            move |shard| {
                let (ctx, gates) = (Arc::clone(&stopper), Arc::clone(&stop_gates));
                async move { ctx.stop_shard(&gates, shard).await }
            },
        ))
    });
    let triggers = reflector::reflector(tc_writer, watcher(tcs, watcher::Config::default()))
        .applied_objects()
        .predicate_filter(reconcile_trigger, Default::default());
    let controller = Controller::for_stream(triggers, tc_store);
    let store = controller.store();
    let by_policy = store.clone();
    let by_profile = store;
    let graceful = shutdown.clone();
    let policy_events = reflector::reflector(
        policy_writer,
        watcher(
            Api::<SyncPolicy>::all(host.clone()),
            watcher::Config::default(),
        ),
    )
    .touched_objects();
    let profile_events = reflector::reflector(
        profile_writer,
        watcher(
            Api::<IsolationProfile>::all(host),
            watcher::Config::default(),
        ),
    )
    .touched_objects();
    controller
        .watches_stream(policy_events, move |policy| {
            let name = policy.name_any();
            by_policy
                .state()
                .into_iter()
                .filter(|tc| tc.spec.sync_policy_ref.name == name)
                .map(|tc| kube::runtime::reflector::ObjectRef::from_obj(&*tc))
                .collect::<Vec<_>>()
        })
        .watches_stream(profile_events, move |profile| {
            let name = profile.name_any();
            by_profile
                .state()
                .into_iter()
                .filter(|tc| tc.spec.isolation_profile_ref.name == name)
                .map(|tc| kube::runtime::reflector::ObjectRef::from_obj(&*tc))
                .collect::<Vec<_>>()
        })
        .watches_stream(woken.map(Ok), |tc| Some(ObjectRef::from_obj(&tc)))
        .reconcile_all_on(shard_taken)
        .graceful_shutdown_on(async move { graceful.cancelled().await })
        .run(reconcile, error_policy, Arc::clone(&ctx))
        .for_each(|_| futures::future::ready(()))
        .await;
    ctx.routes.clear();
    ctx.config.metrics.engines_running.clear();
    for (_, slot) in ctx.take_slots(|_| true) {
        if let Some(running) = slot.lock().await.take() {
            stop(running).await;
        }
    }
    // `shutdown` has fired, so the pool loop and the shard membership (which
    // releases its Leases once the engines are stopped) are ending too.
    if let Some(pools) = pools {
        let _ = pools.await;
    }
    if let Some(membership) = membership {
        let _ = membership.await;
    }
}

/// The alarm that wakes `tc`'s reconcile.
fn wake_on_status_change(
    wake: &futures::channel::mpsc::UnboundedSender<TenantCluster>,
    tc: &TenantCluster,
) -> StatusAlarm {
    let (wake, tc) = (wake.clone(), tc.clone());
    // Only its name and namespace matter (the reconcile reads the current object).
    // Sending fails only once the controller has stopped: nothing left to wake.
    StatusAlarm::new(move || {
        let _ = wake.unbounded_send(tc.clone());
    })
}

async fn stop(running: RunningEngine) {
    running.engine.stop().await;
    // The recorder ends (after a last flush) once the engine's senders are dropped.
    let _ = running.recorder.await;
}

fn error_policy(_tc: Arc<TenantCluster>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.config
        .metrics
        .reconciles
        .get_or_create(&ResultLabels {
            controller: TENANT_CLUSTER_CONTROLLER,
            result: "error",
        })
        .inc();
    tracing::warn!(error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(tc: Arc<TenantCluster>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = tc.namespace().ok_or(ReconcileError::NoNamespace)?;
    // Sharded: only while this replica holds the TenantCluster's shard, and for
    // the whole reconcile (giving the shard up waits for it).
    let _shard = match &ctx.gates {
        Some(gates) => match gates.enter(&namespace, &tc.name_any()).await {
            Some(held) => Some(held),
            None => return Ok(Action::await_change()),
        },
        None => None,
    };
    let api: Api<TenantCluster> = Api::namespaced(ctx.config.host.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, tc, |event| async {
        match event {
            FinalizerEvent::Apply(tc) => apply(&tc, &ctx).await,
            FinalizerEvent::Cleanup(tc) => cleanup(&tc, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(err)
        | kube::runtime::finalizer::Error::CleanupFailed(err) => err,
        other => ReconcileError::Finalizer(other.to_string()),
    });
    let label = if result.is_ok() { "ok" } else { "error" };
    ctx.config
        .metrics
        .reconciles
        .get_or_create(&ResultLabels {
            controller: TENANT_CLUSTER_CONTROLLER,
            result: label,
        })
        .inc();
    result
}

async fn apply(tc: &TenantCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = tc.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = tc.name_any();
    let host = &ctx.config.host;
    let key = (namespace.clone(), name.clone());
    let slot = ctx.slot(&key);
    // The running engine's tenant client, to be reused if nothing it was built
    // from changed (the slot's lock is held only by this TenantCluster's work).
    let running_client = slot
        .lock()
        .await
        .as_ref()
        .map(|r| (r.client_key.clone(), r.engine.tenant.clone()));
    let Resolution { isolation, outcome } = resolve(tc, &namespace, ctx, running_client).await?;
    // The tenant's DNS server, once its namespace's boundary is in place. Its host
    // Pods wait for the DNS Service's IP, so a failure here shows as their Skips.
    if let (Some(dns), Ok(_)) = (&ctx.config.dns, &outcome)
        && let Err(error) = crate::tenant_dns::apply_tenant_dns(host, tc, dns).await
    {
        tracing::warn!(tenant = %name, namespace = %namespace, %error, "tenant DNS not applied");
    }
    let mut engine_slot = slot.lock().await;
    let observation = match outcome {
        Err(blocker) => {
            if !blocker.keeps_engine()
                && let Some(running) = engine_slot.take()
            {
                ctx.engine_stopped(&namespace, &name);
                stop(running).await;
            }
            Observation::Blocked(blocker)
        }
        Ok(resolved) => {
            if resolved.syncer_identity
                && let Some(webhook) = &ctx.config.tenant_webhook
            {
                // Fails open like the webhook itself: the revert stays the guarantee.
                match crate::provision::tenant_webhook::ensure(&resolved.tenant, webhook).await {
                    Ok(ObjectAction::Conflict) => tracing::warn!(
                        tenant = %name, namespace = %namespace,
                        "the tenant holds a ValidatingWebhookConfiguration {} that tenantplane did not create; fromHost copies are only reverted",
                        crate::provision::tenant_webhook::CONFIGURATION_NAME
                    ),
                    Ok(action) => {
                        tracing::debug!(tenant = %name, namespace = %namespace, ?action, "fromHost webhook registered in the tenant")
                    }
                    Err(error) => {
                        tracing::warn!(tenant = %name, namespace = %namespace, %error, "could not register the fromHost webhook in the tenant")
                    }
                }
            }
            let fingerprint = digest(&json!({
                "policy": resolved.policy.spec,
                "controls": resolved.profile.spec.effective_controls(),
                // Not in the effective controls: a changed list restarts the engine too.
                "ingressClasses": resolved.profile.spec.controls.allowed_ingress_classes,
                "fromHostSecrets": resolved.profile.spec.controls.from_host_secrets,
                "secret": resolved.secret_version,
                "uid": tc.uid(),
                "nodes": tc.spec.nodes.mode.as_str(),
            }));
            let restart = engine_slot
                .as_ref()
                .is_none_or(|r| r.fingerprint != fingerprint);
            if restart {
                if let Some(old) = engine_slot.take() {
                    ctx.engine_stopped(&namespace, &name);
                    stop(old).await;
                }
                let target = TenantTarget::new(&name, &namespace)
                    .map_err(|e| ReconcileError::Finalizer(e.to_string()))?;
                let (sender, recorder) = start_recorder(RecorderConfig {
                    host: host.clone(),
                    namespace: namespace.clone(),
                    tenant: name.clone(),
                    tenant_uid: tc.uid().unwrap_or_default(),
                    record: resolved.policy.spec.explain.record_decisions,
                    retain: usize::try_from(resolved.policy.spec.explain.retain).unwrap_or(100),
                    metrics: Arc::clone(&ctx.config.metrics),
                    broadcast: ctx.config.decisions.clone(),
                    instance: ctx.config.instance.clone(),
                });
                ctx.routes.set(&namespace, &name, sender.clone());
                let engine = Engine::start(
                    host.clone(),
                    resolved.tenant.clone(),
                    EngineSpec {
                        target,
                        policy: resolved.policy.spec.clone(),
                        fairness: resolved.profile.spec.effective_controls().api_fairness,
                        workers: ctx.config.workers,
                        pods: PodSettings {
                            controls: PodControls {
                                rules: resolved.profile.spec.rules.clone(),
                                ..PodControls::from(&resolved.profile.spec.effective_controls())
                            },
                            endpoint: Some(resolved.endpoint.clone()),
                            synced_kinds: Default::default(),
                            host_unreachable_release: ctx.config.host_unreachable_release,
                            dns_domain: ctx.config.dns.as_ref().map(|d| d.cluster_domain.clone()),
                            allowed_ingress_classes: resolved
                                .profile
                                .spec
                                .controls
                                .allowed_ingress_classes
                                .clone(),
                            nodes: NodeView {
                                mode: tc.spec.nodes.mode,
                                salt: tc.uid().unwrap_or_default(),
                                kubelet_endpoint: ctx.config.kubelet_endpoint.clone(),
                                caps: node_caps(&tc.spec),
                            },
                        },
                        from_host_secrets: resolved.profile.spec.controls.from_host_secrets.clone(),
                        host_watches: ctx.host_watches.clone(),
                        status_alarm: wake_on_status_change(&ctx.wake, tc),
                    },
                    sender,
                    Arc::clone(&ctx.config.metrics),
                )
                .await;
                tracing::info!(tenant = %name, namespace = %namespace, kinds = engine.kinds.len(), "sync engine started");
                *engine_slot = Some(RunningEngine {
                    fingerprint,
                    client_key: resolved.client_key.clone(),
                    engine,
                    recorder,
                    endpoint: resolved.endpoint.clone(),
                });
                ctx.config
                    .metrics
                    .engines_running
                    .get_or_create(&TenantLabels {
                        tenant: format!("{namespace}/{name}"),
                    })
                    .set(1);
            }
            Observation::Running {
                engine: engine_slot.as_ref().map(report).unwrap_or_default(),
                external_endpoint: resolved.external_endpoint,
            }
        }
    };
    drop(engine_slot);
    let decision = tenant_cluster_status::decide(
        StatusInput {
            previous: tc.status.as_ref(),
            generation: tc.metadata.generation,
            mode: tc.spec.mode,
            isolation: isolation.as_ref(),
            observation,
        },
        Timestamp::now(),
    );
    write_status(tc, &namespace, decision.status, host).await?;
    Ok(Action::requeue(decision.requeue))
}

/// What a running engine tells the TenantCluster's status.
fn report(running: &RunningEngine) -> EngineReport {
    let engine = &running.engine;
    EngineReport {
        synced: engine.synced(),
        starting: engine.starting(),
        problems: engine.problems(),
        kind_unavailable: engine
            .all_kinds()
            .any(|(_, k)| matches!(k, KindState::Unavailable(_))),
        service_cidr_mismatch: engine.service_cidr.message(),
        conflicts: engine.conflicts.message(),
        // `kinds`, not `from_host`: these have host copies for cleanup to remove.
        running_kinds: engine
            .kinds
            .iter()
            .filter(|(_, state)| matches!(state, KindState::Running(_)))
            .map(|((api_version, kind), _)| SyncedResource {
                api_version: api_version.clone(),
                kind: kind.clone(),
            })
            .collect(),
        endpoint: Some(running.endpoint.clone()),
    }
}

/// Writes the status only when it changed, so a steady state costs no writes.
async fn write_status(
    tc: &TenantCluster,
    namespace: &str,
    status: TenantClusterStatus,
    host: &Client,
) -> Result<(), ReconcileError> {
    if tc.status.as_ref() == Some(&status) {
        return Ok(());
    }
    tracing::debug!(old = ?tc.status, new = ?status, "status changed");
    let api: Api<TenantCluster> = Api::namespaced(host.clone(), namespace);
    let patch = json!({"status": status});
    api.patch_status(
        &tc.name_any(),
        &PatchParams::apply(MANAGER),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// What the TenantCluster's Nodes show at most: its `resources`, when
/// `spec.nodes.capResources` asks for it.
fn node_caps(spec: &tenantplane_api::TenantClusterSpec) -> tenantplane_core::pods::NodeCaps {
    match (&spec.resources, spec.nodes.cap_resources) {
        (Some(resources), true) => tenantplane_core::pods::NodeCaps {
            cpu: resources.cpu.as_ref().map(|q| q.0.clone()),
            memory: resources.memory.as_ref().map(|q| q.0.clone()),
        },
        _ => tenantplane_core::pods::NodeCaps::default(),
    }
}

#[cfg(test)]
mod trigger_tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn tenant_cluster() -> TenantCluster {
        let mut tc: TenantCluster = serde_json::from_value(json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
            "metadata": {"name": "tc", "namespace": "team", "uid": "u-1", "generation": 1},
            "spec": {"isolationProfileRef": {"name": "p"}, "syncPolicyRef": {"name": "s"},
                     "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "k"}}}}
        }))
        .unwrap();
        tc.status = Some(TenantClusterStatus::default());
        tc
    }

    #[test]
    fn a_status_write_alone_triggers_no_reconcile() {
        let tc = tenant_cluster();
        let mut written = tc.clone();
        written.metadata.resource_version = Some("2".into());
        written.status = Some(TenantClusterStatus {
            observed_generation: Some(1),
            ..TenantClusterStatus::default()
        });
        assert_eq!(reconcile_trigger(&tc), reconcile_trigger(&written));
    }

    #[test]
    fn spec_finalizers_deletion_labels_and_identity_trigger_a_reconcile() {
        let tc = tenant_cluster();
        let mut changes = Vec::new();
        let mut spec = tc.clone();
        spec.metadata.generation = Some(2);
        changes.push(spec);
        let mut finalizers = tc.clone();
        finalizers.metadata.finalizers = Some(vec![FINALIZER.into()]);
        changes.push(finalizers);
        let mut deleted = tc.clone();
        deleted.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        changes.push(deleted);
        let mut labels = tc.clone();
        labels.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        changes.push(labels);
        let mut annotations = tc.clone();
        annotations.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        changes.push(annotations);
        let mut recreated = tc.clone();
        recreated.metadata.uid = Some("u-2".into());
        changes.push(recreated);
        for changed in changes {
            assert_ne!(
                reconcile_trigger(&tc),
                reconcile_trigger(&changed),
                "{:?}",
                changed.metadata
            );
        }
    }
}
