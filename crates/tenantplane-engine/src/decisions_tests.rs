use tenantplane_api::{HostTarget, TenantObjectRef};

use super::*;

fn record(action: DecisionAction, name: &str) -> DecisionRecord {
    DecisionRecord {
        action,
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        tenant: TenantObjectRef {
            namespace: "default".into(),
            name: name.into(),
            uid: None,
        },
        host: HostTarget {
            namespace: "team-dev".into(),
            name: format!("{name}-x-default-x-dev"),
        },
        reason: "synced".into(),
        time: Time(Timestamp::now()),
    }
}

#[test]
fn each_host_object_has_its_own_event() {
    let a = decision_event(&record(DecisionAction::Create, "a"));
    let b = decision_event(&record(DecisionAction::Create, "b"));
    let related = a.secondary.clone().unwrap();
    assert_eq!(related.name.as_deref(), Some("a-x-default-x-dev"));
    assert_eq!(related.namespace.as_deref(), Some("team-dev"));
    assert_eq!(related.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(related.api_version.as_deref(), Some("v1"));
    // The recorder's series key: type, reason, action, regarding, related.
    assert_eq!(
        (a.type_, &a.reason, &a.action),
        (b.type_, &b.reason, &b.action)
    );
    assert_ne!(
        a.secondary, b.secondary,
        "two objects would share one Event"
    );
    assert!(
        a.note
            .unwrap()
            .contains("default/a -> team-dev/a-x-default-x-dev")
    );
}

#[test]
fn a_delete_is_a_warning() {
    let delete = decision_event(&record(DecisionAction::Delete, "a"));
    assert_eq!(delete.type_, EventType::Warning);
    assert_eq!(delete.reason, "Delete");
    let create = decision_event(&record(DecisionAction::Create, "a"));
    assert_eq!(create.type_, EventType::Normal);
}
