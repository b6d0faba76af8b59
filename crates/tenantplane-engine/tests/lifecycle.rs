//! The lifecycle of TenantClusters against real API servers: two tenants in one
//! host namespace, a tenant API server that goes away mid-sync, deletion and
//! cleanup, degraded conditions, policy changes, immutable fields, fairness and
//! Events.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::harness::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// A synced TenantCluster is rechecked every 30s and the tenant gets 5s to answer;
/// a watch that lost its server retries with a backoff of up to 30s. Waits that
/// span a tenant outage allow for both.
const OUTAGE_DEADLINE: Duration = Duration::from_secs(60);
/// How soon a stopped tenant API server shows in the TenantCluster's status.
const OUTAGE_NOTICED: Duration = Duration::from_secs(10);

fn secret(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": data})
}

fn sync_decisions(h: &Harness) -> Api<DynamicObject> {
    dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "SyncDecision",
        Some(&h.ns),
    )
}

async fn phase(h: &Harness, name: &str) -> Option<String> {
    let tc = h.tenant_clusters().get(name).await.ok()?;
    tc.data["status"]["phase"].as_str().map(str::to_owned)
}

async fn wait_phase(h: &Harness, name: &str, wanted: &str) {
    eventually(
        &format!("TenantCluster {name} phase {wanted}"),
        || async move { (phase(h, name).await.as_deref() == Some(wanted)).then_some(()) },
    )
    .await;
}

