use super::*;

#[test]
fn the_strictest_level_of_the_namespace_wins() {
    use PodSecurityLevel::{Baseline, Privileged, Restricted};
    assert_eq!(strictest(Privileged, []), Privileged);
    assert_eq!(strictest(Privileged, [Baseline, Privileged]), Baseline);
    assert_eq!(strictest(Baseline, [Restricted, Privileged]), Restricted);
    assert_eq!(strictest(Restricted, [Privileged]), Restricted);
}

fn outcome(actions: &[(&'static str, &str, ObjectAction)]) -> IsolationOutcome {
    let objects: Vec<ObjectResult> = actions
        .iter()
        .map(|(kind, name, action)| ObjectResult {
            kind,
            name: (*name).to_owned(),
            action: *action,
        })
        .collect();
    IsolationOutcome {
        writes: objects.iter().filter(|o| o.action.is_write()).count(),
        objects,
        pod_security: "restricted".into(),
    }
}

#[test]
fn the_summary_names_what_is_in_place_and_is_stable_across_writes() {
    let first = outcome(&[
        ("Namespace", "team-dev", ObjectAction::Updated),
        (
            "NetworkPolicy",
            "tenantplane-isolation",
            ObjectAction::Created,
        ),
        ("ResourceQuota", "tenantplane-quota", ObjectAction::Absent),
        ("LimitRange", "tenantplane-limits", ObjectAction::Created),
    ]);
    let second = outcome(&[
        ("Namespace", "team-dev", ObjectAction::Unchanged),
        (
            "NetworkPolicy",
            "tenantplane-isolation",
            ObjectAction::Unchanged,
        ),
        ("ResourceQuota", "tenantplane-quota", ObjectAction::Absent),
        ("LimitRange", "tenantplane-limits", ObjectAction::Unchanged),
    ]);
    assert_eq!(first.writes, 3);
    assert_eq!(second.writes, 0);
    assert_eq!(
        first.summary(),
        "Pod Security restricted; NetworkPolicy tenantplane-isolation, LimitRange tenantplane-limits"
    );
    assert_eq!(first.summary(), second.summary());
    assert!(first.is_applied());
    assert_eq!(first.reason(), "Applied");
}

#[test]
fn a_conflict_is_named_and_is_not_applied() {
    let o = outcome(&[
        ("Namespace", "team-dev", ObjectAction::Unchanged),
        (
            "NetworkPolicy",
            "tenantplane-isolation",
            ObjectAction::Conflict,
        ),
    ]);
    assert!(!o.is_applied());
    assert_eq!(o.reason(), "ForeignObject");
    assert!(
        o.summary()
            .starts_with("NetworkPolicy tenantplane-isolation exist(s) but are not"),
        "{}",
        o.summary()
    );
}
