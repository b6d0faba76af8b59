//! What the admission webhook refuses in ResourcePools and ResourcePoolClaims.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tenantplane_api::{ResourceAmounts, ResourcePoolClaimSpec, ResourcePoolSpec};

use crate::quantity::exact_nanos;
use crate::selector;
use crate::validation::Violation;

/// Why an update of a pool would leave it holding less than it has granted (the
/// admission webhook refuses such an update); empty when the new `hard` covers
/// every grant in the old status.
pub fn shrink_violations(new_hard: &ResourceAmounts, allocated: &ResourceAmounts) -> Vec<String> {
    let mut problems = Vec::new();
    for (resource, Quantity(granted)) in allocated {
        let granted_n = exact_nanos(granted).unwrap_or_default();
        if granted_n == 0 {
            continue;
        }
        match new_hard.get(resource) {
            None => problems.push(format!(
                "{resource} cannot leave the pool: {granted} of it is granted"
            )),
            Some(Quantity(limit)) => match exact_nanos(limit) {
                Some(limit_n) if limit_n >= granted_n => {}
                Some(_) => problems.push(format!(
                    "{resource} cannot shrink to {limit}: {granted} of it is granted"
                )),
                None => problems.push(format!("{resource}: {limit:?} is not a valid quantity")),
            },
        }
    }
    problems
}

/// What is wrong with a ResourcePool's spec (the admission webhook refuses it).
pub fn pool_violations(spec: &ResourcePoolSpec) -> Vec<Violation> {
    let mut violations = Vec::new();
    let hard = spec.quota.hard.clone().unwrap_or_default();
    if hard.is_empty() {
        violations.push(Violation::new(
            "spec.quota.hard",
            "a pool must hold at least one resource",
        ));
    }
    amount_violations("spec.quota.hard", &hard, &mut violations);
    amount_violations("spec.defaults", &spec.defaults, &mut violations);
    for resource in spec.defaults.keys().filter(|r| !hard.contains_key(*r)) {
        violations.push(Violation::new(
            format!("spec.defaults[{resource}]"),
            "not in spec.quota.hard: defaults come out of the pool",
        ));
    }
    if let Err(err) = selector::matches(&spec.namespace_selector, &BTreeMap::new()) {
        violations.push(Violation::new("spec.namespaceSelector", err.to_string()));
    }
    violations
}

/// What an update of a pool may not do: hold less than it has granted.
pub fn pool_update_violations(
    new: &ResourcePoolSpec,
    granted: Option<&ResourceAmounts>,
) -> Vec<Violation> {
    let hard = new.quota.hard.clone().unwrap_or_default();
    granted
        .map(|granted| shrink_violations(&hard, granted))
        .unwrap_or_default()
        .into_iter()
        .map(|message| Violation::new("spec.quota.hard", message))
        .collect()
}

/// What is wrong with a claim's spec.
pub fn claim_violations(spec: &ResourcePoolClaimSpec) -> Vec<Violation> {
    let mut violations = Vec::new();
    if spec.claim.is_empty() {
        violations.push(Violation::new("spec.claim", "claim at least one resource"));
    }
    amount_violations("spec.claim", &spec.claim, &mut violations);
    violations
}

/// A bound claim (its status names a pool) cannot be changed or moved.
pub fn claim_update_violations(
    old: &ResourcePoolClaimSpec,
    bound_to: Option<&str>,
    new: &ResourcePoolClaimSpec,
) -> Vec<Violation> {
    let Some(pool) = bound_to else {
        return Vec::new();
    };
    let mut violations = Vec::new();
    if new.pool != old.pool {
        violations.push(Violation::new(
            "spec.pool",
            format!("the claim is bound to ResourcePool {pool:?} and cannot move; delete it and claim again"),
        ));
    }
    if new.claim != old.claim {
        violations.push(Violation::new(
            "spec.claim",
            format!("the claim is bound to ResourcePool {pool:?} and cannot change; delete it and claim again"),
        ));
    }
    violations
}

fn amount_violations(field: &str, amounts: &ResourceAmounts, out: &mut Vec<Violation>) {
    for (resource, Quantity(q)) in amounts {
        if exact_nanos(q).is_none() {
            out.push(Violation::new(
                format!("{field}[{resource}]"),
                format!("{q:?} is not a non-negative quantity such as 8, 500m or 16Gi"),
            ));
        }
    }
}
