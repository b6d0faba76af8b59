use serde_json::json;

use super::*;

fn rules(value: Value) -> PolicyRules {
    serde_json::from_value(value).unwrap()
}

fn compiled(value: Value) -> CompiledRules {
    CompiledRules::compile("spec.rules", &rules(value)).unwrap()
}

#[test]
fn every_bad_pattern_is_a_violation_with_its_field() {
    let bad = rules(json!({
        "images": {"allowedRegistries": ["ok.io", "ghcr.io/acme", "a b", "ghcr.io/x:1/"]},
        "services": {"allowedExternalNames": ["*.ok.com", "*bad.com"]},
        "ingress": {"allowedHostnames": ["a..b"]},
        "metadata": {
            "namespaces": {"forbiddenLabels": {"regex": "("}, "forbiddenAnnotations": {"regex": "ok"}},
            "services": {"allowedAnnotations": {"exact": [""], "regex": "[z-a]"}},
        },
    }));
    let fields: Vec<String> = violations("spec.rules", &bad)
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(
        fields,
        [
            "spec.rules.images.allowedRegistries[1]",
            "spec.rules.images.allowedRegistries[2]",
            "spec.rules.images.allowedRegistries[3]",
            "spec.rules.services.allowedExternalNames[1]",
            "spec.rules.ingress.allowedHostnames[0]",
            "spec.rules.metadata.namespaces.forbiddenLabels.regex",
            "spec.rules.metadata.services.allowedAnnotations.exact[0]",
            "spec.rules.metadata.services.allowedAnnotations.regex",
        ]
    );
    let regex = violations("spec.rules", &bad)
        .into_iter()
        .find(|v| v.field.ends_with("forbiddenLabels.regex"))
        .unwrap();
    assert!(
        regex.message.contains("regex parse error"),
        "{}",
        regex.message
    );
}

#[test]
fn images_are_checked_in_every_container_kind() {
    let r = compiled(json!({"images": {
        "allowedRegistries": ["registry.example.com", "ghcr.io/acme/", "docker.io/library/"],
        "allowedPullPolicies": ["Always"]}}));
    let pod = json!({"spec": {
        "containers": [
            {"name": "a", "image": "registry.example.com/app:1", "imagePullPolicy": "Always"},
            {"name": "b", "image": "busybox", "imagePullPolicy": "Always"},
            {"name": "c", "image": "ghcr.io/acme-evil/x", "imagePullPolicy": "Always"}],
        "initContainers": [{"name": "i", "image": "ghcr.io/acme/tools:2", "imagePullPolicy": "IfNotPresent"}],
        "ephemeralContainers": [{"name": "e", "image": "quay.io/x", "imagePullPolicy": "Always"}]}});
    let broken = r.check_pod(&pod);
    let fields: Vec<_> = broken.iter().map(|b| (b.rule, b.field.as_str())).collect();
    assert_eq!(
        fields,
        [
            ("images.allowedRegistries", "spec.containers[2].image"),
            (
                "images.allowedPullPolicies",
                "spec.initContainers[0].imagePullPolicy"
            ),
            (
                "images.allowedRegistries",
                "spec.ephemeralContainers[0].image"
            ),
        ]
    );
    // 1.20's EphemeralContainers object of the subresource.
    let ephemeral = json!({"kind": "EphemeralContainers",
        "ephemeralContainers": [{"name": "e", "image": "evil.io/x", "imagePullPolicy": "Always"}]});
    assert_eq!(
        r.check_pod(&ephemeral)[0].field,
        "ephemeralContainers[0].image"
    );
    // An image that does not parse is refused, not skipped.
    let garbage = json!({"spec": {"containers": [{"name": "a", "image": "UPPER/x"}]}});
    assert_eq!(r.check_pod(&garbage)[0].rule, "images");
}

#[test]
fn the_missing_pull_policy_is_the_kubernetes_default() {
    let r = compiled(json!({"images": {"allowedPullPolicies": ["IfNotPresent"]}}));
    let pod = |image: &str| json!({"spec": {"containers": [{"name": "a", "image": image}]}});
    assert!(r.check_pod(&pod("x:1")).is_empty());
    assert_eq!(r.check_pod(&pod("x")).len(), 1);
}

