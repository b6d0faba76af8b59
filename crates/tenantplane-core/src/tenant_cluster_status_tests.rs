use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;

const GENERATION: Option<i64> = Some(7);

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

fn kind(api_version: &str, kind: &str) -> SyncedResource {
    SyncedResource {
        api_version: api_version.into(),
        kind: kind.into(),
    }
}

/// An engine that has synced every kind.
fn synced_engine() -> EngineReport {
    EngineReport {
        synced: true,
        running_kinds: vec![kind("v1", "ConfigMap")],
        endpoint: Some("https://acme.team-a.svc:443".into()),
        ..EngineReport::default()
    }
}

/// An engine still syncing: one kind has not finished a pass.
fn syncing_engine() -> EngineReport {
    EngineReport {
        synced: false,
        problems: vec!["v1/Secret: first pass".into(), "v1/Pod: first pass".into()],
        ..synced_engine()
    }
}

fn running(engine: EngineReport) -> Observation {
    Observation::Running {
        engine,
        external_endpoint: None,
    }
}

fn blocked(reason: &'static str) -> Observation {
    Observation::Blocked(Blocker::new(reason, format!("{reason} message")))
}

/// Running, exposed outside the host.
fn exposed(engine: EngineReport) -> Observation {
    Observation::Running {
        engine,
        external_endpoint: Some("203.0.113.7:6443".into()),
    }
}

/// A shared TenantCluster at [`GENERATION`] whose isolation was not read.
fn input(previous: Option<&TenantClusterStatus>, observation: Observation) -> StatusInput<'_> {
    StatusInput {
        previous,
        generation: GENERATION,
        mode: ClusterMode::Shared,
        isolation: None,
        observation,
    }
}

fn decide_at(
    previous: Option<&TenantClusterStatus>,
    observation: Observation,
    now: Timestamp,
) -> StatusDecision {
    decide(input(previous, observation), now)
}

fn condition<'a>(status: &'a TenantClusterStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The condition's status, reason and message.
fn verdict(status: &TenantClusterStatus, type_: &str) -> Option<(String, String, String)> {
    said(condition(status, type_))
}