/// The tenant's ConfigMaps of namespace `ns` as host name -> data, and the host's
/// copies of `tenant` as host name -> data, checking that no two host objects claim
/// the same tenant object.
async fn tenant_and_host_configmaps(
    tenant_client: &Client,
    host: &Api<DynamicObject>,
    ns: &str,
    tenant: &str,
) -> Option<(BTreeMap<String, Value>, BTreeMap<String, Value>)> {
    let tenant_api = dynamic(tenant_client, "v1", "ConfigMap", Some(ns));
    let expected: BTreeMap<String, Value> = tenant_api
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .map(|o| {
            (
                predicted(&o.metadata.name.unwrap(), ns, tenant),
                o.data["data"].clone(),
            )
        })
        .collect();
    let copies = host
        .list(&ListParams::default().labels(&format!("tenantplane.io/tenant={tenant}")))
        .await
        .ok()?
        .items;
    let mut sources: Vec<(String, String)> = copies
        .iter()
        .map(|o| {
            let a = o.metadata.annotations.clone().unwrap_or_default();
            (
                a.get("tenantplane.io/virtual-namespace")
                    .cloned()
                    .unwrap_or_default(),
                a.get("tenantplane.io/virtual-name")
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    let claimed = sources.len();
    sources.sort();
    sources.dedup();
    assert_eq!(
        sources.len(),
        claimed,
        "two host copies of one tenant object"
    );
    let actual = copies
        .into_iter()
        .map(|o| (o.metadata.name.unwrap(), o.data["data"].clone()))
        .collect();
    Some((expected, actual))
}

#[tokio::test]
async fn two_tenant_clusters_in_one_namespace_keep_identically_named_objects_apart() {
    let h = Harness::start_on_shared_host().await;
    let qa_server = h
        .env
        .start_apiserver_with_crds("tenant-qa", tenant_crds())
        .await
        .expect("tenant-qa");
    let qa = qa_server.client().await.unwrap();
    kubeconfig_secret(
        &h.host,
        &h.ns,
        "qa-kubeconfig",
        &qa_server.kubeconfig_yaml("admin").unwrap(),
    )
    .await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(
        &h.host,
        tenant_cluster("qa", &h.ns, "fast", "default", "qa-kubeconfig"),
    )
    .await;
    for (client, who) in [(&h.tenant, "dev"), (&qa, "qa")] {
        create(
            client,
            configmap("default", "settings", json!({"who": who})),
        )
        .await;
        create(client, configmap("default", "other", json!({"who": who}))).await;
    }

    let cms = h.host_api("v1", "ConfigMap");
    let dev_name = predicted("settings", "default", "dev");
    let qa_name = predicted("settings", "default", "qa");
    assert_ne!(dev_name, qa_name);
    let dev_copy = wait_for(&cms, &dev_name).await;
    let qa_copy = wait_for(&cms, &qa_name).await;
    assert_eq!(dev_copy.data["data"]["who"], "dev");
    assert_eq!(qa_copy.data["data"]["who"], "qa");
    assert_eq!(
        dev_copy.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "dev"
    );
    assert_eq!(
        qa_copy.metadata.labels.clone().unwrap()["tenantplane.io/tenant"],
        "qa"
    );
    h.wait_synced("dev").await;
    h.wait_synced("qa").await;

    // An update in dev reaches dev's copy only.
    merge_patch(
        &h.tenant_api("v1", "ConfigMap", "default"),
        "settings",
        json!({"data": {"who": "dev, updated"}}),
    )
    .await;
    wait_for_that(&cms, &dev_name, "dev's update", |o| {
        o.data["data"]["who"] == "dev, updated"
    })
    .await;
    // Two full passes of qa's four kinds.
    controller.wait_passes("qa", 8).await;
    let qa_now = cms.get(&qa_name).await.unwrap();
    assert_eq!(
        qa_now.metadata.resource_version, qa_copy.metadata.resource_version,
        "dev's update touched qa's copy"
    );
    assert_eq!(qa_now.data["data"]["who"], "qa");

    // A delete in qa removes qa's copy only.
    let dev_before = cms.get(&dev_name).await.unwrap();
    dynamic(&qa, "v1", "ConfigMap", Some("default"))
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&cms, &qa_name).await;
    controller.wait_passes("dev", 8).await;
    let dev_after = cms.get(&dev_name).await.unwrap();
    assert_eq!(
        dev_after.metadata.resource_version, dev_before.metadata.resource_version,
        "qa's delete touched dev's copy"
    );
    assert_eq!(
        managed_names(&cms, "dev").await,
        vec![
            predicted("other", "default", "dev"),
            predicted("settings", "default", "dev")
        ]
    );
    assert_eq!(
        managed_names(&cms, "qa").await,
        vec![predicted("other", "default", "qa")]
    );

    // Each TenantCluster's SyncDecision speaks of its own host objects only.
    eventually("qa's Delete decision recorded", || async {
        h.decisions("qa")
            .await
            .iter()
            .any(|d| d["action"] == "Delete")
            .then_some(())
    })
    .await;
    for tenant in ["dev", "qa"] {
        let decisions = h.decisions(tenant).await;
        assert!(!decisions.is_empty());
        for d in &decisions {
            let host = d["host"]["name"].as_str().unwrap();
            assert!(host.ends_with(&format!("-x-{tenant}")), "{tenant}: {d}");
        }
    }
    controller.stop().await;
}

#[tokio::test]
async fn a_tenant_api_server_stopped_and_restarted_mid_sync_converges_exactly() {
    let mut h = Harness::start_on_shared_host().await;
    // Paced, so the outage begins while most creates are still queued.
    create(&h.host, profile(&h.named("paced"), 10, 1)).await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with(&h.named("paced"), "default").await;
    h.wait_synced("dev").await;
    for i in 0..40 {
        create(
            &h.tenant,
            configmap("default", &format!("cm-{i}"), json!({"i": i.to_string()})),
        )
        .await;
    }
    let cms = h.host_api("v1", "ConfigMap");
    let on_host = eventually("some copies on the host", || async {
        let n = managed_names(&cms, "dev").await.len();
        (n >= 3).then_some(n)
    })
    .await;

    h.tenant_server.stop();
    // Well inside the 30 s a synced TenantCluster waits for its next look: only the
    // engine's failing tenant watches waking the reconcile can meet it.
    let message = h
        .wait_condition("dev", "Ready", "False", "TenantUnreachable", OUTAGE_NOTICED)
        .await;
    assert!(
        message.contains(&h.tenant_server.url()),
        "the message names the tenant endpoint: {message}"
    );
    let (status, reason, _) = h.condition("dev", "Synced").await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "TenantUnreachable")
    );
    assert_eq!(phase(&h, "dev").await.as_deref(), Some("Degraded"));
    assert!(
        controller.is_running(),
        "the controller died with the tenant"
    );
    // Nothing synced so far was collected while the tenant could not be read.
    assert!(managed_names(&cms, "dev").await.len() >= on_host);

    h.tenant_server.start().await.expect("tenant restarts");
    let tenant = h.tenant_server.client().await.unwrap();
    for i in 40..45 {
        create(
            &tenant,
            configmap("default", &format!("cm-{i}"), json!({"i": i.to_string()})),
        )
        .await;
    }
    let tenant_cms = dynamic(&tenant, "v1", "ConfigMap", Some("default"));
    for i in 0..5 {
        tenant_cms
            .delete(&format!("cm-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    merge_patch(&tenant_cms, "cm-20", json!({"data": {"i": "twenty"}})).await;

    // Exactly the tenant's set, with the tenant's data: none lost, none left over.
    let (expected, actual) = eventually_within(
        "the host holds exactly the tenant's ConfigMaps",
        OUTAGE_DEADLINE,
        || async {
            let (expected, actual) =
                tenant_and_host_configmaps(&tenant, &cms, "default", "dev").await?;
            (expected == actual).then_some((expected, actual))
        },
    )
    .await;
    assert_eq!(expected.len(), 40);
    assert_eq!(actual[&predicted("cm-20", "default", "dev")]["i"], "twenty");
    h.wait_condition("dev", "Ready", "True", "TenantReachable", DEADLINE)
        .await;
    h.wait_synced("dev").await;
    wait_phase(&h, "dev", "Ready").await;
    assert!(controller.is_running());
    controller.stop().await;
}

/// Creates TenantCluster dev with one object of every kind, then deletes the
/// TenantCluster (after stopping the tenant API server when `stop_tenant_first`)
/// and checks everything it made is gone, and nothing else.
async fn deleting_a_tenant_cluster_removes_what_it_made(stop_tenant_first: bool) {
    let mut h = Harness::start_on_shared_host().await;
    let foreign_cm = create(
        &h.host,
        configmap(&h.ns, "not-ours", json!({"owner": "someone else"})),
    )
    .await;
    let foreign_secret = create(&h.host, secret(&h.ns, "not-ours-either", json!({"k": "v"}))).await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(&h.tenant, configmap("default", "a", json!({"k": "a"}))).await;
    create(&h.tenant, configmap("default", "b", json!({"k": "b"}))).await;
    create(&h.tenant, secret("default", "s", json!({"k": "s"}))).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
                             "spec": {"ports": [{"port": 80}]}})).await;
    create(&h.tenant, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
                             "spec": {"size": 1}})).await;
    let synced = [
        ("v1", "ConfigMap", "a"),
        ("v1", "ConfigMap", "b"),
        ("v1", "Secret", "s"),
        ("v1", "Service", "svc"),
        ("example.com/v1", "Widget", "w"),
    ];
    for (api_version, kind, name) in synced {
        wait_for(
            &h.host_api(api_version, kind),
            &predicted(name, "default", "dev"),
        )
        .await;
    }
    h.wait_synced("dev").await;
    wait_for(&sync_decisions(&h), "dev").await;

    if stop_tenant_first {
        h.tenant_server.stop();
    }
    h.tenant_clusters()
        .delete("dev", &DeleteParams::default())
        .await
        .unwrap();
    // The finalizer is removed only once cleanup is done.
    wait_gone(&h.tenant_clusters(), "dev").await;
    for (api_version, kind, _) in synced {
        assert_eq!(
            managed_names(&h.host_api(api_version, kind), "dev").await,
            Vec::<String>::new(),
            "{kind} copies left after the TenantCluster was deleted"
        );
    }
    assert!(
        sync_decisions(&h).get_opt("dev").await.unwrap().is_none(),
        "the SyncDecision outlived its TenantCluster"
    );
    let cms = h.host_api("v1", "ConfigMap");
    let secrets = h.host_api("v1", "Secret");
    for (api, foreign) in [(&cms, &foreign_cm), (&secrets, &foreign_secret)] {
        let now = api
            .get(foreign.metadata.name.as_ref().unwrap())
            .await
            .unwrap();
        assert_eq!(now.metadata.uid, foreign.metadata.uid);
        assert_eq!(
            now.metadata.resource_version,
            foreign.metadata.resource_version
        );
    }
    assert!(secrets.get_opt("dev-kubeconfig").await.unwrap().is_some());
    assert!(controller.is_running());
    controller.stop().await;
}

