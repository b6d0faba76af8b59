use super::*;

fn target() -> EventTarget {
    EventTarget {
        namespace: "shop".into(),
        name: "web".into(),
        uid: Some("t-uid".into()),
        host_namespace: "team-dev".into(),
        host_pod: "web-x-shop-x-dev".into(),
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

#[test]
fn an_event_is_matched_to_its_host_pod_only() {
    let e = host_event("e1", 1, "x");
    assert!(is_about_pod(
        &e,
        "team-dev",
        "web-x-shop-x-dev",
        Some("h-uid")
    ));
    assert!(is_about_pod(&e, "team-dev", "web-x-shop-x-dev", None));
    assert!(!is_about_pod(
        &e,
        "team-dev",
        "web-x-shop-x-dev",
        Some("other-uid")
    ));
    assert!(!is_about_pod(&e, "team-dev", "other", Some("h-uid")));
    assert!(!is_about_pod(&e, "elsewhere", "web-x-shop-x-dev", None));
    let mut not_a_pod = e.clone();
    not_a_pod["involvedObject"]["kind"] = json!("Node");
    assert!(!is_about_pod(
        &not_a_pod,
        "team-dev",
        "web-x-shop-x-dev",
        None
    ));
    assert!(!is_about_pod(
        &json!({}),
        "team-dev",
        "web-x-shop-x-dev",
        None
    ));
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
