use super::*;
use crate::metadata::{
    ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE,
    ANNOTATION_VIRTUAL_UID, LABEL_TENANT,
};
use crate::naming::{SourceName, host_name};

fn target() -> EventTarget {
    EventTarget {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: "shop".into(),
        name: "web".into(),
        uid: Some("t-uid".into()),
        host_namespace: "team-dev".into(),
        host_name: "web-x-shop-x-dev".into(),
        node: Some((
            "secret-rack-7".into(),
            "tenantplane-0123456789abcdef".into(),
        )),
    }
}

fn host_event(uid: &str, count: i64, message: &str) -> Value {
    json!({"metadata": {"name": "web-x-shop-x-dev.1", "namespace": "team-dev", "uid": uid},
           "involvedObject": {"kind": "Pod", "namespace": "team-dev", "name": "web-x-shop-x-dev", "uid": "h-uid",
                              "fieldPath": "spec.containers{app}"},
           "type": "Warning", "reason": "BackOff", "message": message, "count": count,
           "source": {"component": "kubelet", "host": "secret-rack-7"},
           "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"})
}

fn service_kind() -> SyncedKind {
    SyncedKind {
        api_version: "v1".into(),
        group_kind: GroupKind::new("", "Service"),
    }
}

/// The host copy tenantplane makes of `kind` `ns/name` of `tenant`, in `team-dev`.
fn host_copy(kind: &str, tenant: &str, ns: &str, name: &str) -> Value {
    let host = host_name(&SourceName {
        name,
        virtual_namespace: ns,
        tenant,
    })
    .name;
    json!({"metadata": {"name": host, "namespace": "team-dev", "uid": "h-svc-uid",
        "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: tenant},
        "annotations": {ANNOTATION_VIRTUAL_NAME: name, ANNOTATION_VIRTUAL_NAMESPACE: ns,
            ANNOTATION_VIRTUAL_UID: "t-svc-uid",
            ANNOTATION_VIRTUAL_GROUP_KIND: GroupKind::new("", kind).to_annotation_value()}}})
}

/// A host Event about host object `kind` `name` in `team-dev`.
fn event_about(kind: &str, name: &str, uid: &str, message: &str) -> Value {
    json!({"metadata": {"name": format!("{name}.1"), "namespace": "team-dev", "uid": "e-svc"},
           "involvedObject": {"apiVersion": "v1", "kind": kind, "namespace": "team-dev", "name": name, "uid": uid},
           "type": "Warning", "reason": "SyncLoadBalancerFailed", "message": message, "count": 1,
           "source": {"component": "service-controller"},
           "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"})
}

#[test]
fn an_event_is_matched_to_its_host_object_only() {
    let e = host_event("e1", 1, "x");
    assert!(is_about(&e, "team-dev", "web-x-shop-x-dev", Some("h-uid")));
    assert!(is_about(&e, "team-dev", "web-x-shop-x-dev", None));
    assert!(!is_about(
        &e,
        "team-dev",
        "web-x-shop-x-dev",
        Some("other-uid")
    ));
    assert!(!is_about(&e, "team-dev", "other", Some("h-uid")));
    assert!(!is_about(&e, "elsewhere", "web-x-shop-x-dev", None));
    assert!(!is_about(&json!({}), "team-dev", "web-x-shop-x-dev", None));
    assert_eq!(involved_group_kind(&e), Some(GroupKind::new("", "Pod")));
    let mut ingress = e.clone();
    ingress["involvedObject"]["apiVersion"] = json!("networking.k8s.io/v1");
    ingress["involvedObject"]["kind"] = json!("Ingress");
    assert_eq!(
        involved_group_kind(&ingress),
        Some(GroupKind::new("networking.k8s.io", "Ingress"))
    );
    assert_eq!(involved_group_kind(&json!({"involvedObject": {}})), None);
}

