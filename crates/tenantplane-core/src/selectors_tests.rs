use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::kinds::Scope;
use crate::transform::{TenantTarget, TransformError, to_host, to_host_in};

const HOST_NAMESPACE: &str = "shared";

fn target(tenant: &str) -> TenantTarget {
    TenantTarget::new(tenant, HOST_NAMESPACE).unwrap()
}

/// The host Pod's labels, made by the real transform.
fn host_pod_labels(
    tenant: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    });
    let (_, host) = to_host(
        &target(tenant),
        &GroupKind::new("", "Pod"),
        Scope::Namespaced,
        &pod,
    )
    .unwrap();
    serde_json::from_value(host["metadata"]["labels"].clone()).unwrap()
}

fn scope<'a>(tenant: &'a str, namespace: &'a str) -> SelectorScope<'a> {
    SelectorScope {
        tenant,
        virtual_namespace: namespace,
    }
}

fn host_object(tenant: &str, object: Value) -> Result<Value, TransformError> {
    let api_version = object["apiVersion"].as_str().unwrap().to_owned();
    let kind = object["kind"].as_str().unwrap().to_owned();
    let gk = GroupKind::from_api_version(&api_version, &kind).unwrap();
    to_host(&target(tenant), &gk, Scope::Namespaced, &object).map(|(_, host)| host)
}

#[test]
fn a_service_selects_only_its_tenant_and_namespace() {
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
    });
    let host = host_object("a", svc).unwrap();
    assert_eq!(
        host["spec"]["selector"],
        json!({"app": "web", "tenantplane.io/tenant": "a", "tenantplane.io/virtual-namespace": "default"})
    );
}

#[test]
fn a_service_without_selector_stays_without() {
    for spec in [
        json!({"ports": [{"port": 80}]}),
        json!({"selector": {}, "ports": [{"port": 80}]}),
    ] {
        let svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "manual", "namespace": "default"}, "spec": spec
        });
        let host = host_object("a", svc).unwrap();
        assert!(
            host["spec"].get("selector").is_none_or(|s| s == &json!({})),
            "{host}"
        );
    }
}

#[test]
fn forged_selectors_are_refused_naming_the_field() {
    let cases = [
        (
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                   "spec": {"selector": {"tenantplane.io/tenant": "b"}}}),
            "spec.selector",
        ),
        (
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"},
                            {"key": "tenantplane.io/virtual-namespace", "operator": "In", "values": ["other"]}]}}}),
            "spec.selector.matchExpressions[1]",
        ),
        (
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "n", "namespace": "default"},
                   "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "x"}}}]}]}}),
            "spec.ingress[0].from[0].podSelector.matchLabels",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                   "spec": {"selector": {"matchLabels": {"sub.tenantplane.io/x": "1"}}, "template": {}}}),
            "spec.selector.matchLabels",
        ),
    ];
    for (object, field) in cases {
        let err = host_object("a", object).unwrap_err();
        assert!(
            matches!(&err, TransformError::Selector(SelectorRewriteError::ReservedKey { field: f, .. }) if f == field),
            "{field}: {err}"
        );
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn malformed_selectors_are_errors_not_panics() {
    for selector in [
        json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}),
        json!({"matchLabels": "app=web"}),
        json!(["app"]),
    ] {
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "p", "namespace": "default"}, "spec": {"selector": selector}});
        let err = host_object("a", pdb).unwrap_err();
        assert!(
            matches!(
                err,
                TransformError::Selector(SelectorRewriteError::Malformed { .. })
            ),
            "{selector}: {err}"
        );
    }
}

