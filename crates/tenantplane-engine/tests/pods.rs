//! Pods with everything they use, against two real API servers. There is no
//! scheduler and no kubelet: the tests play them (bind host Pods, write status).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::*;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const POD_KINDS: &[(&str, &str)] = &[("v1", "Pod")];

/// Harness on the shared host with policy `pods` (Pods only: ConfigMaps and
/// Secrets are copied only for Pods) and TenantCluster `dev` on it, tenant
/// namespace `shop`.
async fn start() -> (Harness, Controller) {
    with_pods_policy(Harness::start_on_shared_host().await).await
}

/// [`start`] on a host of the test's own: for tests that count the host's
/// requests or stop it.
async fn start_own_host() -> (Harness, Controller) {
    with_pods_policy(Harness::start().await).await
}

async fn with_pods_policy(h: Harness) -> (Harness, Controller) {
    let pods = h.named("pods");
    create(&h.host, policy(&pods, POD_KINDS, "2s")).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &pods).await;
    (h, controller)
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}}, "spec": spec})
}

fn secret(ns: &str, name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": {"password": value}})
}

/// Plays the kubelet on the host: binds the host Pod to `node` and reports it Running.
async fn kubelet_runs(host: &Client, ns: &str, name: &str, node: &str) {
    let pods = dynamic(host, "v1", "Pod", Some(ns));
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let request = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    host.request_text(request).await.expect("bind the host Pod");
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "hostIP": "10.1.0.4", "podIP": "10.2.0.9",
            "podIPs": [{"ip": "10.2.0.9"}], "startTime": "2026-01-01T00:00:00Z", "qosClass": "BestEffort",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "",
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}]}})),
    )
    .await
    .unwrap();
}

fn annotations(o: &kube::api::DynamicObject) -> std::collections::BTreeMap<String, String> {
    o.metadata.annotations.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_pod_brings_its_dependencies_reports_status_and_settles() {
    let (h, controller) = start_own_host().await;
    create(&h.tenant, configmap("shop", "vol-cm", json!({"a": "1"}))).await;
    create(&h.tenant, configmap("shop", "env-cm", json!({"k": "v"}))).await;
    create(&h.tenant, secret("shop", "db", "hunter2")).await;
    create(&h.tenant, pod("web", json!({
        "volumes": [{"name": "cfg", "configMap": {"name": "vol-cm"}},
                    {"name": "opt", "configMap": {"name": "not-there", "optional": true}},
                    {"name": "proj", "projected": {"sources": [{"secret": {"name": "db"}}]}}],
        "imagePullSecrets": [{"name": "db"}],
        "initContainers": [{"name": "init", "image": "busybox", "envFrom": [{"secretRef": {"name": "db"}}]}],
        "containers": [{"name": "app", "image": "nginx",
            "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                    {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]
    }))).await;

    let host_pods = h.host_api("v1", "Pod");
    let host_name = predicted("web", "shop", "dev");
    let host_pod = wait_for(&host_pods, &host_name).await;
    let spec = &host_pod.data["spec"];
    assert_eq!(
        spec["volumes"][0]["configMap"]["name"],
        predicted("vol-cm", "shop", "dev")
    );
    assert_eq!(
        spec["volumes"][1]["configMap"]["name"],
        predicted("not-there", "shop", "dev")
    );
    assert_eq!(
        spec["volumes"][2]["projected"]["sources"][0]["secret"]["name"],
        predicted("db", "shop", "dev")
    );
    assert_eq!(
        spec["imagePullSecrets"][0]["name"],
        predicted("db", "shop", "dev")
    );
    assert_eq!(
        spec["initContainers"][0]["envFrom"][0]["secretRef"]["name"],
        predicted("db", "shop", "dev")
    );
    assert_eq!(
        spec["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["name"],
        predicted("env-cm", "shop", "dev")
    );
    assert_eq!(
        spec["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['tenantplane.io/virtual-name']"
    );
    assert_eq!(spec["automountServiceAccountToken"], false);
    // The tenant API server (on loopback) in place of the host's.
    let env = spec["containers"][0]["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"})),
        "{env:?}"
    );
    assert!(env.contains(
        &json!({"name": "KUBERNETES_SERVICE_PORT", "value": h.tenant_server.port().to_string()})
    ));
    assert_eq!(
        spec["hostAliases"][0]["hostnames"],
        json!(["kubernetes", "kubernetes.default", "kubernetes.default.svc"])
    );

    // Every dependency is on the host (the missing optional one is not), marked as a Pod dependency.
    for (kind, name) in [
        ("ConfigMap", "vol-cm"),
        ("ConfigMap", "env-cm"),
        ("Secret", "db"),
    ] {
        let copy = h
            .host_api("v1", kind)
            .get(&predicted(name, "shop", "dev"))
            .await
            .unwrap();
        assert_eq!(
            annotations(&copy)["tenantplane.io/pod-dependency"],
            "true",
            "{kind} {name}"
        );
    }
    assert!(
        h.host_api("v1", "ConfigMap")
            .get_opt(&predicted("not-there", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );

    // The tenant Pod: finalizer, mapping annotations, then the status the "kubelet" writes.
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    let tenant_pod = wait_for_that(&tenant_pods, "web", "mapping annotations", |p| {
        annotations(p).contains_key("tenantplane.io/host-uid")
    })
    .await;
    assert_eq!(
        tenant_pod.metadata.finalizers.clone().unwrap(),
        ["tenantplane.io/host-copy"]
    );
    let a = annotations(&tenant_pod);
    assert_eq!(a["tenantplane.io/host-name"], host_name);
    assert_eq!(a["tenantplane.io/host-namespace"], h.ns);
    assert_eq!(
        a["tenantplane.io/host-uid"],
        host_pod.metadata.uid.clone().unwrap()
    );
    assert!(a.contains_key("tenantplane.io/last-sync-time"));

    kubelet_runs(&h.host, &h.ns, &host_name, "node-a").await;
    let running = wait_for_that(&tenant_pods, "web", "status from the host", |p| {
        p.data["status"]["phase"] == "Running"
    })
    .await;
    let status = &running.data["status"];
    assert_eq!(status["podIP"], "10.2.0.9");
    // The host node's address never reaches the tenant (no kubelet endpoint here).
    assert!(status.get("hostIP").is_none(), "{status}");
    assert_eq!(status["podIPs"], json!([{"ip": "10.2.0.9"}]));
    assert_eq!(status["qosClass"], "BestEffort");
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["containerStatuses"][0]["name"], "app");
    assert_eq!(status["startTime"], "2026-01-01T00:00:00Z");
    // Bound (Binding subresource) to the virtual tenant Node standing for the host node.
    let node_name = h
        .tenant_node_name(tenantplane_api::NodeMode::Virtual, "node-a")
        .await;
    let bound = wait_for_that(&tenant_pods, "web", "bound", |p| {
        p.data["spec"]["nodeName"] == node_name.as_str()
    })
    .await;
    assert_eq!(bound.metadata.uid, running.metadata.uid);
    let node = dynamic(&h.tenant, "v1", "Node", None)
        .get(&node_name)
        .await
        .unwrap();
    assert_eq!(
        node.metadata.labels.clone().unwrap()["app.kubernetes.io/managed-by"],
        "tenantplane"
    );

    // Settled: full passes make no write on either side (counted by the servers).
    controller.wait_passes("dev", 1).await;
    let host_before = h.host_server.request_counts().await.unwrap();
    let tenant_before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 2).await;
    let host_writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&host_before);
    let tenant_writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&tenant_before);
    for resource in ["pods", "configmaps", "secrets", "nodes"] {
        assert_eq!(
            host_writes.writes(Some(resource)),
            0,
            "host {resource}: {host_writes:?}"
        );
        assert_eq!(
            tenant_writes.writes(Some(resource)),
            0,
            "tenant {resource}: {tenant_writes:?}"
        );
    }

    // No Secret data in any decision.
    let decisions = serde_json::to_string(&h.decisions("dev").await).unwrap();
    assert!(
        !decisions.contains("hunter2") && !decisions.contains("aHVudGVyMg"),
        "{decisions}"
    );
    assert!(decisions.contains("used by Pod shop/web"), "{decisions}");
    controller.stop().await;
}