#[test]
fn an_event_about_the_tenants_service_becomes_a_tenant_event_on_the_service() {
    let host = host_copy("Service", "dev", "shop", "web");
    let host_name = host["metadata"]["name"].as_str().unwrap().to_owned();
    let e = event_about(
        "Service",
        &host_name,
        "h-svc-uid",
        &format!("Error syncing load balancer for team-dev/{host_name}: {host_name} has no ports"),
    );
    let target = event_target(&e, &host, &service_kind(), "team-dev", "dev").unwrap();
    assert_eq!(
        target,
        EventTarget {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "shop".into(),
            name: "web".into(),
            uid: Some("t-svc-uid".into()),
            host_namespace: "team-dev".into(),
            host_name: host_name.clone(),
            node: None,
        }
    );
    let EventWrite::Create(tenant) = tenant_event(&e, &target, None) else {
        panic!("a new event")
    };
    assert_eq!(
        tenant["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Service", "namespace": "shop", "name": "web", "uid": "t-svc-uid"})
    );
    assert_eq!(
        tenant["message"],
        "Error syncing load balancer for shop/web: web has no ports"
    );
    assert_eq!(tenant["metadata"]["namespace"], "shop");
    let text = serde_json::to_string(&tenant).unwrap();
    for leak in ["team-dev", host_name.as_str(), "h-svc-uid"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    // A Pod and a Service of the same name get different tenant Events.
    let pod = EventTarget {
        kind: "Pod".into(),
        ..target.clone()
    };
    assert_ne!(
        tenant_event_name(&target, "Normal", "r", "m"),
        tenant_event_name(&pod, "Normal", "r", "m")
    );
}

#[test]
fn an_event_about_a_foreign_service_does_not_cross() {
    let ours = host_copy("Service", "dev", "shop", "web");
    // A host Service not made by tenantplane.
    let plain = json!({"metadata": {"name": "billing", "namespace": "team-dev", "uid": "b-uid"}});
    let e = event_about("Service", "billing", "b-uid", "billing failed");
    assert_eq!(
        event_target(&e, &plain, &service_kind(), "team-dev", "dev"),
        None
    );
    // The same, with labels and annotations copied from our Service (forged): the
    // metadata names shop/web, whose host name is not "billing".
    let mut forged = ours.clone();
    forged["metadata"]["name"] = json!("billing");
    forged["metadata"]["uid"] = json!("b-uid");
    assert_eq!(
        event_target(&e, &forged, &service_kind(), "team-dev", "dev"),
        None
    );
    // An Event that names our Service's host name, but whose UID is another object's
    // (a Service of that name deleted and made again by someone else).
    let host_name = ours["metadata"]["name"].as_str().unwrap().to_owned();
    let stale = event_about("Service", &host_name, "someone-else", "x");
    assert_eq!(
        event_target(&stale, &ours, &service_kind(), "team-dev", "dev"),
        None
    );
    // An Event naming another object than the one read.
    let elsewhere = event_about("Service", "billing", "h-svc-uid", "x");
    assert_eq!(
        event_target(&elsewhere, &ours, &service_kind(), "team-dev", "dev"),
        None
    );
    // The host object read from another namespace.
    let mut moved = ours.clone();
    moved["metadata"]["namespace"] = json!("team-prod");
    let right = event_about("Service", &host_name, "h-svc-uid", "x");
    assert_eq!(
        event_target(&right, &moved, &service_kind(), "team-dev", "dev"),
        None
    );
    assert!(event_target(&right, &ours, &service_kind(), "team-dev", "dev").is_some());
}

#[test]
fn an_event_about_another_tenants_object_or_another_kind_does_not_cross() {
    // Tenant prod's copy of shop/web in the same host namespace.
    let prods = host_copy("Service", "prod", "shop", "web");
    let name = prods["metadata"]["name"].as_str().unwrap().to_owned();
    let e = event_about("Service", &name, "h-svc-uid", "x");
    assert_eq!(
        event_target(&e, &prods, &service_kind(), "team-dev", "dev"),
        None
    );
    assert!(event_target(&e, &prods, &service_kind(), "team-dev", "prod").is_some());
    // dev's ConfigMap copy, named by an Event that says Service: the kinds differ.
    let config_map = host_copy("ConfigMap", "dev", "shop", "web");
    let name = config_map["metadata"]["name"].as_str().unwrap().to_owned();
    let e = event_about("Service", &name, "h-svc-uid", "x");
    assert_eq!(
        event_target(&e, &config_map, &service_kind(), "team-dev", "dev"),
        None
    );
    // A Service Event checked against the Pod kind.
    let service = host_copy("Service", "dev", "shop", "web");
    let name = service["metadata"]["name"].as_str().unwrap().to_owned();
    let e = event_about("Service", &name, "h-svc-uid", "x");
    let pods = SyncedKind {
        api_version: "v1".into(),
        group_kind: GroupKind::new("", "Pod"),
    };
    assert_eq!(event_target(&e, &service, &pods, "team-dev", "dev"), None);
    // Hostile host objects and Events: never a target, never a panic.
    for (event, object) in [
        (json!({}), json!({})),
        (e.clone(), json!({"metadata": {"labels": 3}})),
        (json!({"involvedObject": {"kind": 5}}), service.clone()),
    ] {
        assert_eq!(
            event_target(&event, &object, &service_kind(), "team-dev", "dev"),
            None
        );
    }
}