#[tokio::test]
async fn deleting_a_tenant_cluster_removes_its_host_copies_its_decisions_and_itself() {
    deleting_a_tenant_cluster_removes_what_it_made(false).await;
}

#[tokio::test]
async fn a_tenant_cluster_whose_tenant_server_is_gone_is_still_cleaned_up() {
    deleting_a_tenant_cluster_removes_what_it_made(true).await;
}

#[tokio::test]
async fn unresolvable_references_degrade_with_a_reason_naming_the_missing_thing() {
    let h = Harness::start().await;
    let good = h.tenant_server.kubeconfig_yaml("admin").unwrap();
    create(&h.host, secret(HOST_NS, "keyless", json!({"config": good}))).await;
    // Whatever is in the Secret may be a credential: it must not be repeated.
    kubeconfig_secret(&h.host, HOST_NS, "garbage", "token-7f3a9c-do-not-repeat").await;
    let controller = Controller::start(&h.host).await;
    // (TenantCluster, profile, policy, Secret, reason, what the message must name)
    let cases = [
        (
            "no-profile",
            "absent-profile",
            "default",
            "dev-kubeconfig",
            "IsolationProfileNotFound",
            "absent-profile",
        ),
        (
            "no-policy",
            "fast",
            "absent-policy",
            "dev-kubeconfig",
            "SyncPolicyNotFound",
            "absent-policy",
        ),
        (
            "no-secret",
            "fast",
            "default",
            "absent-secret",
            "KubeconfigSecretNotFound",
            "absent-secret",
        ),
        (
            "no-key",
            "fast",
            "default",
            "keyless",
            "KubeconfigKeyMissing",
            "\"kubeconfig\"",
        ),
        (
            "bad-kubeconfig",
            "fast",
            "default",
            "garbage",
            "InvalidKubeconfig",
            "garbage",
        ),
    ];
    for (name, profile, policy, secret, _, _) in cases {
        create(
            &h.host,
            tenant_cluster(name, HOST_NS, profile, policy, secret),
        )
        .await;
    }
    for (name, _, _, secret, reason, names) in cases {
        let message = h
            .wait_condition(name, "Ready", "False", reason, DEADLINE)
            .await;
        assert!(message.contains(names), "{name}: {message}");
        if reason.starts_with("Kubeconfig") || reason == "InvalidKubeconfig" {
            assert!(message.contains(secret), "{name}: {message}");
        }
        assert!(
            !message.contains("7f3a9c") && !message.contains(&good),
            "{name}: the message repeats the Secret's content: {message}"
        );
        let (status, synced_reason, _) = h.condition(name, "Synced").await.unwrap();
        assert_eq!((status.as_str(), synced_reason.as_str()), ("False", reason));
        assert_eq!(phase(&h, name).await.as_deref(), Some("Degraded"), "{name}");
    }

    // Fixing the reference is enough: the TenantCluster becomes Ready and syncs.
    create(&h.host, profile("absent-profile", 1000, 2000)).await;
    h.wait_condition("no-profile", "Ready", "True", "TenantReachable", DEADLINE)
        .await;
    h.wait_synced("no-profile").await;
    wait_phase(&h, "no-profile", "Ready").await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v"}))).await;
    wait_for(
        &h.host_api("v1", "ConfigMap"),
        &predicted("app", "default", "no-profile"),
    )
    .await;
    // The others are still degraded, for the same reasons.
    for (name, _, _, _, reason, _) in &cases[1..] {
        let (status, now, _) = h.condition(name, "Ready").await.unwrap();
        assert_eq!((status.as_str(), now.as_str()), ("False", *reason));
    }
    controller.stop().await;
}

#[tokio::test]
async fn a_kind_the_tenant_does_not_serve_is_reported_while_the_others_sync() {
    let h = Harness::start_on_shared_host().await;
    create(
        &h.host,
        policy(
            &h.named("with-gadget"),
            &[("v1", "ConfigMap"), ("example.com/v1", "Gadget")],
            "2s",
        ),
    )
    .await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &h.named("with-gadget")).await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v"}))).await;
    let cms = h.host_api("v1", "ConfigMap");
    let name = predicted("app", "default", "dev");
    wait_for(&cms, &name).await;
    let message = h
        .wait_condition("dev", "Synced", "False", "KindUnavailable", DEADLINE)
        .await;
    assert!(
        message.contains("example.com/v1 Gadget"),
        "the message names the kind: {message}"
    );
    let (ready, _, _) = h.condition("dev", "Ready").await.unwrap();
    assert_eq!(ready, "True");
    // ConfigMaps keep syncing.
    merge_patch(
        &h.tenant_api("v1", "ConfigMap", "default"),
        "app",
        json!({"data": {"k": "v2"}}),
    )
    .await;
    wait_for_that(&cms, &name, "updated", |o| o.data["data"]["k"] == "v2").await;
    controller.stop().await;
}