#[tokio::test]
async fn a_missing_required_dependency_is_a_skip_that_names_it_until_it_exists() {
    let (h, controller) = start().await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx",
        "envFrom": [{"configMapRef": {"name": "later"}}]}]}),
        ),
    )
    .await;
    let skip = eventually("a Skip naming the missing ConfigMap", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["kind"] == "Pod")
    })
    .await;
    let reason = skip["reason"].as_str().unwrap();
    assert!(reason.contains("ConfigMap shop/later"), "{reason}");
    assert!(
        reason.contains("spec.containers[0].envFrom[0].configMapRef.name"),
        "{reason}"
    );
    assert!(
        h.host_api("v1", "Pod")
            .get_opt(&predicted("web", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );

    create(&h.tenant, configmap("shop", "later", json!({"k": "v"}))).await;
    wait_for(&h.host_api("v1", "Pod"), &predicted("web", "shop", "dev")).await;
    wait_for(
        &h.host_api("v1", "ConfigMap"),
        &predicted("later", "shop", "dev"),
    )
    .await;
    controller.stop().await;
}

/// With drift passes 10 minutes apart, only the tenant watches of the dependency
/// kinds can bring these changes to the host within the deadline.
#[tokio::test]
async fn dependency_changes_reach_their_pods_at_once_without_a_full_pass() {
    let h = Harness::start_on_shared_host().await;
    let slow = h.named("pods-slow");
    create(&h.host, policy(&slow, POD_KINDS, "10m")).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &slow).await;
    create(
        &h.tenant,
        configmap("shop", "settings", json!({"mode": "old"})),
    )
    .await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx",
                "envFrom": [{"configMapRef": {"name": "settings"}}, {"configMapRef": {"name": "later"}}]}]}),
        ),
    )
    .await;
    let host_pod = predicted("web", "shop", "dev");
    eventually("a Skip naming the missing ConfigMap", || async {
        h.decisions("dev").await.into_iter().find(|d| {
            d["action"] == "Skip"
                && d["kind"] == "Pod"
                && d["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("ConfigMap shop/later")
        })
    })
    .await;

    // The Pod waiting for it is synced again as soon as it exists.
    create(&h.tenant, configmap("shop", "later", json!({"k": "v"}))).await;
    wait_for(&h.host_api("v1", "Pod"), &host_pod).await;

    // A changed ConfigMap's copy follows, and the host Pod is left as it is.
    let configmaps = h.host_api("v1", "ConfigMap");
    let copy = predicted("settings", "shop", "dev");
    let pod_version = h
        .host_api("v1", "Pod")
        .get(&host_pod)
        .await
        .unwrap()
        .metadata
        .resource_version;
    merge_patch(
        &h.tenant_api("v1", "ConfigMap", "shop"),
        "settings",
        json!({"data": {"mode": "new"}}),
    )
    .await;
    eventually_within(
        "the host copy holds the tenant's new data",
        std::time::Duration::from_secs(20),
        || async {
            let copy = configmaps.get(&copy).await.unwrap();
            (copy.data["data"]["mode"] == "new").then_some(())
        },
    )
    .await;
    assert_eq!(
        h.host_api("v1", "Pod")
            .get(&host_pod)
            .await
            .unwrap()
            .metadata
            .resource_version,
        pod_version,
        "updating a dependency's copy does not write the host Pod"
    );
    let update = eventually("an Update decision for the ConfigMap copy", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Update" && d["kind"] == "ConfigMap")
    })
    .await;
    assert!(
        update["reason"]
            .as_str()
            .unwrap()
            .contains("used by Pod shop/web"),
        "{update}"
    );
    controller.stop().await;
}

