//! The ResourcePool controller: binds ResourcePoolClaims and keeps one ResourceQuota
//! per pool in each of its namespaces.
//!
//! Every change to a pool, a claim, a namespace or a pool's ResourceQuota wakes one
//! reconcile of all pools (see [`tenantplane_core::pool`] for the rules). The order
//! of writes is what keeps the pools from overshooting even across crashes:
//! 1. each pool's ledger (its status) is written first, with the resourceVersion it
//!    was planned from, so a plan made from a stale ledger fails with 409 and is
//!    made again;
//! 2. then the quotas of a pool whose ledger is written, decreases before increases,
//!    so the namespaces' quotas never add up to more than the ledger;
//! 3. then the claims' statuses, which only report what the ledger holds.
//!
//! Stays over 500 lines: one reconcile whose write order (ledger, quotas, claims)
//! is the invariant; splitting it would scatter that order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tenantplane_api::{
    ResourceAmounts, ResourcePool, ResourcePoolClaim, ResourcePoolClaimStatus, ResourcePoolStatus,
};
use tenantplane_core::conditions::{self, Verdict};
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tenantplane_core::pool::{
    self, ClaimInput, ClaimOutcome, NamespaceInput, POOL_LABEL, PoolInput, PoolOutcome,
};
use tenantplane_core::quantity::exact_nanos;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::deletion::{delete_exact, exactly};
use crate::metrics::{Metrics, POOL_CONTROLLER, ResultLabels};

/// Field manager of the pool controller's writes.
const MANAGER: &str = "tenantplane-pools";
/// A full reconcile runs at least this often, events or not.
const RESYNC: Duration = Duration::from_secs(300);
/// Wait after a failed reconcile (a 409 on a ledger is the common case).
const RETRY: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("writing the ledger of ResourcePool {pool}: {source}")]
    Ledger {
        pool: String,
        #[source]
        source: kube::Error,
    },
    #[error("ResourceQuota {namespace}/{name}: {source}")]
    Quota {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("status of ResourcePoolClaim {namespace}/{name}: {source}")]
    Claim {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

struct Stores {
    pools: Store<ResourcePool>,
    claims: Store<ResourcePoolClaim>,
    namespaces: Store<Namespace>,
    quotas: Store<ResourceQuota>,
}

/// Runs until `shutdown` fires.
pub async fn run(host: Client, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let wake = Arc::new(Notify::new());
    let (pools, pools_task) = watch(Api::<ResourcePool>::all(host.clone()), &wake);
    let (claims, claims_task) = watch(Api::<ResourcePoolClaim>::all(host.clone()), &wake);
    let (namespaces, namespaces_task) = watch(Api::<Namespace>::all(host.clone()), &wake);
    // All quotas, not just ours: a foreign one in a pool's name must be seen to be
    // left alone without a failed create on every reconcile.
    let (quotas, quotas_task) = watch(Api::<ResourceQuota>::all(host.clone()), &wake);
    let tasks = [pools_task, claims_task, namespaces_task, quotas_task];
    let stores = Stores {
        pools,
        claims,
        namespaces,
        quotas,
    };
    let ready = async {
        let _ = stores.pools.wait_until_ready().await;
        let _ = stores.claims.wait_until_ready().await;
        let _ = stores.namespaces.wait_until_ready().await;
        let _ = stores.quotas.wait_until_ready().await;
    };
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = ready => loop {
            let result = reconcile_all(&host, &stores).await;
            let label = if result.is_ok() { "ok" } else { "error" };
            metrics
                .reconciles
                .get_or_create(&ResultLabels { controller: POOL_CONTROLLER, result: label })
                .inc();
            let pause = match result {
                Ok(()) => RESYNC,
                Err(err) => {
                    tracing::info!(error = %err, "ResourcePool reconcile incomplete; retrying");
                    RETRY
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
        },
    }
    for task in tasks {
        task.abort();
    }
}

/// A reflector of `api` that wakes the reconcile loop on every change.
fn watch<K>(api: Api<K>, wake: &Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default();
    let wake = Arc::clone(wake);
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(err) = event {
                tracing::debug!(error = %err, "ResourcePool watch error; retrying");
            }
            wake.notify_one();
        }
    });
    (reader, task)
}