#[tokio::test]
async fn a_kind_removed_from_the_policy_stops_syncing_and_its_copies_stay_until_deletion() {
    let h = Harness::start_on_shared_host().await;
    // A policy of its own: the test changes it.
    let own_policy = h.named("default");
    create(&h.host, policy(&own_policy, DEFAULT_KINDS, "2s")).await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &own_policy).await;
    create(&h.tenant, secret("default", "old", json!({"k": "old"}))).await;
    let secrets = h.host_api("v1", "Secret");
    let old_name = predicted("old", "default", "dev");
    let old_copy = wait_for(&secrets, &old_name).await;
    h.wait_synced("dev").await;

    let lists_before = tenant_configmap_lists(&h).await;
    let kept: Vec<(&str, &str)> = DEFAULT_KINDS
        .iter()
        .copied()
        .filter(|(_, kind)| *kind != "Secret")
        .collect();
    let patched = policy(&own_policy, &kept, "2s");
    merge_patch(
        &dynamic(&h.host, "tenantplane.io/v1alpha1", "SyncPolicy", None),
        &own_policy,
        json!({"spec": {"resources": patched["spec"]["resources"]}}),
    )
    .await;
    // The engine is restarted for the new policy: its ConfigMap syncer lists the
    // tenant again (the old engine is stopped before the new one starts).
    eventually("the engine restarted with the new policy", || async {
        (tenant_configmap_lists(&h).await > lists_before).then_some(())
    })
    .await;

    create(&h.tenant, secret("default", "new", json!({"k": "new"}))).await;
    create(&h.tenant, configmap("default", "marker", json!({"k": "v"}))).await;
    wait_for(
        &h.host_api("v1", "ConfigMap"),
        &predicted("marker", "default", "dev"),
    )
    .await;
    // Two full passes of the three kinds left.
    controller.wait_passes("dev", 6).await;
    assert!(
        secrets
            .get_opt(&predicted("new", "default", "dev"))
            .await
            .unwrap()
            .is_none(),
        "a Secret was synced after Secret was removed from the policy"
    );
    let old_now = secrets.get(&old_name).await.unwrap();
    assert_eq!(
        old_now.metadata.resource_version, old_copy.metadata.resource_version,
        "the existing copy is left as it was"
    );
    let tc = h.tenant_clusters().get("dev").await.unwrap();
    assert!(
        tc.data["status"]["syncedResources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "Secret"),
        "status.syncedResources forgot Secret: {}",
        tc.data["status"]
    );

    // Deleting the TenantCluster removes the leftover copy too.
    h.tenant_clusters()
        .delete("dev", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&h.tenant_clusters(), "dev").await;
    assert_eq!(managed_names(&secrets, "dev").await, Vec::<String>::new());
    assert_eq!(
        managed_names(&h.host_api("v1", "ConfigMap"), "dev").await,
        Vec::<String>::new()
    );
    controller.stop().await;
}

/// LIST requests for ConfigMaps the tenant API server has answered.
async fn tenant_configmap_lists(h: &Harness) -> u64 {
    let counts = h.tenant_server.request_counts().await.unwrap();
    counts
        .by_verb_resource
        .get(&("LIST".to_owned(), "configmaps".to_owned()))
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn allocated_and_immutable_fields_are_kept_when_the_tenant_updates() {
    let h = Harness::start_on_shared_host().await;
    create(
        &h.host,
        policy(
            &h.named("with-pods"),
            &[("v1", "Service"), ("v1", "Pod")],
            "2s",
        ),
    )
    .await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &h.named("with-pods")).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "web"}}})).await;

    let services = h.host_api("v1", "Service");
    let svc_name = predicted("web", "default", "dev");
    let svc_before = wait_for(&services, &svc_name).await;
    let cluster_ip = svc_before.data["spec"]["clusterIP"].clone();
    let node_port = svc_before.data["spec"]["ports"][0]["nodePort"].clone();
    assert!(cluster_ip.is_string(), "{}", svc_before.data);
    assert!(node_port.is_number(), "{}", svc_before.data);
    // The tenant Service is re-created once with the host's address (see
    // tests/services.rs); update it after that, not during.
    let tenant_services = h.tenant_api("v1", "Service", "default");
    eventually("the tenant Service with the host's ClusterIP", || {
        let (tenant_services, cluster_ip) = (tenant_services.clone(), cluster_ip.clone());
        async move {
            let tenant = tenant_services.get_opt("web").await.unwrap()?;
            (tenant.data["spec"]["clusterIP"] == cluster_ip).then_some(())
        }
    })
    .await;
    // The Pod comes after: its service environment is fixed at creation (env is
    // immutable), so a Pod created while the Service is re-created would keep the
    // old address and its later updates would be Skips, which is not this test's point.
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "env": [{"name": "MODE", "value": "a"}]}]}})).await;

    merge_patch(
        &h.tenant_api("v1", "Service", "default"),
        "web",
        json!({"spec": {"selector": {"app": "web-v2"}}}),
    )
    .await;
    let svc_after = wait_for_that(&services, &svc_name, "selector updated", |o| {
        o.data["spec"]["selector"]["app"] == "web-v2"
    })
    .await;
    assert_eq!(svc_after.metadata.uid, svc_before.metadata.uid, "recreated");
    assert_eq!(svc_after.data["spec"]["clusterIP"], cluster_ip);
    assert_eq!(
        svc_after.data["spec"]["clusterIPs"],
        svc_before.data["spec"]["clusterIPs"]
    );
    assert_eq!(svc_after.data["spec"]["ports"][0]["nodePort"], node_port);
    assert_eq!(svc_after.data["spec"]["ports"][0]["targetPort"], 8080);

    let pods = h.host_api("v1", "Pod");
    let pod_name = predicted("p", "default", "dev");
    let pod_before = wait_for(&pods, &pod_name).await;
    h.tenant_api("v1", "Pod", "default")
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::<Value>::Json(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let pod_after = wait_for_that(&pods, &pod_name, "image updated", |o| {
        o.data["spec"]["containers"][0]["image"] == "nginx:1.26"
    })
    .await;
    assert_eq!(pod_after.metadata.uid, pod_before.metadata.uid, "recreated");
    let without_image = |pod: &DynamicObject| {
        let mut spec = pod.data["spec"].clone();
        spec["containers"][0]["image"] = Value::Null;
        spec
    };
    assert_eq!(
        without_image(&pod_after),
        without_image(&pod_before),
        "the rest of the host Pod's spec changed"
    );

    // Converged: more passes write neither again.
    controller.wait_passes("dev", 4).await;
    let svc_now = services.get(&svc_name).await.unwrap();
    let pod_now = pods.get(&pod_name).await.unwrap();
    assert_eq!(
        svc_now.metadata.resource_version,
        svc_after.metadata.resource_version
    );
    assert_eq!(
        pod_now.metadata.resource_version,
        pod_after.metadata.resource_version
    );
    let decisions = h.decisions("dev").await;
    for kind in ["Service", "Pod"] {
        assert!(
            decisions
                .iter()
                .any(|d| d["action"] == "Update" && d["kind"] == kind),
            "no {kind} Update in {decisions:?}"
        );
        assert!(
            !decisions
                .iter()
                .any(|d| d["action"] == "Skip" && d["kind"] == kind),
            "a {kind} update was skipped: {decisions:?}"
        );
    }
    controller.stop().await;
}