#[tokio::test]
async fn deletion_waits_for_the_host_pod_with_its_grace_period_and_unused_copies_go() {
    let (h, controller) = start().await;
    create(&h.tenant, configmap("shop", "shared", json!({"k": "v"}))).await;
    create(&h.tenant, configmap("shop", "only-one", json!({"k": "v"}))).await;
    // Scheduled in the tenant (nodeName set, as a scheduler would), so deletion is graceful.
    create(&h.tenant, pod("one", json!({"nodeName": "tenant-node", "containers": [{"name": "app", "image": "nginx",
        "envFrom": [{"configMapRef": {"name": "shared"}}, {"configMapRef": {"name": "only-one"}}]}]}))).await;
    create(
        &h.tenant,
        pod(
            "two",
            json!({"containers": [{"name": "app", "image": "nginx",
        "envFrom": [{"configMapRef": {"name": "shared"}}]}]}),
        ),
    )
    .await;
    let host_pods = h.host_api("v1", "Pod");
    let host_cms = h.host_api("v1", "ConfigMap");
    let one = predicted("one", "shop", "dev");
    wait_for(&host_pods, &one).await;
    wait_for(&host_pods, &predicted("two", "shop", "dev")).await;
    kubelet_runs(&h.host, &h.ns, &one, "node-a").await;
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    wait_for_that(&tenant_pods, "one", "finalizer", |p| {
        p.metadata.finalizers.is_some()
    })
    .await;

    tenant_pods
        .delete(
            "one",
            &DeleteParams {
                grace_period_seconds: Some(7),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    // The host Pod is terminating with the same grace period; the tenant Pod waits for it.
    let terminating = wait_for_that(&host_pods, &one, "terminating", |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(7));
    let tenant_one = tenant_pods.get("one").await.unwrap();
    assert!(tenant_one.metadata.deletion_timestamp.is_some());
    assert_eq!(
        tenant_one.metadata.finalizers.clone().unwrap(),
        ["tenantplane.io/host-copy"]
    );
    let delete_decision = eventually("a Delete decision for the host Pod", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Delete" && d["kind"] == "Pod")
    })
    .await;
    assert!(
        delete_decision["reason"]
            .as_str()
            .unwrap()
            .contains("grace period of 7s"),
        "{delete_decision}"
    );

    // The "kubelet" finishes; then the tenant Pod goes, and only the unused copy.
    host_pods
        .delete(
            &one,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    wait_gone(&tenant_pods, "one").await;
    wait_gone(&host_cms, &predicted("only-one", "shop", "dev")).await;
    assert!(
        host_cms
            .get_opt(&predicted("shared", "shop", "dev"))
            .await
            .unwrap()
            .is_some(),
        "pod two still uses it"
    );

    tenant_pods
        .delete("two", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&tenant_pods, "two").await;
    wait_gone(&host_pods, &predicted("two", "shop", "dev")).await;
    wait_gone(&host_cms, &predicted("shared", "shop", "dev")).await;
    // The tenant's own ConfigMaps are untouched.
    assert!(
        h.tenant_api("v1", "ConfigMap", "shop")
            .get_opt("shared")
            .await
            .unwrap()
            .is_some()
    );
    controller.stop().await;
}

/// The decisions broadcast so far (they reach the broadcast even while the host,
/// where SyncDecisions are kept, does not answer).
fn drain(
    received: &mut tokio::sync::broadcast::Receiver<tenantplane_engine::decisions::TenantDecision>,
    into: &mut Vec<tenantplane_api::DecisionRecord>,
) {
    while let Ok(decision) = received.try_recv() {
        into.push(decision.record);
    }
}

#[tokio::test]
async fn a_pod_deleted_while_the_host_does_not_answer_is_released_after_the_bound_and_collected_later()
 {
    let (mut h, mut controller) = start_own_host().await;
    create(&h.tenant, configmap("shop", "cfg", json!({"k": "v"}))).await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx",
        "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}),
        ),
    )
    .await;
    let host_name = predicted("web", "shop", "dev");
    let host_cm = predicted("cfg", "shop", "dev");
    wait_for(&h.host_api("v1", "Pod"), &host_name).await;
    wait_for(&h.host_api("v1", "ConfigMap"), &host_cm).await;
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    wait_for_that(&tenant_pods, "web", "finalizer", |p| {
        p.metadata.finalizers.is_some()
    })
    .await;
    let mut seen = Vec::new();
    drain(&mut controller.decisions, &mut seen);
    seen.clear();

    let tenant_cms = h.tenant_api("v1", "ConfigMap", "shop");
    wait_for_that(
        &tenant_cms,
        "cfg",
        "the ConfigMap's finalizer",
        has_host_copy_finalizer,
    )
    .await;

    h.host_server.stop();
    let stopped = std::time::Instant::now();
    tenant_pods
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    tenant_cms
        .delete("cfg", &DeleteParams::default())
        .await
        .unwrap();
    // Held by their finalizers while the host does not answer, released after the
    // bound plus at most one retry interval (retries back off to 30 s), as documented.
    let release_deadline = HOST_UNREACHABLE_RELEASE + std::time::Duration::from_secs(30) + DEADLINE;
    wait_gone_within(&tenant_pods, "web", release_deadline).await;
    wait_gone_within(&tenant_cms, "cfg", release_deadline).await;
    assert!(
        stopped.elapsed() >= HOST_UNREACHABLE_RELEASE,
        "released after {:?}, before the bound",
        stopped.elapsed()
    );
    // Each finalizer goes before its decision is sent: poll for the decisions too.
    let decided_by = std::time::Instant::now() + DEADLINE;
    loop {
        drain(&mut controller.decisions, &mut seen);
        let both = ["Pod", "ConfigMap"].iter().all(|kind| {
            seen.iter()
                .any(|d| d.kind == *kind && d.reason.contains("has not answered"))
        });
        if both || std::time::Instant::now() > decided_by {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for kind in ["Pod", "ConfigMap"] {
        let released: Vec<_> = seen
            .iter()
            .filter(|d| d.kind == kind && d.reason.contains("has not answered"))
            .collect();
        assert_eq!(
            released.len(),
            1,
            "exactly one release decision per object: {seen:?}"
        );
        assert_eq!(released[0].action, tenantplane_api::DecisionAction::Skip);
        assert!(
            released[0]
                .reason
                .contains("garbage collection removes once the host answers"),
            "{}",
            released[0].reason
        );
    }

    // The host answers again: its Pod copy, and the ConfigMap copy no Pod uses, go.
    h.host_server.start().await.unwrap();
    let host = h.host_server.client().await.unwrap();
    wait_gone(&dynamic(&host, "v1", "Pod", Some(&h.ns)), &host_name).await;
    wait_gone(&dynamic(&host, "v1", "ConfigMap", Some(&h.ns)), &host_cm).await;
    controller.stop().await;
}

/// The host Pod exists and is not being deleted.
async fn assert_still_running(h: &Harness, host_pod: &str) {
    let pod = h.host_api("v1", "Pod").get_opt(host_pod).await.unwrap();
    assert!(
        pod.as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "host Pod {host_pod}: {pod:?}"
    );
}

fn has_host_copy_finalizer(o: &kube::api::DynamicObject) -> bool {
    o.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == "tenantplane.io/host-copy"))
        && o.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("tenantplane.io/host-copy").map(String::as_str) == Some("true"))
}

