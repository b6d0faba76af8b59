//! Shared quota without overshoot: which ResourcePoolClaims bind, and the quota each
//! namespace of a pool gets.
//!
//! The ledger is the pool's `status.allocations`. Every reconcile plans all pools at
//! once from the ledgers, the claims and the namespaces, so one claim is held by one
//! pool at most and each pool's grants are decided one after the other:
//! 1. grants whose claim is gone, or whose namespace left the pool, are released;
//! 2. if what is kept already exceeds the pool (it was shrunk while the webhook that
//!    refuses that was down), nothing new is granted until enough is released;
//! 3. otherwise each selected namespace without defaults gets them, in name order,
//!    then the pool's pending claims bind oldest first, each only if everything the
//!    pool has granted plus the claim still fits in `hard`. A claim that does not
//!    fit waits (`PoolExhausted`); a later, smaller claim may still bind.
//!
//! A grant keeps the amounts it was made with: editing a bound claim, or pointing it
//! at another pool, changes nothing it holds, so no edit can push a pool over.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};
use tenantplane_api::{PoolAllocation, ResourceAmounts, ResourcePoolClaimSpec, ResourcePoolSpec};

use crate::quantity::{exact_nanos, format_nanos};
use crate::selector;
use crate::transform::is_system_namespace;
#[cfg(test)]
use crate::validation::Violation;

mod violations;
pub use violations::{
    claim_update_violations, claim_violations, pool_update_violations, pool_violations,
    shrink_violations,
};

/// Name prefix of the ResourceQuota a pool puts in each of its namespaces.
pub const POOL_QUOTA_PREFIX: &str = "tenantplane-pool-";
/// Label on those ResourceQuotas naming their pool.
pub const POOL_LABEL: &str = "tenantplane.io/resource-pool";

/// A pool as the planner sees it: its spec and its ledger.
#[derive(Clone, Copy, Debug)]
pub struct PoolInput<'a> {
    pub name: &'a str,
    pub spec: &'a ResourcePoolSpec,
    pub ledger: &'a [PoolAllocation],
}

#[derive(Clone, Copy, Debug)]
pub struct NamespaceInput<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug)]
pub struct ClaimInput<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub created: Option<Timestamp>,
    pub spec: &'a ResourcePoolClaimSpec,
}

/// Why a claim is not bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingReason {
    PoolNotFound,
    PoolInvalid,
    NamespaceNotSelected,
    UnknownResource,
    InvalidQuantity,
    PoolExhausted,
    PoolOvercommitted,
}

impl PendingReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::PoolNotFound => "PoolNotFound",
            PendingReason::PoolInvalid => "PoolInvalid",
            PendingReason::NamespaceNotSelected => "NamespaceNotSelected",
            PendingReason::UnknownResource => "UnknownResource",
            PendingReason::InvalidQuantity => "InvalidQuantity",
            PendingReason::PoolExhausted => "PoolExhausted",
            PendingReason::PoolOvercommitted => "PoolOvercommitted",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutcome {
    /// Held by `pool` with the amounts it was bound with.
    Bound {
        pool: String,
        resources: ResourceAmounts,
    },
    Pending {
        reason: PendingReason,
        message: String,
    },
}

/// One pool's new ledger and the quota of each of its namespaces.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolOutcome {
    pub name: String,
    /// `Err` when the pool's spec cannot be evaluated: then its ledger and quotas
    /// are left exactly as they are.
    pub problem: Option<String>,
    /// Selected namespaces, sorted.
    pub namespaces: Vec<String>,
    pub allocations: Vec<PoolAllocation>,
    /// Sum of `allocations`, every resource of `hard` listed.
    pub allocated: ResourceAmounts,
    /// Resources whose grants exceed `hard`, with both amounts.
    pub overcommitted: Vec<String>,
    /// Namespace → the `hard` of its pool ResourceQuota (every resource of the
    /// pool's `hard`, zero where it holds nothing).
    pub quotas: BTreeMap<String, ResourceAmounts>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub pools: Vec<PoolOutcome>,
    /// (namespace, name) → outcome, for every claim given.
    pub claims: BTreeMap<(String, String), ClaimOutcome>,
}