fn said(condition: Option<&Condition>) -> Option<(String, String, String)> {
    condition.map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn says(ok: &str, reason: &str, message: &str) -> Option<(String, String, String)> {
    Some((ok.into(), reason.into(), message.into()))
}

#[test]
fn a_blocker_sets_ready_and_synced_false_degrades_and_looks_again_in_10s() {
    let decision = decide_at(None, blocked("SyncPolicyNotFound"), at(0));
    let status = &decision.status;
    assert_eq!(decision.requeue, Duration::from_secs(10));
    assert_eq!(status.phase, Some(TenantClusterPhase::Degraded));
    for type_ in ["Ready", "Synced"] {
        assert_eq!(
            verdict(status, type_),
            says("False", "SyncPolicyNotFound", "SyncPolicyNotFound message")
        );
    }
    assert_eq!(status.observed_generation, GENERATION);
    assert_eq!(
        condition(status, "Ready").unwrap().observed_generation,
        GENERATION
    );
    // Only what was decided: no endpoint, no service CIDR or conflict verdict.
    assert_eq!(status.endpoint, None);
    assert_eq!(condition(status, SERVICE_CIDR_CONDITION), None);
    assert_eq!(condition(status, CONFLICTED_CONDITION), None);
}

#[test]
fn a_control_plane_coming_up_is_provisioning() {
    let observation = Observation::Blocked(Blocker::provisioning("waiting for the pod".into()));
    let decision = decide_at(None, observation, at(0));
    assert_eq!(
        decision.status.phase,
        Some(TenantClusterPhase::Provisioning)
    );
    assert_eq!(
        verdict(&decision.status, "Synced"),
        says("False", "Provisioning", "waiting for the pod")
    );
    assert_eq!(decision.requeue, Duration::from_secs(10));
}

#[test]
fn only_an_unreachable_tenant_keeps_its_engine() {
    assert!(Blocker::tenant_unreachable("no answer".into()).keeps_engine());
    assert_eq!(
        Blocker::tenant_unreachable("no answer".into()).reason,
        "TenantUnreachable"
    );
    assert!(!Blocker::provisioning("m".into()).keeps_engine());
    assert!(!Blocker::new("IsolationNotApplied", "m".into()).keeps_engine());
    assert!(!Blocker::new("InvalidKubeconfig", "m".into()).keeps_engine());
}

#[test]
fn a_blocker_keeps_the_endpoints_and_the_synced_kinds() {
    let before = decide_at(None, exposed(synced_engine()), at(0)).status;
    let after = decide_at(Some(&before), blocked("TenantUnreachable"), at(5)).status;
    assert_eq!(after.endpoint, before.endpoint);
    assert_eq!(after.external_endpoint.as_deref(), Some("203.0.113.7:6443"));
    assert_eq!(after.synced_resources, [kind("v1", "ConfigMap")]);
    assert_eq!(after.phase, Some(TenantClusterPhase::Degraded));
}

#[test]
fn a_synced_engine_is_ready_and_looks_again_in_30s() {
    let decision = decide_at(None, exposed(synced_engine()), at(0));
    let status = &decision.status;
    assert_eq!(decision.requeue, Duration::from_secs(30));
    assert_eq!(status.phase, Some(TenantClusterPhase::Ready));
    assert_eq!(
        verdict(status, "Ready"),
        says(
            "True",
            "TenantReachable",
            "the tenant API server answers and its engine runs"
        )
    );
    assert_eq!(
        verdict(status, "Synced"),
        says("True", "Synced", "every kind of the SyncPolicy is in sync")
    );
    assert_eq!(
        status.endpoint.as_deref(),
        Some("https://acme.team-a.svc:443")
    );
    assert_eq!(
        status.external_endpoint.as_deref(),
        Some("203.0.113.7:6443")
    );
    assert_eq!(status.observed_generation, GENERATION);
}

#[test]
fn an_external_endpoint_no_longer_exposed_is_cleared() {
    let before = decide_at(None, exposed(synced_engine()), at(0)).status;
    let after = decide_at(Some(&before), running(synced_engine()), at(5)).status;
    assert_eq!(after.external_endpoint, None);
}

#[test]
fn a_syncing_engine_is_provisioning_says_its_problems_and_looks_again_in_2s() {
    let decision = decide_at(None, running(syncing_engine()), at(0));
    assert_eq!(decision.requeue, Duration::from_secs(2));
    assert_eq!(
        decision.status.phase,
        Some(TenantClusterPhase::Provisioning)
    );
    assert_eq!(
        verdict(&decision.status, "Synced"),
        says(
            "False",
            "Syncing",
            "v1/Secret: first pass; v1/Pod: first pass"
        )
    );
    // Reachable even though not synced.
    assert_eq!(condition(&decision.status, "Ready").unwrap().status, "True");
}

#[test]
fn an_unavailable_kind_degrades() {
    let engine = EngineReport {
        kind_unavailable: true,
        problems: vec!["example.com/v1/Gadget: no such kind".into()],
        ..syncing_engine()
    };
    let decision = decide_at(None, running(engine), at(0));
    assert_eq!(decision.status.phase, Some(TenantClusterPhase::Degraded));
    assert_eq!(
        verdict(&decision.status, "Synced"),
        says(
            "False",
            "KindUnavailable",
            "example.com/v1/Gadget: no such kind"
        )
    );
    assert_eq!(decision.requeue, Duration::from_secs(2));
}

#[test]
fn a_restarted_engine_keeps_the_last_synced_verdict_and_phase_until_its_first_pass() {
    let before = decide_at(None, running(synced_engine()), at(0)).status;
    let restarted = EngineReport {
        starting: true,
        kind_unavailable: true,
        ..syncing_engine()
    };
    let decision = decide_at(Some(&before), running(restarted), at(5));
    assert_eq!(
        condition(&decision.status, "Synced"),
        condition(&before, "Synced"),
        "not even the generation or the transition time moves"
    );
    assert_eq!(decision.status.phase, Some(TenantClusterPhase::Ready));
    // Not synced yet, so it is looked at again soon.
    assert_eq!(decision.requeue, Duration::from_secs(2));
}

#[test]
fn a_starting_engine_that_was_not_synced_says_so() {
    let before = decide_at(None, blocked("TenantUnreachable"), at(0)).status;
    let starting = EngineReport {
        starting: true,
        ..syncing_engine()
    };
    let status = decide_at(Some(&before), running(starting), at(5)).status;
    assert_eq!(condition(&status, "Synced").unwrap().reason, "Syncing");
    assert_eq!(status.phase, Some(TenantClusterPhase::Provisioning));
}

/// The condition `type_` after each of four passes, 5 s apart: a clean engine,
/// one that reports `problem`, then a clean one twice.
fn through_a_problem(type_: &str, problem: EngineReport) -> [Option<Condition>; 4] {
    let engines = [synced_engine(), problem, synced_engine(), synced_engine()];
    let mut status: Option<TenantClusterStatus> = None;
    let mut second = 0;
    engines.map(|engine| {
        let next = decide_at(status.as_ref(), running(engine), at(second)).status;
        second += 5;
        let found = condition(&next, type_).cloned();
        status = Some(next);
        found
    })
}

/// ServiceCIDR: False on a mismatch, True once gone. Conflicted: True while a
/// conflict is left, False once settled. Neither appears before its first problem,
/// and neither goes away (or moves) after.
#[test]
fn service_cidr_and_conflicted_appear_with_a_problem_and_stay_once_it_is_gone() {
    let cases = [
        (
            SERVICE_CIDR_CONDITION,
            EngineReport {
                service_cidr_mismatch: Some("the problem".into()),
                ..synced_engine()
            },
            ("False", "ServiceCIDRMismatch"),
            (
                "True",
                "ServiceCIDRMatches",
                "every synced Service carries its host copy's ClusterIP",
            ),
        ),
        (
            CONFLICTED_CONDITION,
            EngineReport {
                conflicts: Some("the problem".into()),
                ..synced_engine()
            },
            ("True", "Conflict"),
            (
                "False",
                "NoConflicts",
                "every bidirectional object agrees with its host copy",
            ),
        ),
    ];
    for (type_, problem, (status, reason), (gone_status, gone_reason, gone_message)) in cases {
        let [clean, problem, gone, held] = through_a_problem(type_, problem);
        assert_eq!(clean, None, "{type_}");
        assert_eq!(
            said(problem.as_ref()),
            says(status, reason, "the problem"),
            "{type_}"
        );
        assert_eq!(
            said(gone.as_ref()),
            says(gone_status, gone_reason, gone_message),
            "{type_}"
        );
        assert_eq!(held, gone, "{type_}");
    }
}

#[test]
fn a_blocker_leaves_the_service_cidr_and_conflicted_conditions_alone() {
    let engine = EngineReport {
        service_cidr_mismatch: Some("refused".into()),
        conflicts: Some("ConfigMap shop/app".into()),
        ..synced_engine()
    };
    let before = decide_at(None, running(engine), at(0)).status;
    let after = decide_at(Some(&before), blocked("TenantUnreachable"), at(5)).status;
    for type_ in [SERVICE_CIDR_CONDITION, CONFLICTED_CONDITION] {
        assert_eq!(condition(&after, type_), condition(&before, type_));
    }
}

#[test]
fn synced_kinds_accumulate_sorted_and_once_each() {
    let first = EngineReport {
        running_kinds: vec![kind("v1", "Service"), kind("apps/v1", "Deployment")],
        ..synced_engine()
    };
    let before = decide_at(None, running(first), at(0)).status;
    assert_eq!(
        before.synced_resources,
        [kind("apps/v1", "Deployment"), kind("v1", "Service")]
    );
    // Deployment left the policy; its host copies still need removing one day.
    let second = EngineReport {
        running_kinds: vec![kind("v1", "Service"), kind("v1", "ConfigMap")],
        ..synced_engine()
    };
    let after = decide_at(Some(&before), running(second), at(5)).status;
    assert_eq!(
        after.synced_resources,
        [
            kind("apps/v1", "Deployment"),
            kind("v1", "ConfigMap"),
            kind("v1", "Service"),
        ]
    );
}

#[test]
fn the_transition_time_holds_while_a_condition_holds_and_moves_when_it_flips() {
    let first = decide_at(None, running(synced_engine()), at(0)).status;
    let ready =
        |s: &TenantClusterStatus| condition(s, "Ready").unwrap().last_transition_time.clone();
    assert_eq!(ready(&first), Time(at(0)));
    let second = decide_at(Some(&first), running(syncing_engine()), at(5)).status;
    assert_eq!(ready(&second), Time(at(0)));
    assert_eq!(
        condition(&second, "Synced").unwrap().last_transition_time,
        Time(at(5))
    );
    let third = decide_at(Some(&second), blocked("TenantUnreachable"), at(10)).status;
    assert_eq!(ready(&third), Time(at(10)));
    assert_eq!(
        condition(&third, "Synced").unwrap().last_transition_time,
        Time(at(5))
    );
}

#[test]
fn deciding_again_from_the_written_status_changes_nothing() {
    let engine = EngineReport {
        service_cidr_mismatch: Some("refused".into()),
        conflicts: Some("ConfigMap shop/app".into()),
        ..syncing_engine()
    };
    let first = decide_at(None, running(engine.clone()), at(0));
    let again = decide_at(Some(&first.status), running(engine), at(60));
    assert_eq!(again, first);
    let blocked_once = decide_at(Some(&first.status), blocked("InvalidKubeconfig"), at(70));
    let blocked_again = decide_at(
        Some(&blocked_once.status),
        blocked("InvalidKubeconfig"),
        at(80),
    );
    assert_eq!(blocked_again, blocked_once);
}

#[test]
fn conditions_are_sorted_by_type() {
    let engine = EngineReport {
        service_cidr_mismatch: Some("refused".into()),
        conflicts: Some("ConfigMap shop/app".into()),
        ..synced_engine()
    };
    let isolation = IsolationVerdict {
        applied: true,
        reason: "Applied",
        message: "m".into(),
    };
    let with_isolation = StatusInput {
        isolation: Some(&isolation),
        ..input(None, running(engine))
    };
    let status = decide(with_isolation, at(0)).status;
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        [
            "Conflicted",
            "IsolationApplied",
            "ModeSupported",
            "Ready",
            "ServiceCIDR",
            "Synced"
        ]
    );
}