#[tokio::test]
async fn api_fairness_paces_host_writes_and_the_decisions_say_so() {
    let h = Harness::start_on_shared_host().await;
    create(&h.host, profile(&h.named("paced"), 5, 1)).await;
    for i in 0..10 {
        create(
            &h.tenant,
            configmap("default", &format!("cm-{i}"), json!({"i": i.to_string()})),
        )
        .await;
    }
    let controller = Controller::start_for(&h).await;
    let start = Instant::now();
    h.create_dev_with(&h.named("paced"), "default").await;
    let cms = h.host_api("v1", "ConfigMap");
    let mut expected: Vec<String> = (0..10)
        .map(|i| predicted(&format!("cm-{i}"), "default", "dev"))
        .collect();
    expected.sort();
    eventually("all ten synced", || async {
        (managed_names(&cms, "dev").await == expected).then_some(())
    })
    .await;
    // One write is free (burst 1), the other nine take 200ms each at 5 writes/s.
    assert!(
        start.elapsed() >= Duration::from_millis(1700),
        "ten writes at 5/s took only {:?}",
        start.elapsed()
    );
    let creates = eventually("ten Create decisions", || async {
        let creates: Vec<Value> = h
            .decisions("dev")
            .await
            .into_iter()
            .filter(|d| d["action"] == "Create" && d["kind"] == "ConfigMap")
            .collect();
        (creates.len() == 10).then_some(creates)
    })
    .await;
    let waited: Vec<&str> = creates
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .filter(|r| r.contains("apiFairness"))
        .collect();
    assert!(
        waited.len() >= 5,
        "only {} of 10 creates waited for the budget: {creates:?}",
        waited.len()
    );
    assert!(
        waited.iter().all(|r| r.contains("(5 writes/s)")),
        "{waited:?}"
    );
    controller.stop().await;
}

#[tokio::test]
async fn decisions_are_events_on_the_tenant_cluster_without_secret_data() {
    const PASSWORD: &str = "correct-horse-battery-staple-4417";
    let h = Harness::start_on_shared_host().await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(
        &h.tenant,
        secret("default", "creds", json!({"password": PASSWORD})),
    )
    .await;
    create(&h.tenant, configmap("default", "a", json!({"k": "a"}))).await;
    create(&h.tenant, configmap("default", "b", json!({"k": "b"}))).await;
    let cms = h.host_api("v1", "ConfigMap");
    let secrets = h.host_api("v1", "Secret");
    let secret_name = predicted("creds", "default", "dev");
    wait_for(&secrets, &secret_name).await;
    wait_for(&cms, &predicted("b", "default", "dev")).await;
    let a = predicted("a", "default", "dev");
    wait_for(&cms, &a).await;
    // An update of the Secret and a delete.
    merge_patch(
        &h.tenant_api("v1", "Secret", "default"),
        "creds",
        json!({"stringData": {"password": format!("{PASSWORD}-2")}}),
    )
    .await;
    wait_for_that(&secrets, &secret_name, "updated", |o| {
        o.data["data"]["password"] != json!(ByteString(PASSWORD.as_bytes().to_vec()))
    })
    .await;
    h.tenant_api("v1", "ConfigMap", "default")
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&cms, &a).await;

    let tc_uid = h.tenant_clusters().get("dev").await.unwrap().metadata.uid;
    let events_api = dynamic(&h.host, "events.k8s.io/v1", "Event", Some(&h.ns));
    let events = eventually("Create, Update and Delete events", || async {
        let events: Vec<DynamicObject> = events_api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| {
                e.data["regarding"]["kind"] == "TenantCluster"
                    && e.data["regarding"]["name"] == "dev"
            })
            .collect();
        let has = |reason: &str| events.iter().any(|e| e.data["reason"] == reason);
        (has("Create") && has("Update") && has("Delete")).then_some(events)
    })
    .await;
    for e in &events {
        assert_eq!(e.data["regarding"]["uid"].as_str(), tc_uid.as_deref());
        assert_eq!(e.data["reportingController"], "tenantplane.io/sync-engine");
        let expected_type = if e.data["reason"] == "Delete" {
            "Warning"
        } else {
            "Normal"
        };
        assert_eq!(e.data["type"], expected_type, "{}", e.data);
    }
    let delete = events
        .iter()
        .find(|e| e.data["reason"] == "Delete")
        .unwrap();
    assert!(
        delete.data["note"].as_str().unwrap().contains(&a),
        "{}",
        delete.data
    );
    // Each Create has an Event of its own, naming its object.
    for host in [&secret_name, &a, &predicted("b", "default", "dev")] {
        assert!(
            events.iter().any(|e| e.data["reason"] == "Create"
                && e.data["note"].as_str().unwrap().contains(host.as_str())),
            "no Create Event names {host}: {:?}",
            events.iter().map(|e| &e.data["note"]).collect::<Vec<_>>()
        );
    }

    // No Event in the namespace repeats the Secret's data, plain or base64.
    let all = events_api.list(&ListParams::default()).await.unwrap();
    let text = serde_json::to_string(&all.items).unwrap();
    for value in [PASSWORD.to_owned(), format!("{PASSWORD}-2")] {
        let encoded = json!(ByteString(value.as_bytes().to_vec()));
        assert!(!text.contains(&value), "an Event holds the Secret's data");
        assert!(
            !text.contains(encoded.as_str().unwrap()),
            "an Event holds the Secret's data (base64)"
        );
    }
    controller.stop().await;
}