#[test]
fn workload_templates_carry_the_labels_their_selector_needs() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "other"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "tenantplane.io/tenant": "b"}}}}
    });
    let host = host_object("a", deployment).unwrap();
    let selector: LabelSelector = serde_json::from_value(host["spec"]["selector"].clone()).unwrap();
    let labels: BTreeMap<String, String> =
        serde_json::from_value(host["spec"]["template"]["metadata"]["labels"].clone()).unwrap();
    assert_eq!(labels["tenantplane.io/tenant"], "a");
    assert_eq!(labels["tenantplane.io/virtual-namespace"], "other");
    assert_eq!(matches(&selector, &labels), Ok(true));
    // The selector does not match b's identically labelled Pod.
    let b_pod = host_pod_labels(
        "b",
        "other",
        &BTreeMap::from([("app".into(), "web".into())]),
    );
    assert_eq!(matches(&selector, &b_pod), Ok(false));

    let cronjob = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}
    });
    let host = host_object("a", cronjob).unwrap();
    assert_eq!(
        host["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["tenantplane.io/tenant"],
        "a"
    );
    assert!(
        host["spec"]["jobTemplate"]["spec"]
            .get("selector")
            .is_none()
    );
}

#[test]
fn pod_affinity_and_spread_count_only_the_tenants_pods() {
    let term = |extra: Value| {
        let mut t = json!({"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"});
        t.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        t
    };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"},
        "spec": {
            "containers": [{"name": "c", "image": "nginx"}],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    term(json!({})),
                    term(json!({"namespaceSelector": {}})),
                    term(json!({"namespaces": ["a", "b"]})),
                    term(json!({"namespaceSelector": {"matchLabels": {"team": "x"}}}))
                ]},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"labelSelector": null, "namespaceSelector": {}, "topologyKey": "zone"}}
                ]}
            },
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": "web"}}}]
        }
    });
    let host = host_object("dev", pod.clone()).unwrap();
    let terms = &host["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let with = |labels: Value, expressions: Option<Value>| {
        let mut t = json!({"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"});
        if let Some(e) = expressions {
            t["labelSelector"]["matchExpressions"] = e;
        }
        t
    };
    assert_eq!(
        terms[0],
        with(
            json!({"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "shop"}),
            None
        )
    );
    assert_eq!(
        terms[1],
        with(json!({"app": "web", "tenantplane.io/tenant": "dev"}), None)
    );
    assert_eq!(
        terms[2],
        with(
            json!({"app": "web", "tenantplane.io/tenant": "dev"}),
            Some(
                json!([{"key": "tenantplane.io/virtual-namespace", "operator": "In", "values": ["a", "b"]}])
            )
        )
    );
    assert_eq!(
        terms[3],
        with(
            json!({"app": "web", "tenantplane.io/tenant": "dev"}),
            Some(json!([{"key": "tenantplane.io/tenant", "operator": "DoesNotExist"}]))
        )
    );
    // No host namespace field survives; a null selector stays null.
    assert_eq!(
        host["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            [0]["podAffinityTerm"],
        json!({"labelSelector": null, "topologyKey": "zone"})
    );
    assert_eq!(
        host["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "shop"}})
    );
    let mut forged = pod;
    forged["spec"]["topologySpreadConstraints"][0]["labelSelector"] =
        json!({"matchLabels": {"tenantplane.io/tenant": "prod"}});
    let err = host_object("dev", forged).unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.topologySpreadConstraints[0].labelSelector"),
        "{err}"
    );
}

fn namespaces() -> TenantNamespaces {
    BTreeMap::from([
        ("default".to_owned(), BTreeMap::new()),
        (
            "other".to_owned(),
            BTreeMap::from([("team".to_owned(), "x".to_owned())]),
        ),
        (
            "third".to_owned(),
            BTreeMap::from([("team".to_owned(), "y".to_owned())]),
        ),
    ])
}

#[test]
fn network_policy_peers_stay_inside_the_tenant() {
    let policy = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "n", "namespace": "default"},
        "spec": {
            "podSelector": {},
            "ingress": [{"from": [
                {"namespaceSelector": {}},
                {"namespaceSelector": {"matchLabels": {"team": "x"}}, "podSelector": {"matchLabels": {"app": "web"}}},
                {"namespaceSelector": {"matchLabels": {"team": "none"}}},
                {"podSelector": {"matchLabels": {"app": "db"}}},
                {"ipBlock": {"cidr": "10.0.0.0/8"}}
            ]}],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "third"}}}]}]
        }
    });
    let gk = GroupKind::new("networking.k8s.io", "NetworkPolicy");
    let (_, host) =
        to_host_in(&target("a"), &gk, Scope::Namespaced, &policy, &namespaces()).unwrap();
    let spec = &host["spec"];
    assert_eq!(
        spec["podSelector"],
        json!({"matchLabels": {"tenantplane.io/tenant": "a", "tenantplane.io/virtual-namespace": "default"}})
    );
    let from = &spec["ingress"][0]["from"];
    assert_eq!(
        from[0],
        json!({"podSelector": {"matchLabels": {"tenantplane.io/tenant": "a"}}})
    );
    assert_eq!(
        from[1],
        json!({"podSelector": {"matchLabels": {"app": "web", "tenantplane.io/tenant": "a"},
               "matchExpressions": [{"key": "tenantplane.io/virtual-namespace", "operator": "In", "values": ["other"]}]}})
    );
    assert_eq!(
        from[2],
        json!({"podSelector": {"matchLabels": {"tenantplane.io/tenant": "a"},
               "matchExpressions": [{"key": "tenantplane.io/tenant", "operator": "DoesNotExist"}]}})
    );
    assert_eq!(
        from[3],
        json!({"podSelector": {"matchLabels": {"app": "db", "tenantplane.io/tenant": "a", "tenantplane.io/virtual-namespace": "default"}}})
    );
    assert_eq!(from[4], json!({"ipBlock": {"cidr": "10.0.0.0/8"}}));
    assert_eq!(
        spec["egress"][0]["to"][0]["podSelector"]["matchExpressions"][0]["values"],
        json!(["third"])
    );
    // Without the tenant's namespaces a labelled namespaceSelector matches nothing.
    let (_, offline) = to_host_in(
        &target("a"),
        &gk,
        Scope::Namespaced,
        &policy,
        &TenantNamespaces::new(),
    )
    .unwrap();
    let nothing: LabelSelector =
        serde_json::from_value(offline["spec"]["ingress"][0]["from"][1]["podSelector"].clone())
            .unwrap();
    for (tenant, ns) in [("a", "other"), ("a", "default"), ("b", "other")] {
        let pod = host_pod_labels(tenant, ns, &BTreeMap::from([("app".into(), "web".into())]));
        assert_eq!(matches(&nothing, &pod), Ok(false));
    }
}

