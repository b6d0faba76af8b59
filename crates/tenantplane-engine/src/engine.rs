//! One TenantCluster's sync engine: resolves each SyncPolicy kind by discovery on
//! both API servers and runs a [`KindSyncer`] per kind until stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use kube::api::GroupVersionKind;
use kube::discovery::{Scope as DiscoveryScope, pinned_kind};
use tenantplane_api::{ApiFairness, SyncDirection, SyncPolicySpec};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::three_way::FieldOwnership;
use tenantplane_core::transform::TenantTarget;
use tokio_util::sync::CancellationToken;

use crate::decisions::DecisionSender;
use crate::fairness::WriteBudget;
use crate::host_watches::HostWatches;
use crate::kind_sync::{
    ConflictedObjects, KindProgress, KindSyncer, KindTarget, PodSettings, ServiceCidrMismatches,
    SyncContext, SyncedKinds, TwoWaySettings, watch_host_events,
};
use crate::metrics::Metrics;
use crate::status_alarm::StatusAlarm;

/// What an engine is started with.
pub struct EngineSpec {
    pub target: TenantTarget,
    pub policy: SyncPolicySpec,
    pub fairness: ApiFairness,
    /// Concurrent writers per kind.
    pub workers: usize,
    /// How Pods are synced (isolation controls, the tenant API endpoint).
    pub pods: PodSettings,
    /// Host Secrets the IsolationProfile lets cross fromHost (`namespace/name`).
    pub from_host_secrets: Vec<String>,
    /// The process's shared host watches.
    pub host_watches: HostWatches,
    /// Wakes the TenantCluster's reconcile when what its status reports changes.
    pub status_alarm: StatusAlarm,
}

/// The state of one kind of the policy.
#[derive(Clone, Debug)]
pub enum KindState {
    Running(Arc<KindProgress>),
    /// Not synced, and why (an unknown kind, a cluster-scoped kind, a direction not
    /// implemented yet).
    Unavailable(String),
}

/// A kind of the SyncPolicy: `(apiVersion, kind)`.
pub type PolicyKind = (String, String);

pub struct Engine {
    cancel: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    pub kinds: BTreeMap<PolicyKind, KindState>,
    /// The policy's fromHost kinds (a kind may also be listed toHost).
    pub from_host: BTreeMap<PolicyKind, KindState>,
    /// The tenant API server, for releasing its Pods when the TenantCluster goes.
    pub tenant: Client,
    /// Tenant Services refused their host address (the `ServiceCIDR` condition).
    pub service_cidr: Arc<ServiceCidrMismatches>,
    /// Bidirectional objects with unresolved conflicts (the `Conflicted` condition).
    pub conflicts: Arc<ConflictedObjects>,
}