async fn reconcile_all(host: &Client, stores: &Stores) -> Result<(), PoolError> {
    let pools = stores.pools.state();
    let claims = stores.claims.state();
    let namespaces = stores.namespaces.state();
    let empty = BTreeMap::new();
    let pool_inputs: Vec<PoolInput<'_>> = pools
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PoolInput {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            spec: &p.spec,
            ledger: p
                .status
                .as_ref()
                .map(|s| s.allocations.as_slice())
                .unwrap_or_default(),
        })
        .collect();
    let namespace_inputs: Vec<NamespaceInput<'_>> = namespaces
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| NamespaceInput {
            name: n.metadata.name.as_deref().unwrap_or_default(),
            labels: n.metadata.labels.as_ref().unwrap_or(&empty),
        })
        .collect();
    let claim_inputs: Vec<ClaimInput<'_>> = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| ClaimInput {
            namespace: c.metadata.namespace.as_deref().unwrap_or_default(),
            name: c.metadata.name.as_deref().unwrap_or_default(),
            uid: c.metadata.uid.as_deref().unwrap_or_default(),
            created: c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            spec: &c.spec,
        })
        .collect();
    let plan = pool::plan(&pool_inputs, &namespace_inputs, &claim_inputs);

    let quotas = stores.quotas.state();
    let mut first_error = None;
    let mut written = Vec::new();
    for outcome in &plan.pools {
        let Some(live) = pools.iter().find(|p| p.name_any() == outcome.name) else {
            continue;
        };
        let blocked = foreign_quotas(outcome, &quotas);
        match write_ledger(host, live, outcome, &blocked).await {
            Ok(()) => written.push(outcome),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    if let Err(err) = write_quotas(host, &pools, &written, &quotas).await {
        first_error.get_or_insert(err);
    }
    // Claims report the ledger; a claim of a pool whose ledger was not written
    // keeps its status until the next reconcile.
    let written_pools: Vec<&str> = written.iter().map(|o| o.name.as_str()).collect();
    for claim in &claims {
        let key = (claim.namespace().unwrap_or_default(), claim.name_any());
        let Some(outcome) = plan.claims.get(&key) else {
            continue;
        };
        let settled = match outcome {
            ClaimOutcome::Bound { pool, .. } => written_pools.contains(&pool.as_str()),
            ClaimOutcome::Pending { .. } => {
                written_pools.contains(&claim.spec.pool.as_str())
                    || !pools.iter().any(|p| p.name_any() == claim.spec.pool)
            }
        };
        if settled && let Err(err) = write_claim_status(host, claim, outcome).await {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Namespaces of `outcome` where a ResourceQuota tenantplane does not manage holds
/// the pool's quota name. It is never touched; the pool reports it.
fn foreign_quotas(outcome: &PoolOutcome, quotas: &[Arc<ResourceQuota>]) -> Vec<String> {
    let name = pool::quota_name(&outcome.name);
    quotas
        .iter()
        .filter(|q| q.name_any() == name && !is_ours(q, &outcome.name))
        .filter_map(|q| q.namespace())
        .filter(|ns| outcome.quotas.contains_key(ns))
        .collect()
}

fn is_ours(quota: &ResourceQuota, pool: &str) -> bool {
    quota.labels().get(POOL_LABEL).map(String::as_str) == Some(pool)
        && quota.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
}

/// Writes `outcome` as the pool's status if it changed, with the resourceVersion
/// the plan was made from (a compare-and-swap).
async fn write_ledger(
    host: &Client,
    live: &ResourcePool,
    outcome: &PoolOutcome,
    blocked: &[String],
) -> Result<(), PoolError> {
    let current = live.status.clone().unwrap_or_default();
    let mut status = match &outcome.problem {
        // An unreadable spec changes nothing but the condition.
        Some(_) => current.clone(),
        None => ResourcePoolStatus {
            size: u32::try_from(outcome.namespaces.len()).unwrap_or(u32::MAX),
            namespaces: outcome.namespaces.clone(),
            claim_count: u32::try_from(
                outcome
                    .allocations
                    .iter()
                    .filter(|a| a.claim.is_some())
                    .count(),
            )
            .unwrap_or(u32::MAX),
            allocations: outcome.allocations.clone(),
            allocated: outcome.allocated.clone(),
            conditions: current.conditions.clone(),
        },
    };
    let overcommitted = outcome.overcommitted.join("; ");
    let conflict = format!(
        "a ResourceQuota tenantplane does not manage holds the name {:?} in {}; it is left untouched",
        pool::quota_name(&outcome.name),
        blocked.join(", ")
    );
    let verdict = match (&outcome.problem, overcommitted.is_empty()) {
        (None, true) if !blocked.is_empty() => Verdict {
            type_: "Ready",
            ok: false,
            reason: "QuotaConflict",
            message: &conflict,
        },
        (Some(problem), _) => Verdict {
            type_: "Ready",
            ok: false,
            reason: "InvalidSpec",
            message: problem,
        },
        (None, false) => Verdict {
            type_: "Ready",
            ok: false,
            reason: "Overcommitted",
            message: &overcommitted,
        },
        (None, true) => Verdict {
            type_: "Ready",
            ok: true,
            reason: "Bound",
            message: "every grant fits in the pool",
        },
    };
    conditions::set(
        &mut status.conditions,
        verdict,
        live.metadata.generation,
        Timestamp::now(),
    );
    if status == current {
        return Ok(());
    }
    let mut updated = live.clone();
    updated.status = Some(status);
    let api: Api<ResourcePool> = Api::all(host.clone());
    let name = live.name_any();
    api.replace_status(&name, &PostParams::default(), &updated)
        .await
        .map_err(|source| PoolError::Ledger { pool: name, source })?;
    Ok(())
}

/// Creates, resizes and deletes the pools' ResourceQuotas: every decrease before
/// any increase.
async fn write_quotas(
    host: &Client,
    pools: &[Arc<ResourcePool>],
    written: &[&PoolOutcome],
    live: &[Arc<ResourceQuota>],
) -> Result<(), PoolError> {
    let mut shrink = Vec::new();
    let mut grow = Vec::new();
    let mut remove = Vec::new();
    for outcome in written.iter().filter(|o| o.problem.is_none()) {
        let Some(pool) = pools.iter().find(|p| p.name_any() == outcome.name) else {
            continue;
        };
        let name = pool::quota_name(&outcome.name);
        for (namespace, hard) in &outcome.quotas {
            let existing = live.iter().find(|q| {
                q.namespace().as_deref() == Some(namespace.as_str()) && q.name_any() == name
            });
            let desired = desired_quota(pool, namespace, &name, hard);
            match existing {
                Some(q) if !is_ours(q, &outcome.name) => {}
                None => grow.push((desired, None)),
                Some(q) if same_hard(q, hard) => {}
                Some(q) if covers(q, hard) => shrink.push((desired, Some(Arc::clone(q)))),
                Some(q) => grow.push((desired, Some(Arc::clone(q)))),
            }
        }
        for q in live.iter().filter(|q| {
            is_ours(q, &outcome.name)
                && !outcome
                    .quotas
                    .contains_key(&q.namespace().unwrap_or_default())
        }) {
            remove.push(Arc::clone(q));
        }
    }
    // Quotas of pools that are gone (deleted pools release everything).
    for q in live.iter().filter(|q| {
        let pool = q.labels().get(POOL_LABEL);
        pool.is_some_and(|p| is_ours(q, p) && !pools.iter().any(|live| &live.name_any() == p))
    }) {
        remove.push(Arc::clone(q));
    }
    for (desired, existing) in shrink.into_iter().chain(grow) {
        put_quota(host, desired, existing.as_deref()).await?;
    }
    for q in remove {
        delete_quota(host, &q).await?;
    }
    Ok(())
}

fn desired_quota(
    pool: &ResourcePool,
    namespace: &str,
    name: &str,
    hard: &ResourceAmounts,
) -> ResourceQuota {
    let mut quota = ResourceQuota {
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard.clone()),
            scopes: pool.spec.quota.scopes.clone(),
            scope_selector: pool.spec.quota.scope_selector.clone(),
        }),
        ..ResourceQuota::default()
    };
    quota.metadata.name = Some(name.to_owned());
    quota.metadata.namespace = Some(namespace.to_owned());
    quota.metadata.labels = Some(
        [
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
            (POOL_LABEL.to_owned(), pool.name_any()),
        ]
        .into(),
    );
    quota
}

fn hard_of(q: &ResourceQuota) -> BTreeMap<String, i128> {
    q.spec
        .as_ref()
        .and_then(|s| s.hard.as_ref())
        .into_iter()
        .flatten()
        .map(|(r, v)| (r.clone(), exact_nanos(&v.0).unwrap_or(i128::MAX)))
        .collect()
}

fn exact(hard: &ResourceAmounts) -> BTreeMap<String, i128> {
    hard.iter()
        .map(|(r, v)| (r.clone(), exact_nanos(&v.0).unwrap_or(i128::MAX)))
        .collect()
}

fn same_hard(q: &ResourceQuota, hard: &ResourceAmounts) -> bool {
    hard_of(q) == exact(hard)
}

/// Whether the live quota is at least `hard` everywhere (so `hard` is a decrease).
fn covers(q: &ResourceQuota, hard: &ResourceAmounts) -> bool {
    let live = hard_of(q);
    exact(hard)
        .iter()
        .all(|(r, n)| live.get(r).is_some_and(|have| have >= n))
}

async fn put_quota(
    host: &Client,
    desired: ResourceQuota,
    existing: Option<&ResourceQuota>,
) -> Result<(), PoolError> {
    let namespace = desired.namespace().unwrap_or_default();
    let name = desired.name_any();
    let api: Api<ResourceQuota> = Api::namespaced(host.clone(), &namespace);
    let err = |source| PoolError::Quota {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    };
    let result = match existing {
        None => api.create(&PostParams::default(), &desired).await,
        Some(live) => {
            let mut updated = desired;
            updated.metadata.resource_version = live.resource_version();
            api.replace(&name, &PostParams::default(), &updated).await
        }
    };
    match result {
        Ok(_) => Ok(()),
        // Created meanwhile: the watch shows it, and the next reconcile compares.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(err(e)),
    }
}

async fn delete_quota(host: &Client, quota: &ResourceQuota) -> Result<(), PoolError> {
    let namespace = quota.namespace().unwrap_or_default();
    let name = quota.name_any();
    let api: Api<ResourceQuota> = Api::namespaced(host.clone(), &namespace);
    match delete_exact(&api, &name, &exactly(quota.uid())).await {
        Ok(_) => Ok(()),
        Err(source) => Err(PoolError::Quota {
            namespace,
            name,
            source,
        }),
    }
}

async fn write_claim_status(
    host: &Client,
    claim: &ResourcePoolClaim,
    outcome: &ClaimOutcome,
) -> Result<(), PoolError> {
    let current = claim.status.clone().unwrap_or_default();
    let mut status = ResourcePoolClaimStatus {
        conditions: current.conditions.clone(),
        ..ResourcePoolClaimStatus::default()
    };
    let verdict = match outcome {
        ClaimOutcome::Bound { pool, resources } => {
            status.pool = Some(pool.clone());
            status.bound = resources.clone();
            Verdict {
                type_: "Bound",
                ok: true,
                reason: "Bound",
                message: "",
            }
        }
        ClaimOutcome::Pending { reason, message } => Verdict {
            type_: "Bound",
            ok: false,
            reason: reason.as_str(),
            message,
        },
    };
    let message;
    let verdict = match outcome {
        ClaimOutcome::Bound { pool, resources }
            if pool != &claim.spec.pool || resources != &claim.spec.claim =>
        {
            message = format!(
                "bound to ResourcePool {pool:?}; a bound claim keeps what it was bound with, so the edit has no effect"
            );
            Verdict {
                message: &message,
                reason: "BoundUnchanged",
                ..verdict
            }
        }
        ClaimOutcome::Bound { pool, .. } => {
            message = format!("bound to ResourcePool {pool:?}");
            Verdict {
                message: &message,
                ..verdict
            }
        }
        ClaimOutcome::Pending { .. } => verdict,
    };
    conditions::set(
        &mut status.conditions,
        verdict,
        claim.metadata.generation,
        Timestamp::now(),
    );
    if status == current {
        return Ok(());
    }
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let api: Api<ResourcePoolClaim> = Api::namespaced(host.clone(), &namespace);
    // A merge patch leaves absent keys alone: name the ones to clear.
    let mut patch = json!({ "status": status });
    for key in ["pool", "bound"] {
        if patch["status"].get(key).is_none() {
            patch["status"][key] = serde_json::Value::Null;
        }
    }
    api.patch_status(&name, &PatchParams::apply(MANAGER), &Patch::Merge(&patch))
        .await
        .map_err(|source| PoolError::Claim {
            namespace,
            name,
            source,
        })?;
    Ok(())
}
