use super::*;
use k8s_openapi::api::core::v1::ResourceQuotaSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn amounts(pairs: &[(&str, &str)]) -> ResourceAmounts {
    pairs
        .iter()
        .map(|(r, q)| ((*r).to_owned(), Quantity((*q).to_owned())))
        .collect()
}

fn pool_spec(hard: &[(&str, &str)], defaults: &[(&str, &str)]) -> ResourcePoolSpec {
    ResourcePoolSpec {
        namespace_selector: LabelSelector {
            match_labels: Some([("pool".to_owned(), "p".to_owned())].into()),
            ..LabelSelector::default()
        },
        quota: ResourceQuotaSpec {
            hard: Some(amounts(hard)),
            ..ResourceQuotaSpec::default()
        },
        defaults: amounts(defaults),
    }
}

fn claim_spec(pool: &str, claim: &[(&str, &str)]) -> ResourcePoolClaimSpec {
    ResourcePoolClaimSpec {
        pool: pool.to_owned(),
        claim: amounts(claim),
    }
}

struct World {
    spec: ResourcePoolSpec,
    ledger: Vec<PoolAllocation>,
    labels: BTreeMap<String, String>,
    namespaces: Vec<String>,
    claims: Vec<(String, String, String, i64, ResourcePoolClaimSpec)>,
}

impl World {
    fn new(spec: ResourcePoolSpec, namespaces: &[&str]) -> Self {
        Self {
            spec,
            ledger: Vec::new(),
            labels: [("pool".to_owned(), "p".to_owned())].into(),
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            claims: Vec::new(),
        }
    }

    fn claim(&mut self, ns: &str, name: &str, at: i64, spec: ResourcePoolClaimSpec) {
        let uid = format!("uid-{ns}-{name}-{at}");
        self.claims
            .push((ns.to_owned(), name.to_owned(), uid, at, spec));
    }

    /// Plans, then stores the ledger as the controller would.
    fn reconcile(&mut self) -> Plan {
        let empty = BTreeMap::new();
        let namespaces: Vec<NamespaceInput<'_>> = self
            .namespaces
            .iter()
            .map(|n| NamespaceInput {
                name: n,
                labels: if n.starts_with("other") {
                    &empty
                } else {
                    &self.labels
                },
            })
            .collect();
        let claims: Vec<ClaimInput<'_>> = self
            .claims
            .iter()
            .map(|(ns, name, uid, at, spec)| ClaimInput {
                namespace: ns,
                name,
                uid,
                created: Timestamp::from_second(*at).ok(),
                spec,
            })
            .collect();
        let pools = [PoolInput {
            name: "p",
            spec: &self.spec,
            ledger: &self.ledger,
        }];
        let plan = plan(&pools, &namespaces, &claims);
        self.ledger = plan.pools[0].allocations.clone();
        plan
    }
}

fn outcome<'a>(plan: &'a Plan, ns: &str, name: &str) -> &'a ClaimOutcome {
    &plan.claims[&(ns.to_owned(), name.to_owned())]
}

fn reason(plan: &Plan, ns: &str, name: &str) -> Option<PendingReason> {
    match outcome(plan, ns, name) {
        ClaimOutcome::Bound { .. } => None,
        ClaimOutcome::Pending { reason, .. } => Some(*reason),
    }
}