impl Engine {
    /// Resolves the policy's kinds and starts syncing them. Never fails as a whole:
    /// a kind that cannot be synced is [`KindState::Unavailable`] with a reason.
    pub async fn start(
        host: Client,
        tenant: Client,
        spec: EngineSpec,
        decisions: DecisionSender,
        metrics: Arc<Metrics>,
    ) -> Engine {
        let resync = if spec.policy.drift_detection.enabled {
            // The webhook refuses bad intervals; an old object may still hold one.
            Some(
                spec.policy
                    .drift_detection
                    .interval_duration()
                    .unwrap_or(Duration::from_secs(30)),
            )
        } else {
            None
        };
        let mut pod_settings = spec.pods;
        pod_settings.synced_kinds = spec
            .policy
            .resources
            .iter()
            .filter(|r| r.direction == SyncDirection::ToHost)
            .filter_map(|r| GroupKind::from_api_version(&r.api_version, &r.kind).ok())
            .collect();
        let ctx = Arc::new(SyncContext {
            target: spec.target,
            host: host.clone(),
            tenant: tenant.clone(),
            budget: Arc::new(WriteBudget::new(spec.fairness)),
            decisions,
            metrics,
            workers: spec.workers,
            resync,
            pods: pod_settings,
            service_cidr: Arc::new(ServiceCidrMismatches::with_alarm(
                "Services",
                spec.status_alarm.clone(),
            )),
            conflicts: Arc::new(ConflictedObjects::with_alarm(
                "objects",
                spec.status_alarm.clone(),
            )),
            synced: SyncedKinds::default(),
            host_watches: spec.host_watches,
            status_alarm: spec.status_alarm,
        });
        let cancel = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        // One watch of host Events for every synced kind (not one per kind).
        tasks.spawn(watch_host_events(Arc::clone(&ctx), cancel.child_token()));
        let mut kinds = BTreeMap::new();
        let mut from_host = BTreeMap::new();
        for resource in &spec.policy.resources {
            if resource.direction == SyncDirection::FromHost {
                let key = (resource.api_version.clone(), resource.kind.clone());
                let state = match start_from_host(&host, &tenant, resource, &spec.from_host_secrets)
                    .await
                {
                    Ok(kind) => {
                        let progress = Arc::new(KindProgress::default());
                        tasks.spawn(crate::from_host::run(
                            Arc::clone(&ctx),
                            kind,
                            Arc::clone(&progress),
                            cancel.child_token(),
                        ));
                        KindState::Running(progress)
                    }
                    Err(reason) => KindState::Unavailable(reason),
                };
                from_host.insert(key, state);
                continue;
            }
            let key = (resource.api_version.clone(), resource.kind.clone());
            if kinds.contains_key(&key) {
                continue;
            }
            let two_way = match resource.direction {
                SyncDirection::ToHost => Ok(None),
                SyncDirection::Bidirectional => two_way_settings(&spec.policy, resource).map(Some),
                SyncDirection::FromHost => continue,
            };
            let state = match two_way {
                Err(reason) => KindState::Unavailable(reason),
                Ok(two_way) => {
                    match resolve(&host, &tenant, &resource.api_version, &resource.kind).await {
                        Ok((group_kind, tenant_resource, host_resource)) => {
                            ctx.synced.starting(group_kind.clone());
                            let progress = Arc::new(KindProgress::default());
                            tasks.spawn(KindSyncer::run(
                                Arc::clone(&ctx),
                                KindTarget {
                                    api_version: resource.api_version.clone(),
                                    group_kind,
                                    tenant_resource,
                                    host_resource,
                                    two_way,
                                },
                                Arc::clone(&progress),
                                cancel.child_token(),
                            ));
                            KindState::Running(progress)
                        }
                        Err(reason) => KindState::Unavailable(reason),
                    }
                }
            };
            kinds.insert(key, state);
        }
        Engine {
            cancel,
            tasks,
            kinds,
            from_host,
            tenant,
            service_cidr: Arc::clone(&ctx.service_cidr),
            conflicts: Arc::clone(&ctx.conflicts),
        }
    }

    /// Every kind of the policy, toHost and bidirectional first, then fromHost.
    pub fn all_kinds(&self) -> impl Iterator<Item = (&PolicyKind, &KindState)> {
        self.kinds.iter().chain(self.from_host.iter())
    }

    /// Stops every syncer and waits for them.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }

    /// Whether every running kind completed a pass, the last one without errors.
    pub fn synced(&self) -> bool {
        self.all_kinds().all(|(_, state)| match state {
            KindState::Running(p) => {
                p.passes.load(Ordering::Relaxed) > 0
                    && p.last_pass_errors.load(Ordering::Relaxed) == 0
            }
            KindState::Unavailable(_) => false,
        })
    }

    /// Whether some kind is still in its first pass and nothing is known to be
    /// wrong: a freshly (re)started engine that has not finished looking.
    pub fn starting(&self) -> bool {
        let mut first_pass = false;
        for (_, state) in self.all_kinds() {
            match state {
                KindState::Unavailable(_) => return false,
                KindState::Running(p) => {
                    if p.last_error.lock().map_or(true, |e| e.is_some())
                        || p.last_pass_errors.load(Ordering::Relaxed) > 0
                    {
                        return false;
                    }
                    first_pass |= p.passes.load(Ordering::Relaxed) == 0;
                }
            }
        }
        first_pass
    }

    /// Why the engine is not synced, for the `Synced` condition.
    pub fn problems(&self) -> Vec<String> {
        self.all_kinds()
            .filter_map(|((api_version, kind), state)| match state {
                KindState::Unavailable(reason) => Some(reason.clone()),
                KindState::Running(p) if p.passes.load(Ordering::Relaxed) == 0 => {
                    Some(format!("{api_version} {kind}: first pass in progress"))
                }
                KindState::Running(p) if p.last_pass_errors.load(Ordering::Relaxed) > 0 => {
                    let last = p
                        .last_error
                        .lock()
                        .ok()
                        .and_then(|e| e.clone())
                        .unwrap_or_default();
                    Some(format!(
                        "{api_version} {kind}: {} errors in the last pass (retrying); last: {last}",
                        p.last_pass_errors.load(Ordering::Relaxed)
                    ))
                }
                KindState::Running(_) => None,
            })
            .collect()
    }
}