#[test]
fn a_host_event_becomes_a_tenant_event_with_tenant_names() {
    let e = host_event(
        "e1",
        3,
        "Successfully assigned team-dev/web-x-shop-x-dev to secret-rack-7; web-x-shop-x-dev restarted",
    );
    let EventWrite::Create(tenant) = tenant_event(&e, &target(), None) else {
        panic!("a new event")
    };
    assert_eq!(tenant["metadata"]["namespace"], "shop");
    assert_eq!(
        tenant["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web", "uid": "t-uid",
               "fieldPath": "spec.containers{app}"})
    );
    assert_eq!(
        tenant["message"],
        "Successfully assigned shop/web to tenantplane-0123456789abcdef; web restarted"
    );
    assert_eq!(tenant["count"], 3);
    assert_eq!(tenant["reason"], "BackOff");
    assert_eq!(tenant["type"], "Warning");
    assert_eq!(tenant["source"], json!({"component": "kubelet"}));
    assert_eq!(tenant["lastTimestamp"], "2026-01-01T00:01:00Z");
    let text = serde_json::to_string(&tenant).unwrap();
    for leak in ["team-dev", "web-x-shop-x-dev", "secret-rack", "h-uid"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    let name = tenant["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web."), "{name}");
}

#[test]
fn the_same_event_again_counts_up_once() {
    let e = host_event("e1", 1, "Back-off restarting");
    let EventWrite::Create(created) = tenant_event(&e, &target(), None) else {
        panic!()
    };
    assert_eq!(
        tenant_event(&e, &target(), Some(&created)),
        EventWrite::Nothing
    );
    // The host counted it twice more.
    let EventWrite::Bump(patch) = tenant_event(
        &host_event("e1", 3, "Back-off restarting"),
        &target(),
        Some(&created),
    ) else {
        panic!()
    };
    assert_eq!(patch["count"], 3);
    assert_eq!(
        patch["metadata"]["annotations"][ANNOTATION_HOST_EVENT_COUNT],
        "3"
    );
    let mut bumped = created.clone();
    bumped["count"] = json!(3);
    bumped["metadata"]["annotations"][ANNOTATION_HOST_EVENT_COUNT] = json!("3");
    // A new host Event with the same reason and message adds its count.
    let EventWrite::Bump(patch) = tenant_event(
        &host_event("e2", 1, "Back-off restarting"),
        &target(),
        Some(&bumped),
    ) else {
        panic!()
    };
    assert_eq!(patch["count"], 4);
    assert_eq!(
        patch["metadata"]["annotations"][ANNOTATION_HOST_EVENT_UID],
        "e2"
    );
}

#[test]
fn names_are_stable_and_differ_by_reason_and_message() {
    let t = target();
    let a = tenant_event_name(&t, "Warning", "BackOff", "m");
    assert_eq!(a, tenant_event_name(&t, "Warning", "BackOff", "m"));
    assert_ne!(a, tenant_event_name(&t, "Warning", "BackOff", "n"));
    assert_ne!(a, tenant_event_name(&t, "Warning", "Pulled", "m"));
    let long = EventTarget {
        name: "p".repeat(253),
        ..target()
    };
    assert!(tenant_event_name(&long, "Normal", "r", "m").len() <= 253);
}

#[test]
fn hostile_events_do_not_panic() {
    for e in [
        json!({}),
        json!({"count": "x", "lastTimestamp": 5}),
        json!({"eventTime": "2026-01-01T00:00:00.123456Z"}),
    ] {
        let _ = tenant_event(&e, &target(), None);
        let _ = tenant_event(
            &e,
            &target(),
            Some(&json!({"metadata": {"annotations": 3}})),
        );
    }
    let EventWrite::Create(t) = tenant_event(
        &json!({"eventTime": "2026-01-01T00:00:00.123456Z"}),
        &target(),
        None,
    ) else {
        panic!()
    };
    assert_eq!(t["lastTimestamp"], "2026-01-01T00:00:00Z");
}