#[tokio::test]
async fn a_deleted_dependency_loses_its_host_copy_before_it_goes_and_the_pod_keeps_running() {
    let (h, controller) = start().await;
    create(&h.tenant, configmap("shop", "cfg", json!({"k": "v"}))).await;
    create(&h.tenant, secret("shop", "db", "s3cret")).await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx",
        "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "db"}}]}]}),
        ),
    )
    .await;
    let host_pod = predicted("web", "shop", "dev");
    let host_cm = predicted("cfg", "shop", "dev");
    let host_cms = h.host_api("v1", "ConfigMap");
    wait_for(&h.host_api("v1", "Pod"), &host_pod).await;
    wait_for(&host_cms, &host_cm).await;
    wait_for(&h.host_api("v1", "Secret"), &predicted("db", "shop", "dev")).await;
    let tenant_cms = h.tenant_api("v1", "ConfigMap", "shop");
    wait_for_that(
        &tenant_cms,
        "cfg",
        "the ConfigMap's finalizer",
        has_host_copy_finalizer,
    )
    .await;
    wait_for_that(
        &h.tenant_api("v1", "Secret", "shop"),
        "db",
        "the Secret's finalizer",
        has_host_copy_finalizer,
    )
    .await;

    tenant_cms
        .delete("cfg", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&tenant_cms, "cfg").await;
    // The host copy went first: it is already gone when the tenant object is.
    assert!(host_cms.get_opt(&host_cm).await.unwrap().is_none());
    let decision = eventually("a Delete decision for the ConfigMap copy", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Delete" && d["kind"] == "ConfigMap")
    })
    .await;
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("Pods using it keep running"),
        "{decision}"
    );
    // The Pod keeps running, and the copy is not made again on later passes.
    controller.wait_passes("dev", 2).await;
    assert!(host_cms.get_opt(&host_cm).await.unwrap().is_none());
    assert_still_running(&h, &host_pod).await;
    controller.stop().await;
}