#[test]
fn the_isolation_verdict_is_set_when_known_and_kept_otherwise() {
    let isolation = IsolationVerdict {
        applied: false,
        reason: "IsolationNotApplied",
        message: "NetworkPolicy refused".into(),
    };
    let earlier = StatusInput {
        generation: Some(1),
        isolation: Some(&isolation),
        ..input(None, blocked("IsolationNotApplied"))
    };
    let known = decide(earlier, at(0)).status;
    assert_eq!(
        verdict(&known, "IsolationApplied"),
        says("False", "IsolationNotApplied", "NetworkPolicy refused")
    );
    // No verdict this time (the profile was not read): the last one stays as it
    // was, its generation too.
    let kept = decide_at(Some(&known), blocked("IsolationProfileNotFound"), at(5)).status;
    assert_eq!(
        condition(&kept, "IsolationApplied"),
        condition(&known, "IsolationApplied")
    );
    assert_eq!(
        condition(&kept, "IsolationApplied")
            .unwrap()
            .observed_generation,
        Some(1)
    );
    assert_eq!(kept.observed_generation, GENERATION);
}

#[test]
fn only_the_shared_mode_is_supported() {
    let with_mode = |mode| {
        let input = StatusInput {
            mode,
            ..input(None, running(synced_engine()))
        };
        decide(input, at(0)).status
    };
    assert_eq!(
        verdict(&with_mode(ClusterMode::Shared), "ModeSupported"),
        says("True", "Shared", "mode shared is implemented")
    );
    for (mode, name) in [
        (ClusterMode::Dedicated, "dedicated"),
        (ClusterMode::Private, "private"),
    ] {
        let message =
            format!("mode {name} is not implemented yet; the tenant is reconciled as shared");
        assert_eq!(
            verdict(&with_mode(mode), "ModeSupported"),
            says("False", "ReconciledAsShared", &message)
        );
    }
}