/// The whole lifecycle of a provisioned control plane through the controller:
/// Provisioning until the control-plane pod is Ready (the test plays the
/// StatefulSet controller and the kubelet), then the engine is pointed at the
/// in-cluster Service (unreachable from this test, so `TenantUnreachable` naming
/// it); an unsupported version is refused with what to change; deletion removes the
/// TenantCluster.
#[tokio::test]
async fn a_provisioned_control_plane_goes_through_its_phases() {
    let h = Harness::start_on_shared_host().await;
    let controller = Controller::start_for(&h).await;
    let tc = |name: &str, version: &str| {
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": name, "namespace": h.ns},
               "spec": {"kubernetesVersion": version, "isolationProfileRef": {"name": "fast"},
                        "syncPolicyRef": {"name": "default"}}})
    };
    create(&h.host, tc("prov", "v1.31")).await;
    create(&h.host, tc("old", "v1.27")).await;
    let deadline = Duration::from_secs(30);

    let message = h
        .wait_condition("prov", "Ready", "False", "Provisioning", deadline)
        .await;
    assert!(!message.is_empty());
    let tcs = dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "TenantCluster",
        Some(&h.ns),
    );
    assert_eq!(
        tcs.get("prov").await.unwrap().data["status"]["phase"],
        "Provisioning"
    );
    let (status, _, _) = h.condition("prov", "IsolationApplied").await.unwrap();
    assert_eq!(
        status, "True",
        "the boundary is in place before the control plane"
    );

    let refused = h
        .wait_condition(
            "old",
            "Ready",
            "False",
            "UnsupportedKubernetesVersion",
            deadline,
        )
        .await;
    assert!(
        refused.contains("v1.31"),
        "the message lists supported versions: {refused}"
    );
    assert!(refused.contains("spec.kubernetesVersion"), "{refused}");
    assert_eq!(
        tcs.get("old").await.unwrap().data["status"]["phase"],
        "Degraded"
    );

    // Play the StatefulSet controller and the kubelet: the pod becomes Ready.
    let statefulsets: Api<StatefulSet> = Api::namespaced(h.host.clone(), &format!("{}-cp", h.ns));
    let sts = eventually("the control-plane StatefulSet", || async {
        statefulsets.get_opt("prov-cp").await.ok().flatten()
    })
    .await;
    play_statefulset_and_kubelet(&h.host, &sts).await;

    // Ready: the kubeconfig Secret exists and the engine dials the in-cluster Service.
    let unreachable = h
        .wait_condition(
            "prov",
            "Ready",
            "False",
            "TenantUnreachable",
            Duration::from_secs(45),
        )
        .await;
    assert!(
        unreachable.contains(&format!("prov-cp.{}-cp.svc", h.ns)),
        "{unreachable}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(h.host.clone(), &h.ns);
    assert!(secrets.get_opt("prov-kubeconfig").await.unwrap().is_some());

    for name in ["prov", "old"] {
        tcs.delete(name, &DeleteParams::default()).await.unwrap();
        wait_gone(&tcs, name).await;
    }
    controller.stop().await;
}

/// A plain-HTTP "API server" that, with `answers_version`, answers `/version` and
/// then never answers anything else (a hung aggregated API, a stuck proxy), and
/// without it answers nothing at all (a blackhole: TCP accepted, never a byte back),
/// until `release` fires. Returns its URL and how many requests it has held.
async fn stuck_api_server(
    release: tokio_util::sync::CancellationToken,
    answers_version: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&held);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = tokio::select! {
                accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => return },
                () = release.cancelled() => return,
            };
            let (release, counter) = (release.clone(), Arc::clone(&counter));
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let read = tokio::select! {
                        read = socket.read(&mut chunk) => read.unwrap_or(0),
                        () = release.cancelled() => return,
                    };
                    if read == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..read]);
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_string();
                    buffer.drain(..end + 4);
                    let path = head.split_whitespace().nth(1).unwrap_or_default();
                    if answers_version && path.starts_with("/version") {
                        let body = r#"{"major":"1","minor":"20","gitVersion":"v1.20.2","gitCommit":"x","gitTreeState":"clean","buildDate":"2021-01-01T00:00:00Z","goVersion":"go1.15","compiler":"gc","platform":"linux/amd64"}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    } else {
                        counter.fetch_add(1, Ordering::SeqCst);
                        // Held open, unanswered, until released.
                        release.cancelled().await;
                        return;
                    }
                }
            });
        }
    });
    (url, held)
}

fn stuck_kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stuck\n  cluster:\n    server: {url}\nusers:\n- name: anyone\n  user: {{}}\ncontexts:\n- name: stuck\n  context:\n    cluster: stuck\n    user: anyone\ncurrent-context: stuck\n"
    )
}

