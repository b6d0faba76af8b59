#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn tenant(name: &str, owners: serde_json::Value) -> Tenant {
    serde_json::from_value(
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": name}, "spec": {"owners": owners}}),
    )
    .unwrap()
}

fn user(name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: "User".into(),
        name: name.into(),
        namespace: None,
    }
}

#[test]
fn one_answer_brings_the_grant_three_failures_take_it() {
    let mut health = WebhookHealth::default();
    assert!(!health.is_up(), "starts down");
    assert_eq!(health.observe(Probe::Failed), None);
    assert_eq!(health.observe(Probe::Answered), Some(true));
    assert_eq!(health.observe(Probe::Answered), None);
    assert_eq!(health.observe(Probe::Failed), None);
    assert_eq!(health.observe(Probe::Failed), None);
    assert!(health.is_up(), "two failures are not an outage");
    assert_eq!(health.observe(Probe::Answered), None);
    assert_eq!(health.observe(Probe::Failed), None);
    assert_eq!(health.observe(Probe::Failed), None);
    assert_eq!(health.observe(Probe::Failed), Some(false));
    assert_eq!(health.observe(Probe::Failed), None);
    assert_eq!(health.observe(Probe::Answered), Some(true));
    assert_eq!(health.observe(Probe::NotInstalled), Some(false), "at once");
    assert_eq!(health.observe(Probe::NotInstalled), None);
}

#[test]
fn owners_become_sorted_distinct_subjects_and_only_while_up() {
    let tenants = [
        tenant(
            "b",
            json!([{"kind": "User", "name": "zoe"}, {"kind": "Group", "name": "devs"},
                   {"kind": "ServiceAccount", "name": "system:serviceaccount:ci:bot"}]),
        ),
        tenant(
            "a",
            json!([{"kind": "User", "name": "alice"}, {"kind": "User", "name": "zoe"},
                   {"kind": "ServiceAccount", "name": "not-a-service-account"}]),
        ),
    ];
    let (subjects, skipped) = owner_subjects(&tenants);
    let names: Vec<_> = subjects
        .iter()
        .map(|s| {
            format!(
                "{}/{}/{}",
                s.kind,
                s.namespace.as_deref().unwrap_or(""),
                s.name
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "Group//devs",
            "ServiceAccount/ci/bot",
            "User//alice",
            "User//zoe"
        ]
    );
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].tenant, "a");

    let mut health = WebhookHealth::default();
    assert!(desired_subjects(&health, subjects.clone()).is_empty());
    health.observe(Probe::Answered);
    assert_eq!(desired_subjects(&health, subjects.clone()), subjects);

    let mut deleted = tenants[1].clone();
    deleted.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    let (subjects, _) = owner_subjects([&tenants[0], &deleted]);
    assert!(
        !subjects.contains(&user("alice")),
        "a deleted Tenant grants nothing"
    );
}

#[test]
fn the_binding_is_written_only_when_it_differs_and_never_when_foreign() {
    assert!(matches!(
        plan_binding(None, vec![user("a")]),
        BindingAction::Create(b) if b.subjects == Some(vec![user("a")])
            && b.role_ref.name == PROVISIONER_NAME
            && b.metadata.labels.as_ref().unwrap()[LABEL_MANAGED_BY] == MANAGED_BY_VALUE
    ));
    let mut ours = provisioner_binding(vec![user("a")]);
    ours.metadata.resource_version = Some("7".into());
    assert_eq!(
        plan_binding(Some(&ours), vec![user("a")]),
        BindingAction::Keep
    );
    let BindingAction::Update(updated) = plan_binding(Some(&ours), vec![]) else {
        panic!("not an update")
    };
    assert_eq!(updated.subjects, Some(vec![]));
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
    // `subjects` absent and empty are the same.
    let mut empty = provisioner_binding(vec![]);
    empty.subjects = None;
    assert_eq!(plan_binding(Some(&empty), vec![]), BindingAction::Keep);

    let mut foreign = provisioner_binding(vec![]);
    foreign.metadata.labels = None;
    assert!(matches!(
        plan_binding(Some(&foreign), vec![user("a")]),
        BindingAction::Foreign { .. }
    ));
    let mut other_role = provisioner_binding(vec![]);
    other_role.role_ref.name = "cluster-admin".into();
    assert!(matches!(
        plan_binding(Some(&other_role), vec![user("a")]),
        BindingAction::Foreign { reason } if reason.contains("cluster-admin")
    ));
}