#[test]
fn services_types_external_ips_and_names() {
    let r = compiled(
        json!({"services": {"allowedTypes": ["ClusterIP", "ExternalName"],
        "allowedExternalNames": ["*.svc.example.com"]}}),
    );
    assert!(r.check_service(&json!({"spec": {}})).is_empty());
    let lb =
        r.check_service(&json!({"spec": {"type": "LoadBalancer", "externalIPs": ["1.2.3.4"]}}));
    let rules: Vec<_> = lb.iter().map(|b| b.rule).collect();
    assert_eq!(
        rules,
        ["services.allowedTypes", "services.allowExternalIPs"]
    );
    let ok = json!({"spec": {"type": "ExternalName", "externalName": "db.svc.example.com"}});
    assert!(r.check_service(&ok).is_empty());
    let far = json!({"spec": {"type": "ExternalName", "externalName": "a.db.svc.example.com"}});
    assert_eq!(
        r.check_service(&far)[0].rule,
        "services.allowedExternalNames"
    );
    let allowed = compiled(json!({"services": {"allowExternalIPs": true}}));
    assert!(
        allowed
            .check_service(&json!({"spec": {"externalIPs": ["1.2.3.4"]}}))
            .is_empty()
    );
    assert!(
        CompiledRules::default()
            .check_service(&json!({"spec": {"type": "LoadBalancer"}}))
            .is_empty()
    );
}

#[test]
fn ingress_hosts_of_rules_and_tls() {
    let r = compiled(
        json!({"ingress": {"allowedHostnames": ["acme.example.com", "*.acme.example.com"]}}),
    );
    let ingress = json!({"spec": {"rules": [{"host": "a.acme.example.com"}, {"host": "evil.com"}, {}],
        "tls": [{"hosts": ["acme.example.com", "x.y.acme.example.com"]}]}});
    let fields: Vec<_> = r
        .check_ingress(&ingress)
        .into_iter()
        .map(|b| b.field)
        .collect();
    assert_eq!(fields, ["spec.rules[1].host", "spec.tls[0].hosts[1]"]);
}

#[test]
fn annotations_use_the_annotation_rule_and_the_new_object() {
    let r = compiled(json!({"metadata": {"namespaces": {
        "forbiddenLabels": {"exact": ["tier"], "regex": "secret-.*"},
        "forbiddenAnnotations": {"regex": "audit/.*"}}}}));
    let ns = |labels: Value, annotations: Value| json!({"metadata": {"labels": labels, "annotations": annotations}});
    // A label key forbidden for labels is fine as an annotation, and the other way round.
    let fine = ns(
        json!({"audit/x": "1"}),
        json!({"secret-a": "1", "tier": "1"}),
    );
    assert!(
        r.check_metadata(MetadataTarget::Namespace, None, &fine)
            .is_empty()
    );
    let bad = ns(json!({"secret-a": "1"}), json!({"audit/x": "1"}));
    let rules: Vec<_> = r
        .check_metadata(MetadataTarget::Namespace, None, &bad)
        .into_iter()
        .map(|b| b.rule)
        .collect();
    assert_eq!(
        rules,
        [
            "metadata.namespaces.forbiddenLabels",
            "metadata.namespaces.forbiddenAnnotations"
        ]
    );
    // Update: the new object's added or changed keys count; old ones kept are fine.
    let old = ns(json!({"tier": "gold"}), json!({}));
    let kept = ns(json!({"tier": "gold", "x": "1"}), json!({}));
    assert!(
        r.check_metadata(MetadataTarget::Namespace, Some(&old), &kept)
            .is_empty()
    );
    let changed = ns(json!({"tier": "platinum"}), json!({}));
    assert_eq!(
        r.check_metadata(MetadataTarget::Namespace, Some(&old), &changed)
            .len(),
        1
    );
    let added = ns(json!({"tier": "gold", "secret-b": "1"}), json!({}));
    assert_eq!(
        r.check_metadata(MetadataTarget::Namespace, Some(&old), &added)
            .len(),
        1
    );
    // Services have their own rules (none here).
    assert!(
        r.check_metadata(MetadataTarget::Service, None, &bad)
            .is_empty()
    );
}

#[test]
fn allowed_only_keys() {
    let r = compiled(json!({"metadata": {"services": {"allowedLabels": {"exact": ["app"]}}}}));
    let svc = json!({"metadata": {"labels": {"app": "a", "team": "b"}}});
    let broken = r.check_metadata(MetadataTarget::Service, None, &svc);
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].rule, "metadata.services.allowedLabels");
}

#[test]
fn updates_are_refused_only_for_what_they_add() {
    let r = compiled(json!({"services": {"allowedTypes": ["ClusterIP"]}}));
    let old = r.check_service(&json!({"spec": {"type": "NodePort"}}));
    assert!(
        introduced(
            &old,
            r.check_service(&json!({"spec": {"type": "NodePort"}}))
        )
        .is_empty()
    );
    assert_eq!(
        introduced(
            &old,
            r.check_service(&json!({"spec": {"type": "LoadBalancer"}}))
        )
        .len(),
        1
    );
}

#[test]
fn one_claim_per_host_whatever_its_spelling() {
    let name = ingress_claim_name("Acme.Example.com.");
    assert_eq!(name, ingress_claim_name("acme.example.com"));
    assert_ne!(name, ingress_claim_name("acme.example.org"));
    assert_eq!(name.len(), "ingress-host-".len() + 20);
}