/// How a bidirectional kind is synced, or why it cannot be: Pods, Services and
/// Ingresses have their own paths (spec down, status up) and stay toHost.
fn two_way_settings(
    policy: &SyncPolicySpec,
    resource: &tenantplane_api::SyncResource,
) -> Result<TwoWaySettings, String> {
    let group_kind = GroupKind::from_api_version(&resource.api_version, &resource.kind)
        .map_err(|e| e.to_string())?;
    let dedicated = [
        GroupKind::new("", "Pod"),
        GroupKind::new("", "Service"),
        GroupKind::new("networking.k8s.io", "Ingress"),
    ];
    if group_kind == GroupKind::new("", "Secret") {
        // Two-way decisions name the values they write; Secret data never goes there.
        return Err(format!(
            "{} {}: direction bidirectional is not available for Secrets (decisions would carry their data); use toHost or fromHost",
            resource.api_version, resource.kind
        ));
    }
    if dedicated.contains(&group_kind) {
        return Err(format!(
            "{} {}: direction bidirectional is not available for {group_kind}, whose toHost path already brings its status back; use toHost",
            resource.api_version, resource.kind
        ));
    }
    Ok(TwoWaySettings {
        ownership: FieldOwnership::bidirectional_default()
            .with_overrides(&resource.field_ownership),
        policy: policy.conflict_policy,
    })
}

/// Resolves a fromHost kind on both API servers and checks it against the
/// allow-list, its mappings against the profile.
async fn start_from_host(
    host: &Client,
    tenant: &Client,
    resource: &tenantplane_api::SyncResource,
    allowed_secrets: &[String],
) -> Result<crate::from_host::FromHostKind, String> {
    let what = format!("{} {} (fromHost)", resource.api_version, resource.kind);
    let group_kind = GroupKind::from_api_version(&resource.api_version, &resource.kind)
        .map_err(|e| format!("{what}: {e}"))?;
    let version = resource
        .api_version
        .rsplit('/')
        .next()
        .unwrap_or(&resource.api_version);
    let gvk = GroupVersionKind::gvk(&group_kind.group, version, &resource.kind);
    let (host_resource, caps) = pinned_kind(host, &gvk)
        .await
        .map_err(|e| format!("{what}: the host API server does not serve this kind ({e})"))?;
    let (tenant_resource, _) = pinned_kind(tenant, &gvk)
        .await
        .map_err(|e| format!("{what}: the tenant API server does not serve this kind ({e}); install its CRD in the tenant"))?;
    let cluster_scoped = caps.scope == DiscoveryScope::Cluster;
    tenantplane_core::from_host::check_kind(
        &group_kind,
        cluster_scoped,
        !resource.mappings.is_empty(),
    )
    .map_err(|e| format!("{what}: {e}"))?;
    let mappings = resource
        .mappings
        .iter()
        .map(|m| tenantplane_core::from_host::parse_mapping(m))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if let Some(selector) = &resource.selector {
        tenantplane_core::selector::matches(selector, &Default::default())
            .map_err(|e| format!("{what}: selector: {e}"))?;
    }
    let selector = resource.selector.clone();
    Ok(crate::from_host::FromHostKind {
        api_version: resource.api_version.clone(),
        group_kind,
        tenant_resource,
        host_resource,
        cluster_scoped,
        selector,
        mappings,
        allowed_secrets: allowed_secrets.to_vec(),
    })
}

/// Finds a kind on the tenant and the host, refusing cluster-scoped kinds.
async fn resolve(
    host: &Client,
    tenant: &Client,
    api_version: &str,
    kind: &str,
) -> Result<(GroupKind, kube::api::ApiResource, kube::api::ApiResource), String> {
    let group_kind = GroupKind::from_api_version(api_version, kind).map_err(|e| e.to_string())?;
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let gvk = GroupVersionKind::gvk(&group_kind.group, version, kind);
    let (tenant_resource, caps) = pinned_kind(tenant, &gvk).await.map_err(|e| {
        format!("{api_version} {kind}: the tenant API server does not serve this kind ({e})")
    })?;
    if caps.scope == DiscoveryScope::Cluster {
        return Err(tenantplane_core::kinds::check_syncable(
            &group_kind,
            tenantplane_core::kinds::Scope::Cluster,
        )
        .err()
        .map_or_else(
            || format!("{api_version} {kind} is cluster-scoped"),
            |e| e.to_string(),
        ));
    }
    let (host_resource, _) = pinned_kind(host, &gvk)
        .await
        .map_err(|e| format!("{api_version} {kind}: the host API server does not serve this kind ({e}); install its CRD on the host"))?;
    Ok((group_kind, tenant_resource, host_resource))
}