fn config(client: serde_json::Value) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({"metadata": {"name": "tenantplane-namespaces"},
        "webhooks": [{"name": "namespaces.tenantplane.io", "clientConfig": client,
            "admissionReviewVersions": ["v1"], "sideEffects": "None"}]}))
    .unwrap()
}

#[test]
fn the_probe_target_comes_from_the_client_config() {
    let target = |client| probe_target(&config(client), "namespaces.tenantplane.io");
    assert_eq!(
        target(json!({"url": "https://127.0.0.1:8443/namespaces", "caBundle": "UEVN"})),
        Ok(ProbeTarget {
            host: "127.0.0.1".into(),
            port: 8443,
            ca_pem: b"PEM".to_vec()
        })
    );
    let target_of = |client| target(client).map(|t| (t.host, t.port));
    assert_eq!(
        target_of(json!({"url": "https://[::1]:9443", "caBundle": "UEVN"})),
        Ok(("::1".into(), 9443))
    );
    assert_eq!(
        target_of(json!({"url": "https://webhook.example/x", "caBundle": "UEVN"})),
        Ok(("webhook.example".into(), 443))
    );
    assert_eq!(
        target_of(json!({"service": {"namespace": "tenantplane-system",
            "name": "tenantplane-webhook", "path": "/namespaces"}, "caBundle": "UEVN"})),
        Ok(("tenantplane-webhook.tenantplane-system.svc".into(), 443))
    );
    assert_eq!(
        target_of(
            json!({"service": {"namespace": "n", "name": "w", "port": 8443},
            "caBundle": "UEVN"})
        ),
        Ok(("w.n.svc".into(), 8443))
    );
    for url in [
        "http://h:80",
        "https://",
        "https://:443",
        "https://h:0",
        "https://h:99999",
        "https://u@h",
        "https://[::1",
        "https://[::1]x",
    ] {
        assert!(
            matches!(
                target(json!({"url": url, "caBundle": "UEVN"})),
                Err(ProbeTargetError::BadUrl { .. })
            ),
            "{url}"
        );
    }
    assert!(matches!(
        target(json!({"url": "https://h"})),
        Err(ProbeTargetError::NoCaBundle { .. })
    ));
    assert!(matches!(
        probe_target(
            &config(json!({"url": "https://h", "caBundle": "UEVN"})),
            "other"
        ),
        Err(ProbeTargetError::NoWebhook { .. })
    ));
}

proptest! {
    /// The subjects do not depend on the order of Tenants or owners, so
    /// reordering never rewrites the binding.
    #[test]
    fn subjects_ignore_order(names in proptest::collection::vec("[a-c]{1,2}", 0..8), split in 0usize..8) {
        let owners: Vec<_> = names.iter().map(|n| json!({"kind": "User", "name": n})).collect();
        let split = split.min(owners.len());
        let forward = [tenant("x", json!(owners[..split])), tenant("y", json!(owners[split..]))];
        let mut reversed_owners = owners.clone();
        reversed_owners.reverse();
        let backward = [tenant("y", json!(reversed_owners))];
        let (a, _) = owner_subjects(&forward);
        let (b, _) = owner_subjects(&backward);
        prop_assert_eq!(&a, &b);
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        prop_assert_eq!(a.iter().map(|s| s.name.clone()).collect::<Vec<_>>(), distinct);
    }
}
