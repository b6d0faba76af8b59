//! Two TenantClusters `a` and `b` in ONE host namespace, each with its own tenant
//! API server and identically labelled Pods: every host selector is evaluated
//! against the host Pods, and must match exactly its own tenant's Pods.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use crate::harness::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{DynamicObject, ListParams};
use serde_json::{Value, json};
use tenantplane_core::selector::matches;
use tenantplane_testenv::ApiServer;

const NET_KINDS: &[(&str, &str)] = &[
    ("v1", "Pod"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
];

struct TwoTenants {
    h: Harness,
    _b_server: ApiServer,
    b: Client,
    _controller: Controller,
}

impl TwoTenants {
    fn tenant(&self, name: &str) -> &Client {
        if name == "a" { &self.h.tenant } else { &self.b }
    }
}

/// Harness tenant server as TenantCluster `a`, a second tenant server as `b`, both
/// in the test's namespace on the shared host, each with namespace `other` and a
/// Pod `web` (`app=web`) in `default` and in `other`; waits for the four host Pods.
async fn two_tenants() -> TwoTenants {
    let h = Harness::start_on_shared_host().await;
    let net = h.named("net");
    let b_server = h.env.start_apiserver("tenant-b").await.expect("tenant b");
    let b = b_server.client().await.unwrap();
    create(&h.host, policy(&net, NET_KINDS, "2s")).await;
    kubeconfig_secret(
        &h.host,
        &h.ns,
        "b-kubeconfig",
        &b_server.kubeconfig_yaml("admin").unwrap(),
    )
    .await;
    for tenant in [&h.tenant, &b] {
        create_namespace(tenant, "other").await;
        for ns in ["default", "other"] {
            create(
                tenant,
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
                "spec": pod_spec()}),
            )
            .await;
        }
    }
    let controller = Controller::start_for(&h).await;
    for (name, secret) in [("a", "dev-kubeconfig"), ("b", "b-kubeconfig")] {
        create(&h.host, tenant_cluster(name, &h.ns, "fast", &net, secret)).await;
    }
    let host_pods = h.host_api("v1", "Pod");
    for (ns, tenant) in all_pods() {
        wait_for(&host_pods, &predicted("web", ns, tenant)).await;
    }
    TwoTenants {
        h,
        _b_server: b_server,
        b,
        _controller: controller,
    }
}

/// A Pod spec whose scheduling selectors would reach every tenant's Pods verbatim.
fn pod_spec() -> Value {
    json!({"automountServiceAccountToken": false, "containers": [{"name": "app", "image": "nginx"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["default", "other"],
                                "topologyKey": "kubernetes.io/hostname"}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "web"}}}]})
}

fn all_pods() -> [(&'static str, &'static str); 4] {
    [
        ("default", "a"),
        ("other", "a"),
        ("default", "b"),
        ("other", "b"),
    ]
}

/// Host Pod name → labels.
async fn host_pod_labels(h: &Harness) -> BTreeMap<String, BTreeMap<String, String>> {
    h.host_api("v1", "Pod")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.labels.unwrap_or_default(),
            )
        })
        .collect()
}