#[tokio::test]
async fn a_lost_host_pod_fails_the_tenant_pod_and_is_not_recreated() {
    let (h, controller) = start().await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await;
    let host_pods = h.host_api("v1", "Pod");
    let host_name = predicted("web", "shop", "dev");
    wait_for(&host_pods, &host_name).await;
    kubelet_runs(&h.host, &h.ns, &host_name, "node-a").await;
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    wait_for_that(&tenant_pods, "web", "Running", |p| {
        p.data["status"]["phase"] == "Running"
    })
    .await;

    // Someone deletes the host Pod behind tenantplane's back.
    host_pods
        .delete(
            &host_name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    let failed = wait_for_that(&tenant_pods, "web", "Failed", |p| {
        p.data["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(failed.data["status"]["reason"], "PhysicalPodLost");
    assert_eq!(failed.data["status"]["conditions"][0]["status"], "False");
    controller.wait_passes("dev", 2).await;
    assert!(
        host_pods.get_opt(&host_name).await.unwrap().is_none(),
        "never silently recreated"
    );

    // Deleting the failed tenant Pod is not blocked by the finalizer.
    tenant_pods
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&tenant_pods, "web").await;
    // No tenant Pod is bound to its virtual node any more: it goes too.
    let node_name = h
        .tenant_node_name(tenantplane_api::NodeMode::Virtual, "node-a")
        .await;
    wait_gone(&dynamic(&h.tenant, "v1", "Node", None), &node_name).await;
    controller.stop().await;
}

#[tokio::test]
async fn service_account_tokens_come_from_the_tenant_into_a_host_secret_and_are_refreshed() {
    let (h, controller) = start().await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "namespace": "shop"}})).await;
    create(&h.tenant, pod("web", json!({"serviceAccountName": "builder", "containers": [{"name": "app", "image": "nginx"}],
        "volumes": [{"name": "token", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 600, "audience": "vault"}}]}}]}))).await;
    let target = tenantplane_core::transform::TenantTarget::new("dev", &h.ns).unwrap();
    let secret_name = tenantplane_core::pods::host_pod::token_secret_name(&target, "shop", "web");
    let host_pod = wait_for(&h.host_api("v1", "Pod"), &predicted("web", "shop", "dev")).await;
    assert_eq!(
        host_pod.data["spec"]["volumes"][0]["projected"]["sources"][0],
        json!({"secret": {"name": secret_name, "items": [{"key": "token-0-0", "path": "token"}]}})
    );
    assert_eq!(host_pod.data["spec"]["automountServiceAccountToken"], false);
    assert!(
        host_pod.data["spec"]
            .get("serviceAccountName")
            .is_none_or(|s| s == "default")
    );
    let secrets = h.host_api("v1", "Secret");
    let secret = wait_for(&secrets, &secret_name).await;
    let token = |s: &kube::api::DynamicObject| {
        use base64::Engine as _;
        let encoded = s.data["data"]["token-0-0"].as_str().unwrap().to_owned();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap()
    };
    let first = token(&secret);
    assert_eq!(first.split('.').count(), 3, "a JWT");
    // The token is bound to the tenant Pod and issued for the audience asked for.
    let claims = {
        use base64::Engine as _;
        let payload = first.split('.').nth(1).unwrap();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap();
        serde_json::from_slice::<Value>(&bytes).unwrap()
    };
    let tenant_uid = h
        .tenant_api("v1", "Pod", "shop")
        .get("web")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], tenant_uid.as_str());
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "builder");
    assert_eq!(claims["aud"], json!(["vault"]));
    // Never in an annotation, a decision or an Event.
    assert!(
        !serde_json::to_string(&secret.metadata)
            .unwrap()
            .contains(&first)
    );
    assert!(
        !serde_json::to_string(&host_pod.metadata)
            .unwrap()
            .contains(&first)
    );
    let refresh_after: i64 = annotations(&secret)["tenantplane.io/token-refresh-after"]
        .parse()
        .unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    assert!(
        (now + 400..=now + 481).contains(&refresh_after),
        "refresh at 80% of 600 s: {refresh_after} vs {now}"
    );

    // Due (as if 80% of the lifetime had passed): the next pass requests a new token.
    merge_patch(
        &secrets,
        &secret_name,
        json!({"metadata": {"annotations": {"tenantplane.io/token-refresh-after": "0"}}}),
    )
    .await;
    let refreshed = wait_for_that(&secrets, &secret_name, "refreshed", |s| {
        annotations(s)["tenantplane.io/token-refresh-after"] != "0"
    })
    .await;
    assert_eq!(token(&refreshed).split('.').count(), 3);
    let decisions = eventually("a decision for the refresh", || async {
        let decisions = h.decisions("dev").await;
        decisions
            .iter()
            .any(|d| {
                d["action"] == "Update"
                    && d["kind"] == "Secret"
                    && d["reason"].as_str().unwrap().contains("refreshed")
            })
            .then_some(decisions)
    })
    .await;
    let all = serde_json::to_string(&decisions).unwrap();
    assert!(!all.contains(&first) && !all.contains(&token(&refreshed)));

    // The Pod goes: its token Secret goes with it.
    h.tenant_api("v1", "Pod", "shop")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&secrets, &secret_name).await;
    controller.stop().await;
}

#[tokio::test]
async fn the_isolation_profile_refuses_by_field_with_a_warning_event() {
    let (h, controller) = start().await;
    // Profile "fast" is level restricted: hostPath and privileged are blocked.
    create(
        &h.tenant,
        pod(
            "root",
            json!({"volumes": [{"name": "r", "hostPath": {"path": "/"}}],
        "containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await;
    create(&h.tenant, pod("priv", json!({"containers": [{"name": "app", "image": "nginx", "securityContext": {"privileged": true}}]}))).await;
    create(
        &h.tenant,
        pod(
            "net",
            json!({"hostNetwork": true, "containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await;
    for (name, field) in [
        ("root", "spec.volumes[0].hostPath"),
        ("priv", "spec.containers[0].securityContext.privileged"),
        ("net", "spec.hostNetwork"),
    ] {
        let skip = eventually(&format!("a Skip for {name}"), || async {
            h.decisions("dev")
                .await
                .into_iter()
                .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == name)
        })
        .await;
        assert!(skip["reason"].as_str().unwrap().contains(field), "{skip}");
        let events = dynamic(&h.tenant, "events.k8s.io/v1", "Event", Some("shop"));
        let event = eventually(&format!("a Warning Event on {name}"), || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.data["regarding"]["name"] == name)
        })
        .await;
        assert_eq!(event.data["type"], "Warning");
        assert_eq!(event.data["reason"], "IsolationRefused");
        assert!(
            event.data["note"].as_str().unwrap().contains(field),
            "{:?}",
            event.data
        );
        assert!(
            h.host_api("v1", "Pod")
                .get_opt(&predicted(name, "shop", "dev"))
                .await
                .unwrap()
                .is_none()
        );
    }
    controller.stop().await;
}

#[tokio::test]
async fn the_profiles_image_rules_refuse_a_pod_by_rule_and_field() {
    let h = Harness::start_on_shared_host().await;
    let (pods, ruled_name) = (h.named("pods"), h.named("ruled"));
    create(&h.host, policy(&pods, POD_KINDS, "2s")).await;
    let mut ruled = profile(&ruled_name, 1000, 2000);
    ruled["spec"]["level"] = json!("baseline");
    ruled["spec"]["rules"] = json!({"images": {"allowedRegistries": ["docker.io"],
        "allowedPullPolicies": ["Always", "IfNotPresent"]}});
    create(&h.host, ruled).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with(&ruled_name, &pods).await;
    create(
        &h.tenant,
        pod(
            "web",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await;
    create(
        &h.tenant,
        pod(
            "quay",
            json!({"initContainers": [{"name": "init", "image": "quay.io/tools:1"}],
            "containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await;
    // The allowed Pod is synced (so the rules were read and the engine runs).
    eventually("the allowed Pod on the host", || async {
        h.host_api("v1", "Pod")
            .get_opt(&predicted("web", "shop", "dev"))
            .await
            .ok()
            .flatten()
    })
    .await;
    let skip = eventually("a Skip for quay", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == "quay")
    })
    .await;
    assert!(
        skip["reason"]
            .as_str()
            .unwrap()
            .contains("spec.initContainers[0].image"),
        "{skip}"
    );
    let events = dynamic(&h.tenant, "events.k8s.io/v1", "Event", Some("shop"));
    let event = eventually("a Warning Event on quay", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.data["regarding"]["name"] == "quay")
    })
    .await;
    assert_eq!(event.data["type"], "Warning");
    assert_eq!(event.data["reason"], "IsolationRefused");
    let note = event.data["note"].as_str().unwrap();
    assert!(
        note.contains("spec.initContainers[0].image (images.allowedRegistries)"),
        "{note}"
    );
    assert!(
        h.host_api("v1", "Pod")
            .get_opt(&predicted("quay", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );
    controller.stop().await;
}

/// Creates, in the tenant: Secret `storage/csi-creds`, PV `pv-1` using it as its CSI
/// node-publish Secret, claim `shop/data` on that PV (not Bound yet), and Pod
/// `shop/db` using the claim.
async fn create_claim_and_pod(h: &Harness) {
    create_namespace(&h.tenant, "storage").await;
    create(&h.tenant, secret("storage", "csi-creds", "s3cr3t")).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete",
                 "storageClassName": "fast",
                 "claimRef": {"namespace": "shop", "name": "data"},
                 "csi": {"driver": "example.csi", "volumeHandle": "h-1", "nodePublishSecretRef": {"name": "csi-creds", "namespace": "storage"}}}})).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "shop"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeName": "pv-1",
                 "resources": {"requests": {"storage": "1Gi"}}}})).await;
    create(
        &h.tenant,
        pod(
            "db",
            json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        "containers": [{"name": "app", "image": "postgres"}]}),
        ),
    )
    .await;
}