#[test]
fn claims_bind_oldest_first_while_there_is_room() {
    let mut world = World::new(
        pool_spec(&[("cpu", "4"), ("memory", "4Gi")], &[]),
        &["a", "b"],
    );
    world.claim("b", "late", 30, claim_spec("p", &[("cpu", "2")]));
    world.claim(
        "a",
        "first",
        10,
        claim_spec("p", &[("cpu", "1500m"), ("memory", "1Gi")]),
    );
    world.claim("a", "second", 20, claim_spec("p", &[("cpu", "2")]));
    let plan = world.reconcile();
    assert_eq!(reason(&plan, "a", "first"), None);
    assert_eq!(reason(&plan, "a", "second"), None);
    assert_eq!(
        reason(&plan, "b", "late"),
        Some(PendingReason::PoolExhausted)
    );
    let ClaimOutcome::Pending { message, .. } = outcome(&plan, "b", "late") else {
        panic!()
    };
    assert_eq!(message, "cpu: 2 requested, 500m of 4 left");
    let pool = &plan.pools[0];
    assert_eq!(
        pool.allocated,
        amounts(&[("cpu", "3500m"), ("memory", "1073741824")])
    );
    assert_eq!(
        pool.quotas["a"],
        amounts(&[("cpu", "3500m"), ("memory", "1073741824")])
    );
    assert_eq!(pool.quotas["b"], amounts(&[("cpu", "0"), ("memory", "0")]));

    // Releasing one claim lets the waiting one in.
    world.claims.retain(|c| c.1 != "second");
    let plan = world.reconcile();
    assert_eq!(reason(&plan, "b", "late"), None);
    assert_eq!(
        plan.pools[0].quotas["b"],
        amounts(&[("cpu", "2"), ("memory", "0")])
    );
}

#[test]
fn a_bound_claim_keeps_what_it_was_bound_with() {
    let mut world = World::new(pool_spec(&[("cpu", "2")], &[]), &["a"]);
    world.claim("a", "c", 1, claim_spec("p", &[("cpu", "1")]));
    world.reconcile();
    // Edited to take everything, then pointed at another pool: no effect.
    world.claims[0].4 = claim_spec("elsewhere", &[("cpu", "100")]);
    let plan = world.reconcile();
    assert_eq!(
        outcome(&plan, "a", "c"),
        &ClaimOutcome::Bound {
            pool: "p".into(),
            resources: amounts(&[("cpu", "1")])
        }
    );
    assert_eq!(plan.pools[0].quotas["a"], amounts(&[("cpu", "1")]));
}

#[test]
fn defaults_count_against_the_pool() {
    let mut world = World::new(
        pool_spec(&[("pods", "5")], &[("pods", "2")]),
        &["a", "b", "c"],
    );
    world.claim("c", "more", 1, claim_spec("p", &[("pods", "1")]));
    let plan = world.reconcile();
    let pool = &plan.pools[0];
    // a and b get defaults (4 of 5); c cannot get 2 more, but its claim of 1 fits.
    assert_eq!(pool.quotas["a"], amounts(&[("pods", "2")]));
    assert_eq!(pool.quotas["b"], amounts(&[("pods", "2")]));
    assert_eq!(pool.quotas["c"], amounts(&[("pods", "1")]));
    assert_eq!(reason(&plan, "c", "more"), None);
    assert_eq!(pool.allocated, amounts(&[("pods", "5")]));
}

#[test]
fn unselected_unknown_and_invalid_claims_wait_with_a_reason() {
    let mut world = World::new(
        pool_spec(&[("cpu", "2")], &[]),
        &["a", "other", "kube-system"],
    );
    world.claim("other", "x", 1, claim_spec("p", &[("cpu", "1")]));
    world.claim("a", "gpu", 2, claim_spec("p", &[("nvidia.com/gpu", "1")]));
    world.claim("a", "bad", 3, claim_spec("p", &[("cpu", "lots")]));
    world.claim("a", "lost", 4, claim_spec("nope", &[("cpu", "1")]));
    let plan = world.reconcile();
    assert_eq!(
        reason(&plan, "other", "x"),
        Some(PendingReason::NamespaceNotSelected)
    );
    assert_eq!(
        reason(&plan, "a", "gpu"),
        Some(PendingReason::UnknownResource)
    );
    assert_eq!(
        reason(&plan, "a", "bad"),
        Some(PendingReason::InvalidQuantity)
    );
    assert_eq!(
        reason(&plan, "a", "lost"),
        Some(PendingReason::PoolNotFound)
    );
    assert_eq!(
        plan.pools[0].namespaces,
        ["a"],
        "system namespaces never join a pool"
    );
}