/// The host Pods `selector` selects, by the core evaluator.
fn selected(
    selector: &Value,
    pods: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<String> {
    let selector: LabelSelector = serde_json::from_value(selector.clone()).unwrap();
    pods.iter()
        .filter(|(_, labels)| matches(&selector, labels).unwrap())
        .map(|(name, _)| name.clone())
        .collect()
}

fn names(pods: &[(&str, &str)]) -> BTreeSet<String> {
    pods.iter()
        .map(|(ns, tenant)| predicted("web", ns, tenant))
        .collect()
}

/// The host Pods a policy's `ingress[0].from` peers admit (pod-only peers: the host
/// copy never has a namespaceSelector, which is asserted too).
fn admitted(
    policy: &DynamicObject,
    pods: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for peer in policy.data["spec"]["ingress"][0]["from"]
        .as_array()
        .unwrap()
    {
        if peer.get("namespaceSelector").is_some() {
            // Only the isolation policy's control-plane peer, which is another namespace.
            assert_eq!(
                peer["podSelector"]["matchLabels"]["tenantplane.io/component"], "control-plane",
                "{peer}"
            );
            continue;
        }
        out.extend(selected(&peer["podSelector"], pods));
    }
    out
}

#[tokio::test]
async fn services_and_isolation_select_only_their_own_tenants_pods() {
    let t = two_tenants().await;
    for tenant in ["a", "b"] {
        for ns in ["default", "other"] {
            create(
                t.tenant(tenant),
                json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            )
            .await;
        }
    }
    let pods = host_pod_labels(&t.h).await;
    let host_pods = t.h.host_api("v1", "Pod");
    let services = t.h.host_api("v1", "Service");
    for (ns, tenant) in all_pods() {
        let service = wait_for(&services, &predicted("web", ns, tenant)).await;
        let selector = &service.data["spec"]["selector"];
        let expected = names(&[(ns, tenant)]);
        assert_eq!(
            selected(&json!({"matchLabels": selector}), &pods),
            expected,
            "{tenant}'s Service in {ns}: {selector}"
        );
        // The API server's own label-selector evaluation agrees.
        let query: Vec<String> = selector
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect();
        let listed: BTreeSet<String> = host_pods
            .list(&ListParams::default().labels(&query.join(",")))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        assert_eq!(listed, expected, "{tenant}'s Service in {ns}: {query:?}");
    }

    // The host Pods' scheduling selectors count only their own tenant's Pods (and
    // the host API server accepted the rewritten shapes).
    let a_pod = host_pods
        .get(&predicted("web", "default", "a"))
        .await
        .unwrap();
    let term = &a_pod.data["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    // (`namespaces`: the 1.20 test servers drop an affinity `namespaceSelector`.)
    assert!(term.get("namespaces").is_none(), "{term}");
    assert_eq!(
        selected(&term["labelSelector"], &pods),
        names(&[("default", "a"), ("other", "a")])
    );
    let spread = &a_pod.data["spec"]["topologySpreadConstraints"][0]["labelSelector"];
    assert_eq!(selected(spread, &pods), names(&[("default", "a")]));

    // A forged selector over tenantplane's own label is refused, naming the field.
    create(
        &t.h.tenant,
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "forged", "namespace": "default"},
        "spec": {"selector": {"tenantplane.io/tenant": "b"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let forged = predicted("forged", "default", "a");
    let skip = eventually("a Skip for the forged Service", || async {
        t.h.decisions("a")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["host"]["name"] == forged.as_str())
    })
    .await;
    let reason = skip["reason"].as_str().unwrap();
    assert!(
        reason.contains("spec.selector") && reason.contains("tenantplane.io/tenant"),
        "{reason}"
    );
    assert!(services.get_opt(&forged).await.unwrap().is_none());

    // The isolation policies of a and b share the namespace and stay apart.
    let policies = t.h.host_api("networking.k8s.io/v1", "NetworkPolicy");
    for (tenant, own) in [
        ("a", names(&[("default", "a"), ("other", "a")])),
        ("b", names(&[("default", "b"), ("other", "b")])),
    ] {
        let policy = wait_for(&policies, &format!("tenantplane-isolation-{tenant}")).await;
        assert_eq!(
            selected(&policy.data["spec"]["podSelector"], &pods),
            own,
            "{tenant}"
        );
        assert_eq!(admitted(&policy, &pods), own, "{tenant}'s isolation admits");
        let egress = &policy.data["spec"]["egress"][0]["to"][0]["podSelector"];
        assert_eq!(selected(egress, &pods), own, "{tenant}'s isolation egress");
    }
}

#[tokio::test]
async fn a_network_policy_selects_and_admits_only_inside_its_tenant() {
    let t = two_tenants().await;
    // b's `other` carries the label a's policy looks for: it must not matter.
    merge_patch(
        &dynamic(&t.b, "v1", "Namespace", None),
        "other",
        json!({"metadata": {"labels": {"team": "x"}}}),
    )
    .await;
    for (name, from) in [
        ("open", json!({"namespaceSelector": {}})),
        (
            "team-x",
            json!({"namespaceSelector": {"matchLabels": {"team": "x"}}}),
        ),
    ] {
        create(
            &t.h.tenant,
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podSelector": {}, "ingress": [{"from": [from]}]}}),
        )
        .await;
    }
    let pods = host_pod_labels(&t.h).await;
    let policies = t.h.host_api("networking.k8s.io/v1", "NetworkPolicy");

    let open = wait_for(&policies, &predicted("open", "default", "a")).await;
    assert_eq!(
        selected(&open.data["spec"]["podSelector"], &pods),
        names(&[("default", "a")])
    );
    assert_eq!(
        admitted(&open, &pods),
        names(&[("default", "a"), ("other", "a")])
    );

    let team_x = predicted("team-x", "default", "a");
    let labelled = wait_for(&policies, &team_x).await;
    assert_eq!(
        admitted(&labelled, &pods),
        BTreeSet::new(),
        "no namespace of a is labelled team=x"
    );

    // Labelling a's `other` re-syncs the policy: now it admits a's Pod there.
    merge_patch(
        &dynamic(&t.h.tenant, "v1", "Namespace", None),
        "other",
        json!({"metadata": {"labels": {"team": "x"}}}),
    )
    .await;
    let expected = names(&[("other", "a")]);
    wait_for_that(&policies, &team_x, "admits a's team=x namespace", |p| {
        admitted(p, &pods) == expected
    })
    .await;
}
