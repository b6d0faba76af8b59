use serde_json::json;

use super::*;
use crate::kinds::Scope;
use crate::transform::{TenantTarget, to_host};

fn desired(tenant_object: &Value) -> (SourceIdentity, Value) {
    let target = TenantTarget::new("dev", "team-dev").unwrap();
    let kind = tenant_object["kind"].as_str().unwrap();
    let api_version = tenant_object["apiVersion"].as_str().unwrap();
    let gk = GroupKind::from_api_version(api_version, kind).unwrap();
    let (placement, mut host) = to_host(&target, &gk, Scope::Namespaced, tenant_object).unwrap();
    stamp_desired_hash(&mut host);
    (placement.source_identity("dev", None), host)
}

fn stored(desired: &Value, extra: Value) -> Value {
    let mut stored = desired.clone();
    let meta = stored["metadata"].as_object_mut().unwrap();
    meta.insert("resourceVersion".into(), json!("7"));
    meta.insert("uid".into(), json!("host-uid"));
    merge(&mut stored, extra);
    stored
}

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default", "uid": "t-1"}, "data": data})
}

#[test]
fn absent_is_created() {
    let (source, host) = desired(&cm(json!({"k": "v"})));
    assert_eq!(
        plan_apply(&source, &host, None, None),
        ApplyPlan::Create {
            object: host.clone()
        }
    );
    assert!(host["metadata"]["annotations"][ANNOTATION_DESIRED_HASH].is_string());
}

#[test]
fn unchanged_is_a_noop_even_with_server_additions() {
    let (source, host) = desired(&cm(json!({"k": "v"})));
    let live = stored(
        &host,
        json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"added-by-host": "x"}}}),
    );
    assert_eq!(
        plan_apply(&source, &host, Some(&live), None),
        ApplyPlan::Noop
    );
}