/// Plays the tenant's PV controller: claim `shop/data` becomes Bound.
async fn bind_claim(h: &Harness) {
    h.tenant_api("v1", "PersistentVolumeClaim", "shop")
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound",
        "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_deleted_claim_loses_its_claim_and_volume_copies_before_its_finalizer_goes() {
    let (h, controller) = start().await;
    create_claim_and_pod(&h).await;
    bind_claim(&h).await;
    let host_pod = predicted("db", "shop", "dev");
    let host_claim = predicted("data", "shop", "dev");
    let pv_name = predicted("pv-1", &h.ns, "dev");
    wait_for(&h.host_api("v1", "Pod"), &host_pod).await;
    let host_claims = h.host_api("v1", "PersistentVolumeClaim");
    let host_pvs = dynamic(&h.host, "v1", "PersistentVolume", None);
    host_claims.get(&host_claim).await.unwrap();
    host_pvs.get(&pv_name).await.unwrap();
    let claims = h.tenant_api("v1", "PersistentVolumeClaim", "shop");
    wait_for_that(
        &claims,
        "data",
        "the claim's finalizer",
        has_host_copy_finalizer,
    )
    .await;

    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    // Our finalizer goes only after both copies were deleted (their protection
    // finalizers are the host's controllers' to lift; none runs here). The
    // tenant's own pvc-protection, if any, is the tenant's to lift.
    wait_for_that(&claims, "data", "our finalizer released", |c| {
        c.metadata.deletion_timestamp.is_some() && !has_host_copy_finalizer(c)
    })
    .await;
    let deleted = |o: Option<kube::api::DynamicObject>| {
        o.is_none_or(|o| o.metadata.deletion_timestamp.is_some())
    };
    assert!(deleted(host_claims.get_opt(&host_claim).await.unwrap()));
    assert!(deleted(host_pvs.get_opt(&pv_name).await.unwrap()));
    let decision = eventually("a Delete decision for the claim copy", || async {
        h.decisions("dev").await.into_iter().find(|d| {
            d["action"] == "Delete"
                && d["kind"] == "PersistentVolumeClaim"
                && d["host"]["name"] == host_claim.as_str()
        })
    })
    .await;
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("being deleted"),
        "{decision}"
    );
    // The Pod keeps running, and neither copy is made again on later passes.
    controller.wait_passes("dev", 2).await;
    assert!(deleted(host_claims.get_opt(&host_claim).await.unwrap()));
    assert!(deleted(host_pvs.get_opt(&pv_name).await.unwrap()));
    assert_still_running(&h, &host_pod).await;
    controller.stop().await;
}