// ---- property tests ----

const KEYS: &[&str] = &["app", "tier", "team"];
const VALUES: &[&str] = &["web", "db", ""];
const RESERVED: &[&str] = &[
    "tenantplane.io/tenant",
    "tenantplane.io/virtual-namespace",
    "app.kubernetes.io/managed-by",
];
const TENANTS: &[&str] = &["a", "b"];
const NAMESPACES: &[&str] = &["default", "other", "third"];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(str::to_owned)
}
fn value() -> impl Strategy<Value = String> {
    prop::sample::select(VALUES).prop_map(str::to_owned)
}
/// Tenant Pod labels, forged reserved keys included.
fn pod_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    let any_key =
        prop_oneof![3 => key(), 1 => prop::sample::select(RESERVED).prop_map(str::to_owned)];
    prop::collection::btree_map(
        any_key,
        prop_oneof![
            value(),
            prop::sample::select(TENANTS).prop_map(str::to_owned),
            prop::sample::select(NAMESPACES).prop_map(str::to_owned)
        ],
        0..4,
    )
}
fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        key(),
        prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist"][..]),
        prop::collection::vec(value(), 1..3),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator: operator.to_owned(),
            values: matches!(operator, "In" | "NotIn").then_some(values),
        })
}
fn label_selector() -> impl Strategy<Value = LabelSelector> {
    (
        prop::option::of(prop::collection::btree_map(key(), value(), 0..3)),
        prop::option::of(prop::collection::vec(requirement(), 0..3)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}
fn tenant() -> impl Strategy<Value = &'static str> {
    prop::sample::select(TENANTS)
}
fn namespace() -> impl Strategy<Value = &'static str> {
    prop::sample::select(NAMESPACES)
}

