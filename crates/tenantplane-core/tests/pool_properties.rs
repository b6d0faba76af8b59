//! No sequence of claims, edits, releases, namespace moves and pool resizes lets the
//! namespaces of a ResourcePool together hold more than the pool.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuotaSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use tenantplane_api::{PoolAllocation, ResourceAmounts, ResourcePoolClaimSpec, ResourcePoolSpec};
use tenantplane_core::pool::{ClaimInput, ClaimOutcome, NamespaceInput, PoolInput, plan};
use tenantplane_core::quantity::exact_nanos;

const RESOURCES: [&str; 2] = ["cpu", "memory"];

#[derive(Clone, Debug)]
enum Op {
    /// A new claim in namespace `ns` (0..4) on pool `pool` (0..2).
    Claim {
        ns: usize,
        pool: usize,
        cpu_m: u32,
        mem_mi: u32,
    },
    /// Edit claim `index` (mod count) to new amounts and maybe another pool.
    Edit {
        index: usize,
        pool: usize,
        cpu_m: u32,
    },
    Release {
        index: usize,
    },
    /// Toggle namespace `ns`'s membership label.
    Move {
        ns: usize,
    },
    /// Set pool `pool`'s cpu cap (may shrink below its grants: the webhook would
    /// refuse that, but it can happen while the webhook is down).
    Resize {
        pool: usize,
        cpu_m: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, 0..2usize, 0..1500u32, 0..1024u32)
            .prop_map(|(ns, pool, cpu_m, mem_mi)| Op::Claim { ns, pool, cpu_m, mem_mi }),
        1 => (0..64usize, 0..2usize, 0..5000u32)
            .prop_map(|(index, pool, cpu_m)| Op::Edit { index, pool, cpu_m }),
        1 => (0..64usize).prop_map(|index| Op::Release { index }),
        1 => (0..4usize).prop_map(|ns| Op::Move { ns }),
        1 => (0..2usize, 0..5000u32).prop_map(|(pool, cpu_m)| Op::Resize { pool, cpu_m }),
    ]
}

fn amounts(cpu_m: u32, mem_mi: Option<u32>) -> ResourceAmounts {
    let mut out = BTreeMap::from([("cpu".to_owned(), Quantity(format!("{cpu_m}m")))]);
    if let Some(mem) = mem_mi {
        out.insert("memory".to_owned(), Quantity(format!("{mem}Mi")));
    }
    out
}

fn pool_spec(index: usize, cpu_m: u32) -> ResourcePoolSpec {
    ResourcePoolSpec {
        namespace_selector: LabelSelector {
            match_labels: Some([(format!("pool-{index}"), "yes".to_owned())].into()),
            ..LabelSelector::default()
        },
        quota: ResourceQuotaSpec {
            hard: Some(amounts(cpu_m, Some(2048))),
            ..ResourceQuotaSpec::default()
        },
        defaults: amounts(100, None),
    }
}

fn sum(allocations: &[PoolAllocation], resource: &str) -> i128 {
    allocations
        .iter()
        .filter_map(|a| a.resources.get(resource))
        .map(|q| exact_nanos(&q.0).unwrap())
        .sum()
}

fn hard(spec: &ResourcePoolSpec, resource: &str) -> i128 {
    exact_nanos(&spec.quota.hard.as_ref().unwrap()[resource].0).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pools_never_grant_beyond_their_hard_limit(
        ops in prop::collection::vec(op(), 1..40),
        caps in (500..4000u32, 500..4000u32),
    ) {
        let mut specs = [pool_spec(0, caps.0), pool_spec(1, caps.1)];
        let mut ledgers: [Vec<PoolAllocation>; 2] = [Vec::new(), Vec::new()];
        // Namespace i starts in pool i % 2.
        let mut labels: Vec<BTreeMap<String, String>> = (0..4)
            .map(|i| [(format!("pool-{}", i % 2), "yes".to_owned())].into())
            .collect();
        let mut claims: Vec<(usize, String, String, i64, ResourcePoolClaimSpec)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Claim { ns, pool, cpu_m, mem_mi } => claims.push((
                    ns,
                    format!("c{step}"),
                    format!("uid-{step}"),
                    i64::try_from(step).unwrap(),
                    ResourcePoolClaimSpec { pool: format!("p{pool}"), claim: amounts(cpu_m, Some(mem_mi)) },
                )),
                Op::Edit { index, pool, cpu_m } if !claims.is_empty() => {
                    let i = index % claims.len();
                    claims[i].4 = ResourcePoolClaimSpec { pool: format!("p{pool}"), claim: amounts(cpu_m, None) };
                }
                Op::Release { index } if !claims.is_empty() => {
                    claims.remove(index % claims.len());
                }
                Op::Move { ns } => {
                    let key = format!("pool-{}", ns % 2);
                    if labels[ns].remove(&key).is_none() {
                        labels[ns].insert(key, "yes".to_owned());
                    }
                }
                Op::Resize { pool, cpu_m } => specs[pool] = pool_spec(pool, cpu_m),
                _ => {}
            }
            let before: Vec<[i128; 2]> = ledgers
                .iter()
                .map(|l| [sum(l, RESOURCES[0]), sum(l, RESOURCES[1])])
                .collect();
            let names: Vec<String> = (0..4).map(|i| format!("ns{i}")).collect();
            let namespaces: Vec<NamespaceInput<'_>> = names
                .iter()
                .zip(&labels)
                .map(|(name, labels)| NamespaceInput { name, labels })
                .collect();
            let claim_inputs: Vec<ClaimInput<'_>> = claims
                .iter()
                .map(|(ns, name, uid, at, spec)| ClaimInput {
                    namespace: &names[*ns],
                    name,
                    uid,
                    created: Timestamp::from_second(*at).ok(),
                    spec,
                })
                .collect();
            let pool_names = ["p0", "p1"];
            let pools: Vec<PoolInput<'_>> = (0..2)
                .map(|i| PoolInput { name: pool_names[i], spec: &specs[i], ledger: &ledgers[i] })
                .collect();
            let planned = plan(&pools, &namespaces, &claim_inputs);
            let mut holders: BTreeMap<String, usize> = BTreeMap::new();
            for (i, outcome) in planned.pools.iter().enumerate() {
                for (r, resource) in RESOURCES.iter().enumerate() {
                    let after = sum(&outcome.allocations, resource);
                    let limit = hard(&specs[i], resource);
                    // Within the pool, or (after a shrink) not more than before.
                    prop_assert!(
                        after <= limit || after <= before[i][r],
                        "pool {i} {resource}: {after} granted, hard {limit}, before {}", before[i][r]
                    );
                    // The namespaces' quotas add up to exactly the grants.
                    let quotas: i128 = outcome
                        .quotas
                        .values()
                        .map(|q| exact_nanos(&q[*resource].0).unwrap())
                        .sum();
                    prop_assert_eq!(quotas, after);
                }
                for allocation in &outcome.allocations {
                    prop_assert!(outcome.namespaces.contains(&allocation.namespace));
                    if let Some(uid) = &allocation.uid {
                        *holders.entry(uid.clone()).or_default() += 1;
                    }
                }
                ledgers[i] = outcome.allocations.clone();
            }
            // One claim, one pool.
            prop_assert!(holders.values().all(|n| *n == 1), "{holders:?}");
            for ((_, _), outcome) in &planned.claims {
                if let ClaimOutcome::Bound { pool, .. } = outcome {
                    prop_assert!(pool_names.contains(&pool.as_str()));
                }
            }
        }
    }
}