/// A tenant API server that answers `/version` and then hangs, and one that
/// accepts TCP and never answers, each keep their own TenantCluster's engine
/// starting, and delay no other TenantCluster: no lock is held across one tenant's
/// network I/O. Once the healthy tenant runs, a new object of it reaches the host
/// within a second while the other two are still starting.
#[tokio::test]
async fn tenants_stuck_while_their_engines_start_delay_no_other_tenant() {
    use std::sync::atomic::Ordering;

    let h = Harness::start().await;
    let release = tokio_util::sync::CancellationToken::new();
    let (stuck_url, stuck_held) = stuck_api_server(release.clone(), true).await;
    let (blackhole_url, blackhole_held) = stuck_api_server(release.clone(), false).await;
    kubeconfig_secret(
        &h.host,
        HOST_NS,
        "stuck-kubeconfig",
        &stuck_kubeconfig(&stuck_url),
    )
    .await;
    kubeconfig_secret(
        &h.host,
        HOST_NS,
        "blackhole-kubeconfig",
        &stuck_kubeconfig(&blackhole_url),
    )
    .await;
    // A fromHost kind: starting the engine reads the tenant's discovery.
    create(
        &h.host,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "stuck"},
               "spec": {"resources": [
                   {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "direction": "fromHost"},
                   {"apiVersion": "v1", "kind": "ConfigMap", "direction": "toHost"}]}}),
    )
    .await;
    let controller = Controller::start(&h.host).await;
    create(
        &h.host,
        tenant_cluster("stuck", HOST_NS, "fast", "stuck", "stuck-kubeconfig"),
    )
    .await;
    create(
        &h.host,
        tenant_cluster(
            "blackhole",
            HOST_NS,
            "fast",
            "stuck",
            "blackhole-kubeconfig",
        ),
    )
    .await;
    eventually("both stuck tenants' engines starting", || async {
        (stuck_held.load(Ordering::SeqCst) > 0 && blackhole_held.load(Ordering::SeqCst) > 0)
            .then_some(())
    })
    .await;

    // While they hang, another TenantCluster starts and syncs.
    h.create_dev().await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v"}))).await;
    let copies = h.host_api("v1", "ConfigMap");
    eventually(
        "the healthy tenant's ConfigMap on the host while the others hang",
        || async {
            copies
                .get_opt(&predicted("app", "default", "dev"))
                .await
                .ok()
                .flatten()
        },
    )
    .await;
    h.wait_synced("dev").await;

    // Its engine running, a new object of it is on the host within a second.
    let start = Instant::now();
    create(&h.tenant, configmap("default", "next", json!({"k": "v"}))).await;
    let next = predicted("next", "default", "dev");
    eventually_within(
        "the healthy tenant's next ConfigMap on the host within a second",
        Duration::from_secs(1),
        || async { copies.get_opt(&next).await.ok().flatten() },
    )
    .await;
    eprintln!(
        "healthy tenant's object on the host {:.3} s after its creation, two others still starting",
        start.elapsed().as_secs_f64()
    );
    assert!(stuck_held.load(Ordering::SeqCst) > 0);
    assert!(blackhole_held.load(Ordering::SeqCst) > 0);
    for stuck in ["stuck", "blackhole"] {
        let synced = h
            .condition(stuck, "Synced")
            .await
            .map(|(status, ..)| status);
        assert_ne!(synced.as_deref(), Some("True"), "{stuck} cannot be synced");
    }

    // Released: their requests fail, their reconciles end, the controller stops.
    release.cancel();
    controller.stop().await;
}

/// Open WATCH requests on `server` per resource, from `apiserver_longrunning_gauge`.
async fn watches_by_resource(server: &tenantplane_testenv::ApiServer) -> BTreeMap<String, u64> {
    let metrics = server.metrics_text().await.unwrap();
    let mut watches = BTreeMap::new();
    for line in metrics.lines() {
        if !line.starts_with("apiserver_longrunning_gauge{") || !line.contains("verb=\"WATCH\"") {
            continue;
        }
        let resource = line
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_owned();
        let open: f64 = line.rsplit_once(' ').unwrap().1.trim().parse().unwrap();
        if open > 0.0 {
            *watches.entry(resource).or_insert(0) += open.round() as u64;
        }
    }
    watches
}

/// The shared host watch keeps its objects (once in the hub, once in every
/// subscriber's store) without `managedFields`: nothing reads them, and at 1,000
/// TenantClusters they were a third of what the hub held.
#[tokio::test]
async fn the_shared_host_watch_caches_objects_without_managed_fields() {
    let h = Harness::start_on_shared_host().await;
    let cms = h.host_api("v1", "ConfigMap");
    let applied = cms
        .patch(
            "fields",
            &PatchParams::apply("some-owner"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "fields", "namespace": h.ns},
                "data": {"a": "b"},
            })),
        )
        .await
        .unwrap();
    // The API server records them, so the cache below has something to drop.
    assert!(
        applied
            .metadata
            .managed_fields
            .as_ref()
            .is_some_and(|f| !f.is_empty()),
        "{:?}",
        applied.metadata
    );
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let writer = kube::runtime::reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let watches = tenantplane_engine::host_watches::HostWatches::new(h.host.clone());
    let _subscription = watches.subscribe(
        &resource,
        None,
        tenantplane_engine::host_watches::Interest::Namespace(h.ns.clone()),
        Some(writer),
    );
    let cached = eventually("the ConfigMap in the subscriber's store", || {
        let store = store.clone();
        async move {
            store
                .state()
                .into_iter()
                .find(|o| o.metadata.name.as_deref() == Some("fields"))
        }
    })
    .await;
    assert_eq!(cached.data["data"]["a"], "b");
    assert_eq!(
        cached.metadata.managed_fields, None,
        "{:?}",
        cached.metadata
    );
}