#[test]
fn a_shrunk_pool_keeps_grants_but_binds_nothing_new() {
    let mut world = World::new(pool_spec(&[("cpu", "4")], &[]), &["a"]);
    world.claim("a", "big", 1, claim_spec("p", &[("cpu", "3")]));
    world.reconcile();
    world.spec = pool_spec(&[("cpu", "2")], &[]);
    world.claim("a", "small", 2, claim_spec("p", &[("cpu", "1m")]));
    let plan = world.reconcile();
    assert_eq!(reason(&plan, "a", "big"), None);
    assert_eq!(
        reason(&plan, "a", "small"),
        Some(PendingReason::PoolOvercommitted)
    );
    assert_eq!(plan.pools[0].overcommitted, ["cpu: 3 granted, pool has 2"]);
}

#[test]
fn a_namespace_leaving_the_pool_releases_its_grants() {
    let mut world = World::new(pool_spec(&[("cpu", "2")], &[]), &["a", "b"]);
    world.claim("a", "c", 1, claim_spec("p", &[("cpu", "2")]));
    world.claim("b", "c", 2, claim_spec("p", &[("cpu", "2")]));
    world.reconcile();
    world.namespaces.retain(|n| n != "a");
    let plan = world.reconcile();
    assert_eq!(reason(&plan, "b", "c"), None);
    assert!(!plan.pools[0].quotas.contains_key("a"));
}

#[test]
fn an_invalid_pool_changes_nothing() {
    let mut world = World::new(pool_spec(&[("cpu", "2")], &[]), &["a"]);
    world.claim("a", "c", 1, claim_spec("p", &[("cpu", "1")]));
    world.reconcile();
    let before = world.ledger.clone();
    world.spec.quota.hard = Some(amounts(&[("cpu", "two")]));
    let plan = world.reconcile();
    assert!(plan.pools[0].problem.is_some());
    assert_eq!(world.ledger, before);
    assert_eq!(reason(&plan, "a", "c"), None);
}

#[test]
fn shrinking_below_the_grants_is_a_violation() {
    let allocated = amounts(&[("cpu", "3"), ("pods", "0")]);
    assert!(shrink_violations(&amounts(&[("cpu", "3")]), &allocated).is_empty());
    assert_eq!(
        shrink_violations(&amounts(&[("cpu", "2999m")]), &allocated),
        ["cpu cannot shrink to 2999m: 3 of it is granted"]
    );
    assert_eq!(
        shrink_violations(&amounts(&[]), &allocated),
        ["cpu cannot leave the pool: 3 of it is granted"]
    );
}

#[test]
fn specs_and_updates_are_validated() {
    let fields = |v: Vec<Violation>| v.into_iter().map(|v| v.field).collect::<Vec<_>>();
    assert!(pool_violations(&pool_spec(&[("cpu", "2")], &[("cpu", "1")])).is_empty());
    assert_eq!(
        fields(pool_violations(&pool_spec(
            &[("cpu", "-2")],
            &[("gpu", "1")]
        ))),
        ["spec.quota.hard[cpu]", "spec.defaults[gpu]"]
    );
    assert_eq!(
        fields(pool_violations(&pool_spec(&[], &[]))),
        ["spec.quota.hard"]
    );
    let granted = amounts(&[("cpu", "2")]);
    let smaller = pool_spec(&[("cpu", "1")], &[]);
    assert_eq!(
        fields(pool_update_violations(&smaller, Some(&granted))),
        ["spec.quota.hard"]
    );
    assert!(pool_update_violations(&smaller, None).is_empty());

    let old = claim_spec("p", &[("cpu", "1")]);
    assert!(claim_violations(&old).is_empty());
    assert_eq!(
        fields(claim_violations(&claim_spec("p", &[]))),
        ["spec.claim"]
    );
    let moved = claim_spec("q", &[("cpu", "2")]);
    assert!(claim_update_violations(&old, None, &moved).is_empty());
    assert_eq!(
        fields(claim_update_violations(&old, Some("p"), &moved)),
        ["spec.pool", "spec.claim"]
    );
    assert!(claim_update_violations(&old, Some("p"), &old).is_empty());
}

#[test]
fn quota_names_fit_a_dns_subdomain() {
    assert_eq!(quota_name("team-a"), "tenantplane-pool-team-a");
    let long = "a".repeat(253);
    let name = quota_name(&long);
    assert!(name.len() <= 253, "{}", name.len());
    assert_ne!(quota_name(&long), quota_name(&"a".repeat(252)));
}