/// Amounts in exact nano-units.
type Exact = BTreeMap<String, i128>;

fn exact(amounts: &ResourceAmounts) -> Result<Exact, String> {
    amounts
        .iter()
        .map(|(resource, Quantity(q))| match exact_nanos(q) {
            Some(n) => Ok((resource.clone(), n)),
            None => Err(format!("{resource}: {q:?} is not a valid quantity")),
        })
        .collect()
}

fn add(total: &mut Exact, amounts: &Exact) {
    for (resource, n) in amounts {
        *total.entry(resource.clone()).or_default() += n;
    }
}

fn quantities(amounts: &Exact) -> ResourceAmounts {
    amounts
        .iter()
        .map(|(resource, n)| (resource.clone(), Quantity(format_nanos(*n))))
        .collect()
}

/// What in `used` + `extra` exceeds `hard`, as messages; empty when it fits.
fn shortfall(hard: &Exact, used: &Exact, extra: &Exact) -> Vec<String> {
    let mut short = Vec::new();
    for (resource, n) in extra {
        let Some(limit) = hard.get(resource) else {
            short.push(format!("{resource} is not in the pool"));
            continue;
        };
        let have = used.get(resource).copied().unwrap_or_default();
        if have + n > *limit {
            short.push(format!(
                "{resource}: {} requested, {} of {} left",
                format_nanos(*n),
                format_nanos((limit - have).max(0)),
                format_nanos(*limit)
            ));
        }
    }
    short
}

/// The name of `pool`'s ResourceQuota in each of its namespaces (a DNS subdomain,
/// hashed when the pool's name is too long to fit).
pub fn quota_name(pool: &str) -> String {
    let name = format!("{POOL_QUOTA_PREFIX}{pool}");
    if name.len() <= 253 {
        return name;
    }
    let digest = Sha256::digest(pool.as_bytes());
    let hex = crate::hex::short_hex(digest, 8);
    let mut cut = 253 - 1 - hex.len();
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hex}", name[..cut].trim_end_matches(['-', '.']))
}