proptest! {
    #[test]
    fn a_host_selector_matches_exactly_the_tenant_selection(
        selector in label_selector(),
        (sel_tenant, sel_ns) in (tenant(), namespace()),
        (pod_tenant, pod_ns, labels) in (tenant(), namespace(), pod_labels()),
    ) {
        let host = host_label_selector("spec.selector", &selector, &scope(sel_tenant, sel_ns)).unwrap();
        let expected = matches(&selector, &labels).unwrap() && sel_tenant == pod_tenant && sel_ns == pod_ns;
        prop_assert_eq!(matches(&host, &host_pod_labels(pod_tenant, pod_ns, &labels)).unwrap(), expected);
    }

    #[test]
    fn a_host_service_selector_matches_exactly_the_tenant_selection(
        selector in prop::collection::btree_map(key(), value(), 1..3),
        (sel_tenant, sel_ns) in (tenant(), namespace()),
        (pod_tenant, pod_ns, labels) in (tenant(), namespace(), pod_labels()),
    ) {
        let host = host_map_selector("spec.selector", &selector, &scope(sel_tenant, sel_ns)).unwrap();
        let as_label = |m: BTreeMap<String, String>| LabelSelector { match_labels: Some(m), match_expressions: None };
        let expected = matches(&as_label(selector), &labels).unwrap() && sel_tenant == pod_tenant && sel_ns == pod_ns;
        prop_assert_eq!(matches(&as_label(host), &host_pod_labels(pod_tenant, pod_ns, &labels)).unwrap(), expected);
    }

    #[test]
    fn a_reserved_key_is_always_refused(
        selector in label_selector(),
        reserved_key in prop::sample::select(RESERVED),
        as_expression in any::<bool>(),
    ) {
        let mut selector = selector;
        if as_expression {
            selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                key: reserved_key.to_owned(), operator: "Exists".to_owned(), values: None,
            });
        } else {
            selector.match_labels.get_or_insert_with(BTreeMap::new).insert(reserved_key.to_owned(), "a".to_owned());
        }
        let refused = matches!(
            host_label_selector("spec.selector", &selector, &scope("a", "default")),
            Err(SelectorRewriteError::ReservedKey { .. })
        );
        prop_assert!(refused);
    }

    #[test]
    fn a_network_policy_peer_admits_exactly_the_tenant_peers(
        pod_selector in prop::option::of(label_selector()),
        namespace_selector in prop::option::of(label_selector()),
        namespace_labels in prop::collection::vec(prop::collection::btree_map(key(), value(), 0..3), NAMESPACES.len()),
        (policy_tenant, policy_ns) in (tenant(), namespace()),
        (pod_tenant, pod_ns, labels) in (tenant(), namespace(), pod_labels()),
    ) {
        prop_assume!(pod_selector.is_some() || namespace_selector.is_some());
        let tenant_namespaces: TenantNamespaces =
            NAMESPACES.iter().map(|n| (*n).to_owned()).zip(namespace_labels).collect();
        let host = host_peer_selector(
            "peer", pod_selector.as_ref(), namespace_selector.as_ref(), policy_tenant, policy_ns, &tenant_namespaces,
        ).unwrap();
        // The Kubernetes meaning inside the tenant.
        let namespace_ok = match &namespace_selector {
            None => pod_ns == policy_ns,
            Some(selector) => {
                let mut ns_labels = tenant_namespaces[pod_ns].clone();
                ns_labels.insert(NAMESPACE_NAME_LABEL.to_owned(), pod_ns.to_owned());
                matches(selector, &ns_labels).unwrap()
            }
        };
        let pod_ok = pod_selector.as_ref().is_none_or(|s| matches(s, &labels).unwrap());
        let expected = pod_tenant == policy_tenant && namespace_ok && pod_ok;
        prop_assert_eq!(matches(&host, &host_pod_labels(pod_tenant, pod_ns, &labels)).unwrap(), expected);
    }
}