#[tokio::test]
async fn host_watches_stay_the_same_for_one_tenant_cluster_or_five() {
    let h = Harness::start_on_fresh_host().await;
    let controller = Controller::start(&h.host).await;
    create(
        &h.tenant,
        configmap("default", "settings", json!({"a": "b"})),
    )
    .await;
    h.create_dev().await;
    let cms = h.host_api("v1", "ConfigMap");
    wait_for(&cms, &predicted("settings", "default", "dev")).await;
    h.wait_synced("dev").await;
    // The process-wide controllers' watches (the ResourcePool controller's open
    // last) are up before the count for one TenantCluster is taken: they are the
    // process's, not any TenantCluster's.
    let one = eventually("the ResourcePool controller's watches open", || async {
        let watches = watches_by_resource(&h.host_server).await;
        (watches.contains_key("resourcepools") && watches.contains_key("resourcepoolclaims"))
            .then_some(watches)
    })
    .await;
    assert!(one.get("configmaps").is_some_and(|n| *n >= 1), "{one:?}");

    // Four more TenantClusters on the same tenant API server, in the same namespace.
    let more = ["qa", "stage", "prod", "perf"];
    for name in more {
        create(
            &h.host,
            tenant_cluster(name, HOST_NS, "fast", "default", "dev-kubeconfig"),
        )
        .await;
    }
    for name in more {
        let copy = wait_for(&cms, &predicted("settings", "default", name)).await;
        assert_eq!(copy.metadata.labels.unwrap()["tenantplane.io/tenant"], name);
        h.wait_synced(name).await;
    }
    // Each engine's host watches are the process's shared ones: none added.
    let five = watches_by_resource(&h.host_server).await;
    assert_eq!(five, one, "host watches with five TenantClusters vs one");

    // And each engine still sees its own copies only: a host edit of one tenant's
    // copy is restored for that tenant, the others' copies untouched.
    let qa_copy = predicted("settings", "default", "qa");
    merge_patch(&cms, &qa_copy, json!({"data": {"a": "edited on the host"}})).await;
    wait_for_that(&cms, &qa_copy, "qa's copy restored", |o| {
        o.data["data"]["a"] == "b"
    })
    .await;
    for name in ["dev", "stage", "prod", "perf"] {
        let copy = cms
            .get(&predicted("settings", "default", name))
            .await
            .unwrap();
        assert_eq!(copy.data["data"]["a"], "b", "{name}");
    }
    controller.stop().await;
}

/// This process's established TCP connections to `port` on the loopback: its own
/// sockets (from /proc/self/fd) matched against the kernel's connection table.
fn connections_to(port: u16) -> usize {
    let own: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = fields[2]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 01 is ESTABLISHED; field 9 is the socket's inode.
            if remote_port == Some(port) && fields[3] == "01" && own.contains(fields[9]) {
                count += 1;
            }
        }
    }
    count
}

/// Opens `n` ConfigMap watches on `client`, returned so they stay open.
async fn open_watches(
    client: &Client,
    n: usize,
) -> Vec<
    impl futures::Stream<
        Item = kube::Result<kube::api::WatchEvent<k8s_openapi::api::core::v1::ConfigMap>>,
    >,
> {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let mut watches = Vec::new();
    for _ in 0..n {
        watches.push(
            cms.watch(&kube::api::WatchParams::default().timeout(290), "0")
                .await
                .unwrap(),
        );
    }
    watches
}

/// A tenant client multiplexes everything over one HTTP/2 connection: four open
/// watches and a request cost one TCP connection to the tenant API server, where
/// kube's default client (HTTP/1.1) holds one per watch. At 1,000 tenants that
/// was 2,000 TLS connections from one controller.
#[tokio::test]
async fn a_tenant_client_shares_one_http2_connection_between_its_watches() {
    let h = Harness::start_on_shared_host().await;
    let port = h.tenant_server.port();
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&h.tenant_server.kubeconfig_yaml("admin").unwrap())
            .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let before = connections_to(port);

    let client = tenantplane_engine::tenant_client::tenant_client(config.clone()).unwrap();
    let response = client
        .send(
            http::Request::get("/version")
                .body(Vec::new().into())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let _h2_watches = open_watches(&client, 4).await;
    assert_eq!(client.apiserver_version().await.unwrap().major, "1");
    assert_eq!(connections_to(port), before + 1);

    // The contrast that makes the count mean something: HTTP/1.1, one per watch.
    let plain = Client::try_from(config).unwrap();
    let _h1_watches = open_watches(&plain, 4).await;
    assert_eq!(connections_to(port), before + 1 + 4);
}

/// A controller scoped to one namespace (`ControllerConfig::namespace`, which the
/// tests on the shared host rely on) leaves the TenantClusters of every other
/// namespace alone.
#[tokio::test]
async fn a_controller_scoped_to_a_namespace_leaves_other_namespaces_alone() {
    let h = Harness::start_on_shared_host().await;
    let other = format!("{}-other", h.ns);
    create_namespace(&h.host, &other).await;
    kubeconfig_secret(
        &h.host,
        &other,
        "dev-kubeconfig",
        &h.tenant_server.kubeconfig_yaml("admin").unwrap(),
    )
    .await;
    create(
        &h.host,
        tenant_cluster("dev", &other, "fast", "default", "dev-kubeconfig"),
    )
    .await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v"}))).await;
    let copy = predicted("app", "default", "dev");
    wait_for(&h.host_api("v1", "ConfigMap"), &copy).await;
    h.wait_synced("dev").await;
    // By now a controller of every namespace would have given the other
    // TenantCluster its finalizer, its status and the same copy.
    let theirs = dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "TenantCluster",
        Some(&other),
    )
    .get("dev")
    .await
    .unwrap();
    assert!(
        theirs.metadata.finalizers.unwrap_or_default().is_empty(),
        "the other namespace's TenantCluster got a finalizer"
    );
    assert!(
        theirs.data.get("status").is_none(),
        "the other namespace's TenantCluster got a status: {:?}",
        theirs.data.get("status")
    );
    assert!(
        dynamic(&h.host, "v1", "ConfigMap", Some(&other))
            .get_opt(&copy)
            .await
            .unwrap()
            .is_none(),
        "a copy was made in the other namespace"
    );
    controller.stop().await;
}