/// Plans every pool at once. Pure: the caller writes the ledgers, claim statuses and
/// quotas it returns.
pub fn plan(
    pools: &[PoolInput<'_>],
    namespaces: &[NamespaceInput<'_>],
    claims: &[ClaimInput<'_>],
) -> Plan {
    let mut pools: Vec<PoolInput<'_>> = pools.to_vec();
    pools.sort_by(|a, b| a.name.cmp(b.name));
    let live_claims: BTreeMap<&str, &ClaimInput<'_>> = claims.iter().map(|c| (c.uid, c)).collect();
    // A claim held by any pool's ledger is never considered by another pool.
    let held: BTreeSet<&str> = pools
        .iter()
        .flat_map(|p| p.ledger.iter().filter_map(|a| a.uid.as_deref()))
        .filter(|uid| live_claims.contains_key(uid))
        .collect();

    let mut plan = Plan::default();
    for pool in &pools {
        let outcome = plan_pool(
            pool,
            namespaces,
            claims,
            &live_claims,
            &held,
            &mut plan.claims,
        );
        plan.pools.push(outcome);
    }
    for claim in claims {
        let key = (claim.namespace.to_owned(), claim.name.to_owned());
        plan.claims
            .entry(key)
            .or_insert_with(|| ClaimOutcome::Pending {
                reason: PendingReason::PoolNotFound,
                message: format!("ResourcePool {:?} does not exist", claim.spec.pool),
            });
    }
    plan
}

fn plan_pool(
    pool: &PoolInput<'_>,
    namespaces: &[NamespaceInput<'_>],
    claims: &[ClaimInput<'_>],
    live_claims: &BTreeMap<&str, &ClaimInput<'_>>,
    held: &BTreeSet<&str>,
    outcomes: &mut BTreeMap<(String, String), ClaimOutcome>,
) -> PoolOutcome {
    let hard = match exact(
        pool.spec
            .quota
            .hard
            .as_ref()
            .unwrap_or(&ResourceAmounts::new()),
    ) {
        Ok(hard) => hard,
        Err(problem) => return invalid(pool, claims, outcomes, problem),
    };
    let defaults = match exact(&pool.spec.defaults) {
        Ok(defaults) => defaults,
        Err(problem) => return invalid(pool, claims, outcomes, problem),
    };
    let mut selected = BTreeSet::new();
    for namespace in namespaces {
        match selector::matches(&pool.spec.namespace_selector, namespace.labels) {
            Ok(true) if !is_system_namespace(namespace.name) => {
                selected.insert(namespace.name.to_owned());
            }
            Ok(_) => {}
            Err(problem) => return invalid(pool, claims, outcomes, problem.to_string()),
        }
    }

    // 1. Keep what is still held: live claims in selected namespaces, and defaults.
    let mut kept: Vec<(PoolAllocation, Exact)> = Vec::new();
    for allocation in pool.ledger {
        if !selected.contains(&allocation.namespace) {
            continue;
        }
        let still_held = match allocation.uid.as_deref() {
            Some(uid) => live_claims
                .get(uid)
                .is_some_and(|c| c.namespace == allocation.namespace),
            None => allocation.claim.is_none(),
        };
        // A ledger entry that cannot be read is kept at its face value if possible,
        // dropped otherwise: it was written by us, so this is not expected.
        if let (true, Ok(amounts)) = (still_held, exact(&allocation.resources)) {
            kept.push((allocation.clone(), amounts));
        }
    }
    let mut used = Exact::new();
    for (_, amounts) in &kept {
        add(&mut used, amounts);
    }

    // 2. Over the pool: grant nothing until enough is released.
    let mut overcommitted = Vec::new();
    for (resource, n) in &used {
        let limit = hard.get(resource).copied();
        if limit.is_none_or(|limit| *n > limit) {
            overcommitted.push(match limit {
                Some(limit) => format!(
                    "{resource}: {} granted, pool has {}",
                    format_nanos(*n),
                    format_nanos(limit)
                ),
                None => format!("{resource}: {} granted, not in the pool", format_nanos(*n)),
            });
        }
    }
    let open = overcommitted.is_empty();

    // 3a. Defaults for namespaces that have none yet, in name order.
    if open && !defaults.is_empty() {
        let with_defaults: BTreeSet<String> = kept
            .iter()
            .filter(|(a, _)| a.claim.is_none())
            .map(|(a, _)| a.namespace.clone())
            .collect();
        for namespace in selected.iter().filter(|n| !with_defaults.contains(*n)) {
            if shortfall(&hard, &used, &defaults).is_empty() {
                add(&mut used, &defaults);
                kept.push((
                    PoolAllocation {
                        namespace: namespace.clone(),
                        claim: None,
                        uid: None,
                        resources: pool.spec.defaults.clone(),
                    },
                    defaults.clone(),
                ));
            }
        }
    }

    // 3b. Pending claims of this pool, oldest first.
    for allocation in kept.iter().map(|(a, _)| a) {
        if let (Some(name), Some(_)) = (&allocation.claim, &allocation.uid) {
            outcomes.insert(
                (allocation.namespace.clone(), name.clone()),
                ClaimOutcome::Bound {
                    pool: pool.name.to_owned(),
                    resources: allocation.resources.clone(),
                },
            );
        }
    }
    let mut pending: Vec<&ClaimInput<'_>> = claims
        .iter()
        .filter(|c| c.spec.pool == pool.name && !held.contains(c.uid))
        .collect();
    pending.sort_by(|a, b| (a.created, a.namespace, a.name).cmp(&(b.created, b.namespace, b.name)));
    for claim in pending {
        let key = (claim.namespace.to_owned(), claim.name.to_owned());
        let outcome = bind(pool, &hard, &selected, open, &mut used, claim, &mut kept);
        outcomes.insert(key, outcome);
    }

    let allocations: Vec<PoolAllocation> = kept.iter().map(|(a, _)| a.clone()).collect();
    let mut quotas: BTreeMap<String, Exact> = selected
        .iter()
        .map(|ns| (ns.clone(), hard.keys().map(|r| (r.clone(), 0)).collect()))
        .collect();
    for (allocation, amounts) in &kept {
        if let Some(quota) = quotas.get_mut(&allocation.namespace) {
            add(quota, amounts);
        }
    }
    let mut allocated: Exact = hard.keys().map(|r| (r.clone(), 0)).collect();
    add(&mut allocated, &used);
    PoolOutcome {
        name: pool.name.to_owned(),
        problem: None,
        namespaces: selected.into_iter().collect(),
        allocations,
        allocated: quantities(&allocated),
        overcommitted,
        quotas: quotas
            .iter()
            .map(|(ns, q)| (ns.clone(), quantities(q)))
            .collect(),
    }
}

/// A pool whose spec cannot be read: its ledger stays exactly as it is, its
/// claims wait.
fn invalid(
    pool: &PoolInput<'_>,
    claims: &[ClaimInput<'_>],
    outcomes: &mut BTreeMap<(String, String), ClaimOutcome>,
    problem: String,
) -> PoolOutcome {
    for claim in claims.iter().filter(|c| c.spec.pool == pool.name) {
        let held = pool
            .ledger
            .iter()
            .find(|a| a.uid.as_deref() == Some(claim.uid));
        let result = match held {
            Some(allocation) => ClaimOutcome::Bound {
                pool: pool.name.to_owned(),
                resources: allocation.resources.clone(),
            },
            None => ClaimOutcome::Pending {
                reason: PendingReason::PoolInvalid,
                message: format!("ResourcePool {:?} is invalid: {problem}", pool.name),
            },
        };
        outcomes.insert((claim.namespace.to_owned(), claim.name.to_owned()), result);
    }
    PoolOutcome {
        name: pool.name.to_owned(),
        problem: Some(problem),
        namespaces: Vec::new(),
        allocations: pool.ledger.to_vec(),
        allocated: ResourceAmounts::new(),
        overcommitted: Vec::new(),
        quotas: BTreeMap::new(),
    }
}

fn bind(
    pool: &PoolInput<'_>,
    hard: &Exact,
    selected: &BTreeSet<String>,
    open: bool,
    used: &mut Exact,
    claim: &ClaimInput<'_>,
    kept: &mut Vec<(PoolAllocation, Exact)>,
) -> ClaimOutcome {
    let pending = |reason, message| ClaimOutcome::Pending { reason, message };
    if !selected.contains(claim.namespace) {
        return pending(
            PendingReason::NamespaceNotSelected,
            format!(
                "namespace {:?} is not selected by ResourcePool {:?}",
                claim.namespace, pool.name
            ),
        );
    }
    let amounts = match exact(&claim.spec.claim) {
        Ok(amounts) => amounts,
        Err(problem) => return pending(PendingReason::InvalidQuantity, problem),
    };
    let unknown: Vec<&str> = amounts
        .keys()
        .filter(|r| !hard.contains_key(*r))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return pending(
            PendingReason::UnknownResource,
            format!("ResourcePool {:?} has no {}", pool.name, unknown.join(", ")),
        );
    }
    if !open {
        return pending(
            PendingReason::PoolOvercommitted,
            format!(
                "ResourcePool {:?} has granted more than it holds; nothing binds until grants are released",
                pool.name
            ),
        );
    }
    let short = shortfall(hard, used, &amounts);
    if !short.is_empty() {
        return pending(PendingReason::PoolExhausted, short.join("; "));
    }
    add(used, &amounts);
    kept.push((
        PoolAllocation {
            namespace: claim.namespace.to_owned(),
            claim: Some(claim.name.to_owned()),
            uid: Some(claim.uid.to_owned()),
            resources: claim.spec.claim.clone(),
        },
        amounts,
    ));
    ClaimOutcome::Bound {
        pool: pool.name.to_owned(),
        resources: claim.spec.claim.clone(),
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