#[test]
fn a_tenant_change_is_an_update_with_a_resource_version() {
    let (source, old) = desired(&cm(json!({"k": "v"})));
    let live = stored(&old, json!({}));
    let (_, new) = desired(&cm(json!({"k": "v2"})));
    match plan_apply(&source, &new, Some(&live), None) {
        ApplyPlan::Update {
            object,
            reason,
            immutable,
        } => {
            assert_eq!(object["data"]["k"], "v2");
            assert_eq!(object["metadata"]["resourceVersion"], "7");
            assert_eq!(reason, "the tenant object changed");
            assert!(immutable.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_removed_key_is_removed_on_update() {
    let (source, old) = desired(&cm(json!({"k": "v", "gone": "x"})));
    let live = stored(&old, json!({}));
    let (_, new) = desired(&cm(json!({"k": "v"})));
    let ApplyPlan::Update { object, .. } = plan_apply(&source, &new, Some(&live), None) else {
        panic!("expected an update");
    };
    assert!(
        object["data"].get("gone").is_none(),
        "a full replace drops it"
    );
}

#[test]
fn a_host_edit_is_restored() {
    let (source, host) = desired(&cm(json!({"k": "v"})));
    let live = stored(&host, json!({"data": {"k": "edited on host"}}));
    match plan_apply(&source, &host, Some(&live), None) {
        ApplyPlan::Update { object, reason, .. } => {
            assert_eq!(object["data"]["k"], "v");
            assert!(reason.contains(".data.k differs"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn server_normalization_unknown_to_holds_is_remembered() {
    let (source, host) = desired(&cm(json!({"k": "v"})));
    // Pretend the server rewrote the value in a way `holds` cannot see through.
    let live = stored(&host, json!({"data": {"k": "V"}}));
    assert!(matches!(
        plan_apply(&source, &host, Some(&live), None),
        ApplyPlan::Update { .. }
    ));
    let memo = WriteMemo::after_write(&host, &live);
    assert_eq!(
        plan_apply(&source, &host, Some(&live), Some(&memo)),
        ApplyPlan::Noop
    );
    // A later real host edit still gets restored.
    let edited = stored(&host, json!({"data": {"k": "other"}}));
    assert!(matches!(
        plan_apply(&source, &host, Some(&edited), Some(&memo)),
        ApplyPlan::Update { .. }
    ));
}

#[test]
fn foreign_and_other_tenant_objects_are_skipped() {
    let (source, host) = desired(&cm(json!({"k": "v"})));
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": host["metadata"]["name"], "namespace": "team-dev"}});
    match plan_apply(&source, &host, Some(&foreign), None) {
        ApplyPlan::Skip { reason } => {
            assert!(reason.contains("not managed by tenantplane"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let mut other = stored(&host, json!({}));
    other["metadata"]["labels"]["tenantplane.io/tenant"] = json!("prod");
    match plan_apply(&source, &host, Some(&other), None) {
        ApplyPlan::Skip { reason } => {
            assert!(reason.contains("refusing to overwrite"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(plan_gc(&source, &foreign), GcPlan::Keep { .. }));
    assert!(matches!(plan_gc(&source, &other), GcPlan::Keep { .. }));
    assert_eq!(
        plan_gc(&source, &stored(&host, json!({}))),
        GcPlan::Delete {
            uid: Some("host-uid".into()),
            reason: "the tenant ConfigMap default/cfg no longer exists".into()
        }
    );
}

#[test]
fn service_allocations_are_adopted() {
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                     "spec": {"type": "NodePort", "ports": [{"port": 80}], "selector": {"app": "web"}}});
    let (source, old) = desired(&svc);
    let live = stored(
        &old,
        json!({"spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
                                             "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30007}]}}),
    );
    assert_eq!(
        plan_apply(&source, &old, Some(&live), None),
        ApplyPlan::Noop
    );
    let mut changed = svc.clone();
    changed["spec"]["selector"]["app"] = json!("web2");
    let (_, new) = desired(&changed);
    let ApplyPlan::Update { object, .. } = plan_apply(&source, &new, Some(&live), None) else {
        panic!("expected an update");
    };
    assert_eq!(object["spec"]["clusterIP"], "10.96.0.5");
    assert_eq!(object["spec"]["ports"][0]["nodePort"], 30007);
}

fn pod(image: &str, env: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "labels": {"v": image}},
           "spec": {"containers": [{"name": "c", "image": image, "env": [{"name": "E", "value": env}]}]}})
}

#[test]
fn pod_images_and_labels_update_but_other_spec_fields_are_skipped() {
    let (source, old) = desired(&pod("nginx:1", "a"));
    let live = stored(
        &old,
        json!({"spec": {"nodeName": "node-1", "tolerations": [{"key": "x"}], "priority": 0}}),
    );
    assert_eq!(
        plan_apply(&source, &old, Some(&live), None),
        ApplyPlan::Noop
    );

    let (_, new_image) = desired(&pod("nginx:2", "a"));
    let ApplyPlan::Update {
        object, immutable, ..
    } = plan_apply(&source, &new_image, Some(&live), None)
    else {
        panic!("expected an update");
    };
    assert_eq!(object["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(object["spec"]["nodeName"], "node-1", "live spec kept");
    assert_eq!(object["spec"]["tolerations"], json!([{"key": "x"}]));
    assert_eq!(object["metadata"]["labels"]["v"], "nginx:2");
    assert!(object.get("status").is_none());
    assert!(immutable.is_empty(), "{immutable:?}");

    let mut only_env = pod("nginx:1", "b");
    only_env["metadata"]["labels"]["v"] = json!("nginx:1");
    let (_, new_env) = desired(&only_env);
    match plan_apply(&source, &new_env, Some(&live), None) {
        ApplyPlan::Skip { reason } => {
            assert!(reason.contains(".spec.containers[0].env"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn job_selector_is_adopted_and_template_is_immutable() {
    let job = |cmd: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
                           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "command": [cmd]}]}}}})
    };
    let (source, old) = desired(&job("true"));
    let live = stored(
        &old,
        json!({"spec": {"selector": {"matchLabels": {"controller-uid": "h"}},
        "template": {"metadata": {"labels": {"controller-uid": "h"}}}}}),
    );
    assert_eq!(
        plan_apply(&source, &old, Some(&live), None),
        ApplyPlan::Noop
    );
    let (_, new) = desired(&job("false"));
    match plan_apply(&source, &new, Some(&live), None) {
        ApplyPlan::Skip { reason } => assert!(reason.contains(".spec.template"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
