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
use tenantplane_core::transform::TenantTarget;
use tokio_util::sync::CancellationToken;

use crate::decisions::DecisionSender;
use crate::fairness::WriteBudget;
use crate::kind_sync::{KindProgress, KindSyncer, PodSettings, ServiceCidrMismatches, SyncContext};
use crate::metrics::Metrics;

/// What an engine is started with.
pub struct EngineSpec {
    pub target: TenantTarget,
    pub policy: SyncPolicySpec,
    pub fairness: ApiFairness,
    /// Concurrent writers per kind.
    pub workers: usize,
    /// How Pods are synced (isolation controls, the tenant API endpoint).
    pub pods: PodSettings,
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
    /// The tenant API server, for releasing its Pods when the TenantCluster goes.
    pub tenant: Client,
    /// Tenant Services refused their host address (the `ServiceCIDR` condition).
    pub service_cidr: Arc<ServiceCidrMismatches>,
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
            service_cidr: Arc::default(),
        });
        let cancel = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        let mut kinds = BTreeMap::new();
        for resource in &spec.policy.resources {
            let key = (resource.api_version.clone(), resource.kind.clone());
            if kinds.contains_key(&key) {
                continue;
            }
            let state = match resource.direction {
                SyncDirection::ToHost => {
                    match resolve(&host, &tenant, &resource.api_version, &resource.kind).await {
                        Ok((group_kind, tenant_resource, host_resource)) => {
                            let progress = Arc::new(KindProgress::default());
                            tasks.spawn(KindSyncer::run(
                                Arc::clone(&ctx),
                                resource.api_version.clone(),
                                group_kind,
                                tenant_resource,
                                host_resource,
                                Arc::clone(&progress),
                                cancel.child_token(),
                            ));
                            KindState::Running(progress)
                        }
                        Err(reason) => KindState::Unavailable(reason),
                    }
                }
                other => KindState::Unavailable(format!(
                    "{} {}: direction {other:?} is not implemented yet; only toHost syncs",
                    resource.api_version, resource.kind
                )),
            };
            kinds.insert(key, state);
        }
        Engine {
            cancel,
            tasks,
            kinds,
            tenant,
            service_cidr: Arc::clone(&ctx.service_cidr),
        }
    }

    /// Stops every syncer and waits for them.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }

    /// Whether every running kind completed a pass, the last one without errors.
    pub fn synced(&self) -> bool {
        self.kinds.values().all(|state| match state {
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
        for state in self.kinds.values() {
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
        self.kinds
            .iter()
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