#[tokio::test]
async fn a_bound_claim_brings_its_volume_and_csi_secret_under_the_tenant_identity() {
    let (h, controller) = start().await;
    create_claim_and_pod(&h).await;

    // Not Bound yet (no PV controller in the tenant): a Skip that says so.
    let skip = eventually("a Skip for the unbound claim", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == "db")
    })
    .await;
    assert!(
        skip["reason"].as_str().unwrap().contains("not Bound yet"),
        "{skip}"
    );

    let claims = h.tenant_api("v1", "PersistentVolumeClaim", "shop");
    bind_claim(&h).await;

    let host_pod = wait_for(&h.host_api("v1", "Pod"), &predicted("db", "shop", "dev")).await;
    let host_claim = predicted("data", "shop", "dev");
    assert_eq!(
        host_pod.data["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        host_claim.as_str()
    );
    let pv_name = predicted("pv-1", &h.ns, "dev");
    let pv = dynamic(&h.host, "v1", "PersistentVolume", None)
        .get(&pv_name)
        .await
        .unwrap();
    assert_eq!(pv.data["spec"]["claimRef"]["name"], host_claim.as_str());
    assert_eq!(pv.data["spec"]["claimRef"]["namespace"], h.ns);
    assert_eq!(pv.data["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(
        pv.data["spec"]["csi"]["nodePublishSecretRef"],
        json!({"name": predicted("csi-creds", "storage", "dev"), "namespace": h.ns})
    );
    assert_eq!(
        pv.metadata.labels.clone().unwrap()["tenantplane.io/tenant"],
        "dev"
    );
    assert_eq!(annotations(&pv)["tenantplane.io/tenant-namespace"], h.ns);
    let claim = h
        .host_api("v1", "PersistentVolumeClaim")
        .get(&host_claim)
        .await
        .unwrap();
    assert_eq!(claim.data["spec"]["volumeName"], pv_name.as_str());
    let csi_copy = predicted("csi-creds", "storage", "dev");
    // Copied before the volume, which is before the Pod.
    h.host_api("v1", "Secret").get(&csi_copy).await.unwrap();
    // No Pod names the CSI Secret: the volume copy holds it. Full passes (each
    // collects unused dependency copies) must leave it in place.
    controller.wait_passes("dev", 2).await;
    h.host_api("v1", "Secret").get(&csi_copy).await.unwrap();
    let decisions = h.decisions("dev").await;
    assert!(
        !decisions
            .iter()
            .any(|d| d["action"] == "Delete" && d["host"]["name"] == csi_copy.as_str()),
        "{decisions:?}"
    );
    let decisions = serde_json::to_string(&decisions).unwrap();
    assert!(!decisions.contains("s3cr3t"));

    // The Pod goes: so do the claim copy, the volume copy and the CSI Secret copy
    // (claim and volume are deleted; their protection finalizers are the host's
    // controllers' to lift, and none runs here); the tenant's own claim and volume stay.
    h.tenant_api("v1", "Pod", "shop")
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = |o: &kube::api::DynamicObject| o.metadata.deletion_timestamp.is_some();
    let host_claims = h.host_api("v1", "PersistentVolumeClaim");
    wait_for_that(&host_claims, &host_claim, "deleted", deleted).await;
    let host_pvs = dynamic(&h.host, "v1", "PersistentVolume", None);
    wait_for_that(&host_pvs, &pv_name, "deleted", deleted).await;
    wait_gone(
        &h.host_api("v1", "Secret"),
        &predicted("csi-creds", "storage", "dev"),
    )
    .await;
    assert!(claims.get_opt("data").await.unwrap().is_some());
    assert!(
        dynamic(&h.tenant, "v1", "PersistentVolume", None)
            .get_opt("pv-1")
            .await
            .unwrap()
            .is_some()
    );
    controller.stop().await;
}

#[tokio::test]
async fn deleting_the_tenant_cluster_removes_what_pods_brought_and_releases_the_tenant_pods() {
    let (h, controller) = start().await;
    create(&h.tenant, configmap("shop", "cfg", json!({"k": "v"}))).await;
    create(&h.tenant, secret("shop", "db", "s3cret")).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "shop"}})).await;
    create(&h.tenant, pod("web", json!({"serviceAccountName": "default",
        "containers": [{"name": "app", "image": "nginx", "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "db"}}]}],
        "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}))).await;
    let target = tenantplane_core::transform::TenantTarget::new("dev", &h.ns).unwrap();
    let token_secret = tenantplane_core::pods::host_pod::token_secret_name(&target, "shop", "web");
    let host_pods = h.host_api("v1", "Pod");
    wait_for(&host_pods, &predicted("web", "shop", "dev")).await;
    wait_for(&h.host_api("v1", "Secret"), &token_secret).await;
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    wait_for_that(&tenant_pods, "web", "finalizer", |p| {
        p.metadata.finalizers.is_some()
    })
    .await;
    let tenant_cms = h.tenant_api("v1", "ConfigMap", "shop");
    let tenant_secrets = h.tenant_api("v1", "Secret", "shop");
    wait_for_that(
        &tenant_cms,
        "cfg",
        "the ConfigMap's finalizer",
        has_host_copy_finalizer,
    )
    .await;
    wait_for_that(
        &tenant_secrets,
        "db",
        "the Secret's finalizer",
        has_host_copy_finalizer,
    )
    .await;

    h.tenant_clusters()
        .delete("dev", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&h.tenant_clusters(), "dev").await;
    assert!(
        host_pods
            .get_opt(&predicted("web", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        h.host_api("v1", "ConfigMap")
            .get_opt(&predicted("cfg", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        h.host_api("v1", "Secret")
            .get_opt(&token_secret)
            .await
            .unwrap()
            .is_none()
    );
    let released = tenant_pods.get("web").await.unwrap();
    assert!(
        released.metadata.finalizers.unwrap_or_default().is_empty(),
        "the tenant Pod is released"
    );
    // So deleting it is not stuck; nor are its dependencies, released too.
    tenant_pods
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&tenant_pods, "web").await;
    for (api, name) in [(&tenant_cms, "cfg"), (&tenant_secrets, "db")] {
        let released = api.get(name).await.unwrap();
        assert!(
            released.metadata.finalizers.unwrap_or_default().is_empty(),
            "{name} is released"
        );
        api.delete(name, &DeleteParams::default()).await.unwrap();
        wait_gone(api, name).await;
    }
    assert!(
        h.host_api("v1", "Secret")
            .get_opt(&predicted("db", "shop", "dev"))
            .await
            .unwrap()
            .is_none()
    );
    controller.stop().await;
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_secret_data_in_any_log_line_decision_or_event() {
    // Every log line of this (single-threaded) test at trace level, into a buffer.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (h, controller) = start().await;
    create(&h.tenant, secret("shop", "db", "hunter2-in-a-secret")).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "shop"}})).await;
    create(&h.tenant, pod("web", json!({"serviceAccountName": "default",
        "containers": [{"name": "app", "image": "nginx", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}],
        "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}))).await;
    // And a Pod refused by the profile, and one waiting for a missing Secret.
    create(&h.tenant, pod("root", json!({"volumes": [{"name": "r", "hostPath": {"path": "/"}}],
        "containers": [{"name": "app", "image": "nginx", "envFrom": [{"secretRef": {"name": "db"}}]}]}))).await;
    create(&h.tenant, pod("waits", json!({"containers": [{"name": "app", "image": "nginx", "envFrom": [{"secretRef": {"name": "later"}}]}]}))).await;
    wait_for(&h.host_api("v1", "Pod"), &predicted("web", "shop", "dev")).await;
    let target = tenantplane_core::transform::TenantTarget::new("dev", &h.ns).unwrap();
    let token_secret = tenantplane_core::pods::host_pod::token_secret_name(&target, "shop", "web");
    let tokens = wait_for(&h.host_api("v1", "Secret"), &token_secret).await;
    let encoded = tokens.data["data"]["token-0-0"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = {
        use base64::Engine as _;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(&encoded)
                .unwrap(),
        )
        .unwrap()
    };
    eventually("a Skip for each refused or waiting Pod", || async {
        let d = h.decisions("dev").await;
        (d.iter().filter(|d| d["action"] == "Skip").count() >= 2).then_some(())
    })
    .await;
    controller.wait_passes("dev", 1).await;

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("decision"),
        "the capture works: {} bytes",
        logs.len()
    );
    let decisions = serde_json::to_string(&h.decisions("dev").await).unwrap();
    let events = serde_json::to_string(
        &dynamic(&h.tenant, "events.k8s.io/v1", "Event", Some("shop"))
            .list(&Default::default())
            .await
            .unwrap()
            .items,
    )
    .unwrap();
    for (what, text) in [
        ("logs", &logs),
        ("decisions", &decisions),
        ("events", &events),
    ] {
        for secret in [
            "hunter2-in-a-secret",
            "aHVudGVyMi1pbi1hLXNlY3JldA",
            token.as_str(),
            encoded.as_str(),
        ] {
            assert!(!text.contains(secret), "{what} contain Secret data");
        }
    }
    controller.stop().await;
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profiles_service_rules_refuse_a_service_by_rule_and_field() {
    let h = Harness::start_on_shared_host().await;
    let (svcs, ruled_name) = (h.named("svcs"), h.named("ruled"));
    create(&h.host, policy(&svcs, &[("v1", "Service")], "2s")).await;
    let mut ruled = profile(&ruled_name, 1000, 2000);
    ruled["spec"]["rules"] = json!({"services": {"allowedTypes": ["ClusterIP", "ExternalName"],
        "allowedExternalNames": ["*.svc.example.com"]}});
    create(&h.host, ruled).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with(&ruled_name, &svcs).await;
    let port = json!([{"port": 80, "targetPort": 8080}]);
    create(
        &h.tenant,
        service("web", json!({"type": "ClusterIP", "ports": port})),
    )
    .await;
    create(
        &h.tenant,
        service("nodeport", json!({"type": "NodePort", "ports": port})),
    )
    .await;
    create(
        &h.tenant,
        service(
            "external",
            json!({"type": "ExternalName", "externalName": "evil.example.org"}),
        ),
    )
    .await;
    create(
        &h.tenant,
        service(
            "ips",
            json!({"ports": port, "externalIPs": ["203.0.113.7"]}),
        ),
    )
    .await;
    let services = h.host_api("v1", "Service");
    // The allowed Service is synced (so the rules were read and the engine runs).
    eventually("the allowed Service on the host", || async {
        services
            .get_opt(&predicted("web", "shop", "dev"))
            .await
            .ok()
            .flatten()
    })
    .await;
    let events = dynamic(&h.tenant, "events.k8s.io/v1", "Event", Some("shop"));
    for (name, refused) in [
        ("nodeport", "spec.type (services.allowedTypes)"),
        (
            "external",
            "spec.externalName (services.allowedExternalNames)",
        ),
        ("ips", "spec.externalIPs (services.allowExternalIPs)"),
    ] {
        let skip = eventually(&format!("a Skip for {name}"), || async {
            h.decisions("dev").await.into_iter().find(|d| {
                d["action"] == "Skip" && d["tenant"]["name"] == name && d["kind"] == "Service"
            })
        })
        .await;
        assert!(skip["reason"].as_str().unwrap().contains(refused), "{skip}");
        let event = eventually(&format!("a Warning Event on {name}"), || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.data["regarding"]["name"] == name)
        })
        .await;
        assert_eq!(event.data["type"], "Warning");
        assert_eq!(event.data["reason"], "IsolationRefused");
        assert_eq!(event.data["regarding"]["kind"], "Service");
        let note = event.data["note"].as_str().unwrap();
        assert!(note.contains(refused), "{note}");
        assert!(
            services
                .get_opt(&predicted(name, "shop", "dev"))
                .await
                .unwrap()
                .is_none(),
            "{name} has no host copy"
        );
    }

    // An already-synced Service changed to break a rule: its host copy is kept as
    // it was (not updated), and the change is a Skip.
    let tenant_services = dynamic(&h.tenant, "v1", "Service", Some("shop"));
    tenant_services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}},
                "spec": {"externalIPs": ["203.0.113.8"]}})),
        )
        .await
        .unwrap();
    eventually("a Skip for the changed web", || async {
        h.decisions("dev").await.into_iter().find(|d| {
            d["action"] == "Skip"
                && d["tenant"]["name"] == "web"
                && d["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("spec.externalIPs (services.allowExternalIPs)"))
        })
    })
    .await;
    let host_web = services
        .get(&predicted("web", "shop", "dev"))
        .await
        .unwrap();
    assert!(
        host_web.data["spec"].get("externalIPs").is_none(),
        "the host copy was not updated: {:?}",
        host_web.data["spec"]
    );
    assert!(
        !host_web
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("changed"),
        "the host copy's labels were not updated either"
    );
    controller.stop().await;
}
