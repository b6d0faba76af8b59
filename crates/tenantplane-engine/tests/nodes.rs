//! The tenant's Nodes per node mode, and host Events on tenant Pods, against two
//! real API servers. There is no scheduler and no kubelet: the tests play them
//! (register host Nodes, bind host Pods, write status, record Events).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::*;
use kube::Client;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tenantplane_api::NodeMode;
use tenantplane_core::pods::KubeletEndpoint;

const POD_KINDS: &[(&str, &str)] = &[("v1", "Pod")];

/// A host node name nobody could guess, to look for in what the tenant sees.
const HOST_NODE: &str = "secret-rack-7.corp.example";
const HOST_NODE_IP: &str = "10.99.7.42";

/// Harness with policy `pods` and TenantCluster `dev` in node mode `mode`, tenant
/// namespace `shop`; the controller advertises `endpoint`.
async fn start(mode: &str, endpoint: Option<KubeletEndpoint>) -> (Harness, Controller) {
    start_with_nodes(json!({"mode": mode}), None, endpoint).await
}

/// [`start`] with the TenantCluster's `spec.nodes` and `spec.resources`.
async fn start_with_nodes(
    nodes: Value,
    resources: Option<Value>,
    endpoint: Option<KubeletEndpoint>,
) -> (Harness, Controller) {
    let h = Harness::start().await;
    create(&h.host, policy("pods", POD_KINDS, "2s")).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start_with_kubelet_endpoint(&h.host, endpoint).await;
    let mut tc = tenant_cluster("dev", HOST_NS, "fast", "pods", "dev-kubeconfig");
    tc["spec"]["nodes"] = nodes;
    if let Some(resources) = resources {
        tc["spec"]["resources"] = resources;
    }
    create(&h.host, tc).await;
    (h, controller)
}

/// Registers host node `name` with many labels, annotations, a taint and status
/// full of host identifiers.
async fn host_node(host: &Client, name: &str, ip: &str, schedulable: bool) {
    let nodes = dynamic(host, "v1", "Node", None);
    let mut spec = json!({"podCIDR": "10.244.7.0/24", "providerID": "corp:///i-0secret"});
    if !schedulable {
        spec["unschedulable"] = json!(true);
    }
    create(host, json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
            "labels": {"topology.kubernetes.io/zone": "zone-a", "topology.kubernetes.io/region": "region-1",
                       "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                       "kubernetes.io/hostname": name, "node-role.kubernetes.io/secret-gpu": "",
                       "corp.example/rack": "rack-7", "corp.example/owner": "ops-team"},
            "annotations": {"corp.example/asset": "asset-0042", "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": spec})).await;
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "7Gi", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name},
                          {"type": "ExternalIP", "address": "203.0.113.77"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "nodeInfo": {"machineID": "machine-0secret", "systemUUID": "uuid-0secret", "bootID": "boot-0secret",
                         "kernelVersion": "5.4.0-corpkernel", "osImage": "CorpOS 7", "containerRuntimeVersion": "containerd://1.4.3",
                         "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64"}}})))
        .await
        .unwrap();
}

/// Plays the scheduler and kubelet on the host: binds host Pod `name` to `node`
/// (unless it is already) and reports it Running there.
async fn kubelet_runs(host: &Client, name: &str, node: &str) {
    let pods = dynamic(host, "v1", "Pod", Some(HOST_NS));
    let current = pods.get(name).await.unwrap();
    if current.data["spec"]["nodeName"].as_str().is_none() {
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let request =
            http::Request::post(format!("/api/v1/namespaces/{HOST_NS}/pods/{name}/binding"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&binding).unwrap())
                .unwrap();
        host.request_text(request).await.expect("bind the host Pod");
    }
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "hostIP": HOST_NODE_IP, "podIP": "10.244.7.9",
            "podIPs": [{"ip": "10.244.7.9"}], "startTime": "2026-01-01T00:00:00Z", "qosClass": "BestEffort",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "",
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}]}})),
    )
    .await
    .unwrap();
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

fn app() -> Value {
    json!({"containers": [{"name": "app", "image": "nginx"}]})
}

fn tenant_nodes(h: &Harness) -> kube::Api<DynamicObject> {
    dynamic(&h.tenant, "v1", "Node", None)
}

/// Deletes tenant Pod `name` and plays the host kubelet finishing its host Pod.
async fn delete_pod(h: &Harness, name: &str) {
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    tenant_pods
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let host_pods = h.host_api("v1", "Pod");
    let host_name = predicted(name, "shop", "dev");
    wait_for_that(&host_pods, &host_name, "terminating", |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
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
    wait_gone(&tenant_pods, name).await;
}

#[tokio::test]
async fn a_virtual_node_shows_nothing_of_the_host_outside_the_allow_list_and_goes_with_its_last_pod()
 {
    // Capped at the TenantCluster's resources: CPU below the host's, memory above.
    let (h, controller) = start_with_nodes(
        json!({"mode": "virtual", "capResources": true}),
        Some(json!({"cpu": "2", "memory": "16Gi"})),
        None,
    )
    .await;
    host_node(&h.host, HOST_NODE, HOST_NODE_IP, true).await;
    create(&h.tenant, pod("web", app())).await;
    let host_pods = h.host_api("v1", "Pod");
    let host_name = predicted("web", "shop", "dev");
    wait_for(&host_pods, &host_name).await;
    kubelet_runs(&h.host, &host_name, HOST_NODE).await;

    let name = h.tenant_node_name(NodeMode::Virtual, HOST_NODE).await;
    assert!(name.starts_with("tenantplane-"), "{name}");
    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    let running = wait_for_that(&tenant_pods, "web", "bound and Running", |p| {
        p.data["spec"]["nodeName"] == name.as_str() && p.data["status"]["phase"] == "Running"
    })
    .await;
    // The Pod's host address is not the host node's (no endpoint: none at all).
    assert!(
        running.data["status"].get("hostIP").is_none(),
        "{}",
        running.data["status"]
    );
    assert_eq!(running.data["status"]["podIP"], "10.244.7.9");

    let node = wait_for_that(&tenant_nodes(&h), &name, "status", |n| {
        n.data["status"]["capacity"]["cpu"] == "2"
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap();
    let expected: std::collections::BTreeMap<String, String> = [
        ("topology.kubernetes.io/zone", "zone-a"),
        ("topology.kubernetes.io/region", "region-1"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/hostname", name.as_str()),
        ("app.kubernetes.io/managed-by", "tenantplane"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(labels, expected);
    assert!(
        node.metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .is_empty(),
        "{:?}",
        node.metadata.annotations
    );
    // No host taint: only what the tenant's own API server adds (TaintNodesByCondition).
    for taint in node.data["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let key = taint["key"].as_str().unwrap_or_default();
        assert!(key.starts_with("node.kubernetes.io/"), "{taint}");
    }
    let status = &node.data["status"];
    assert!(status.get("addresses").is_none(), "{status}");
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
    assert_eq!(status["allocatable"]["memory"], "7Gi");
    assert_eq!(status["allocatable"]["cpu"], "2");
    assert_eq!(status["capacity"]["memory"], "8Gi");
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.20.2");
    assert_eq!(status["nodeInfo"]["architecture"], "amd64");
    // Nothing that identifies the host, anywhere on the Node or the Pod.
    let seen = format!(
        "{} {}",
        serde_json::to_string(&node).unwrap(),
        serde_json::to_string(&tenant_pods.get("web").await.unwrap()).unwrap()
    );
    for leak in [
        "secret-rack",
        "corp.example",
        "corp",
        HOST_NODE_IP,
        "203.0.113.77",
        "0secret",
        "rack-7",
        "ops-team",
        "asset-0042",
        "10.244.7.0",
        "10250",
    ] {
        assert!(!seen.contains(leak), "{leak} leaks into the tenant: {seen}");
    }

    // Settled: further passes write no Node.
    controller.wait_passes("dev", 1).await;
    let before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 2).await;
    let writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&before);
    assert_eq!(writes.writes(Some("nodes")), 0, "{writes:?}");

    // The last tenant Pod on it goes: so does the Node.
    delete_pod(&h, "web").await;
    wait_gone(&tenant_nodes(&h), &name).await;
    controller.stop().await;
}

#[tokio::test]
async fn a_mirror_node_keeps_the_host_name_and_allowed_labels_and_advertises_the_kubelet_endpoint()
{
    let endpoint = KubeletEndpoint {
        address: "127.0.0.1".into(),
        port: 10443,
    };
    let (h, controller) = start("mirror", Some(endpoint)).await;
    host_node(&h.host, "node-m", HOST_NODE_IP, true).await;
    create(&h.tenant, pod("web", app())).await;
    let host_name = predicted("web", "shop", "dev");
    wait_for(&h.host_api("v1", "Pod"), &host_name).await;
    kubelet_runs(&h.host, &host_name, "node-m").await;

    let tenant_pods = h.tenant_api("v1", "Pod", "shop");
    let running = wait_for_that(&tenant_pods, "web", "bound and Running", |p| {
        p.data["spec"]["nodeName"] == "node-m" && p.data["status"]["phase"] == "Running"
    })
    .await;
    assert_eq!(running.data["status"]["hostIP"], "127.0.0.1");
    let node = wait_for_that(&tenant_nodes(&h), "node-m", "the endpoint", |n| {
        n.data["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10443
    })
    .await;
    assert_eq!(
        node.data["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "127.0.0.1"}])
    );
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(labels["kubernetes.io/hostname"], "node-m");
    assert!(!labels.contains_key("corp.example/rack"));
    assert!(!labels.contains_key("node-role.kubernetes.io/secret-gpu"));
    let text = serde_json::to_string(&node).unwrap();
    assert!(
        !text.contains(HOST_NODE_IP) && !text.contains("0secret"),
        "{text}"
    );
    controller.stop().await;
}

/// The reason of the latest Skip recorded for tenant Pod `name`, once it contains `part`.
async fn skip_for(h: &Harness, name: &str, part: &str) -> String {
    eventually(&format!("a Skip for {name} saying {part}"), || async {
        h.decisions("dev")
            .await
            .into_iter()
            .filter(|d| d["action"] == "Skip" && d["kind"] == "Pod")
            .filter(|d| d["tenant"]["name"] == name)
            .filter_map(|d| d["reason"].as_str().map(str::to_owned))
            .find(|r| r.contains(part))
    })
    .await
}

#[tokio::test]
async fn scheduled_mode_offers_schedulable_nodes_syncs_only_bound_pods_and_pins_them() {
    let (h, controller) = start("scheduled", None).await;
    host_node(&h.host, "host-1", "10.99.0.1", true).await;
    host_node(&h.host, "host-2", "10.99.0.2", false).await;
    let one = h.tenant_node_name(NodeMode::Scheduled, "host-1").await;
    let two = h.tenant_node_name(NodeMode::Scheduled, "host-2").await;
    // A Node for the schedulable host node only, before any Pod.
    wait_for_that(&tenant_nodes(&h), &one, "Ready", |n| {
        n.data["status"]["conditions"][0]["status"] == "True"
    })
    .await;
    controller.wait_passes("dev", 2).await;
    assert!(tenant_nodes(&h).get_opt(&two).await.unwrap().is_none());

    // Not bound: waits, with a decision saying so.
    create(&h.tenant, pod("loose", app())).await;
    // Bound to a Node tenantplane did not make (a guess at the naming): waits too.
    let mut forged = app();
    forged["nodeName"] = json!("tenantplane-0000000000000000");
    create(&h.tenant, pod("forged", forged)).await;
    // Bound to one of its Nodes: synced, pinned to the matching host node.
    let mut bound = app();
    bound["nodeName"] = json!(one);
    create(&h.tenant, pod("bound", bound)).await;

    let host_pods = h.host_api("v1", "Pod");
    let host_bound = wait_for(&host_pods, &predicted("bound", "shop", "dev")).await;
    assert_eq!(
        host_bound.data["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"],
        json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host-1"]}]}])
    );
    let loose = skip_for(&h, "loose", "not bound yet").await;
    assert!(loose.contains("scheduled node mode"), "{loose}");
    let forged = skip_for(&h, "forged", "tenantplane-0000000000000000").await;
    assert!(forged.contains("not one of the Nodes"), "{forged}");
    controller.wait_passes("dev", 2).await;
    for name in ["loose", "forged"] {
        assert!(
            host_pods
                .get_opt(&predicted(name, "shop", "dev"))
                .await
                .unwrap()
                .is_none(),
            "{name} is not synced"
        );
    }

    // The tenant schedules the waiting Pod: it is synced (retried on the change).
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "loose"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": one}});
    let request = http::Request::post("/api/v1/namespaces/shop/pods/loose/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    h.tenant
        .request_text(request)
        .await
        .expect("bind in the tenant");
    let host_loose = wait_for(&host_pods, &predicted("loose", "shop", "dev")).await;
    assert_eq!(
        host_loose.data["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!(["host-1"])
    );
    controller.stop().await;
}

/// A host Event about host Pod `pod` (uid `uid`), as the kubelet records one.
fn host_event(name: &str, pod: &str, uid: &str, reason: &str, message: &str, count: i64) -> Value {
    host_event_about("Pod", name, pod, uid, reason, message, count)
}

/// A host Event about host object `kind` `object` (uid `uid`).
fn host_event_about(
    kind: &str,
    name: &str,
    object: &str,
    uid: &str,
    reason: &str,
    message: &str,
    count: i64,
) -> Value {
    json!({"apiVersion": "v1", "kind": "Event",
           "metadata": {"name": name, "namespace": HOST_NS},
           "involvedObject": {"apiVersion": "v1", "kind": kind, "namespace": HOST_NS, "name": object, "uid": uid},
           "type": "Warning", "reason": reason, "message": message, "count": count,
           "source": {"component": "kubelet", "host": HOST_NODE},
           "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"})
}

async fn tenant_event_with(h: &Harness, reason: &str) -> DynamicObject {
    let events = h.tenant_api("v1", "Event", "shop");
    eventually(&format!("a tenant Event {reason}"), || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.data["reason"] == reason)
    })
    .await
}

#[tokio::test]
async fn host_pod_events_reach_the_tenant_pod_with_tenant_names_and_others_never_cross() {
    let (h, controller) = start("virtual", None).await;
    host_node(&h.host, HOST_NODE, HOST_NODE_IP, true).await;
    create(&h.tenant, pod("web", app())).await;
    let host_pods = h.host_api("v1", "Pod");
    let host_name = predicted("web", "shop", "dev");
    let host_pod = wait_for(&host_pods, &host_name).await;
    kubelet_runs(&h.host, &host_name, HOST_NODE).await;
    let host_uid = host_pod.metadata.uid.clone().unwrap();
    let tenant_uid = h
        .tenant_api("v1", "Pod", "shop")
        .get("web")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();

    // Something in the host namespace tenantplane does not own, with its Event.
    create(
        &h.host,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stranger", "namespace": HOST_NS},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}}),
    )
    .await;
    create(
        &h.host,
        host_event(
            "stranger.1",
            "stranger",
            "s-uid",
            "StrangerFailed",
            "stranger failed on secret-rack-7.corp.example",
            1,
        ),
    )
    .await;
    // A Node Event never crosses either.
    let mut node_event = host_event(
        "node.1",
        HOST_NODE,
        "n-uid",
        "NodeTrouble",
        "node trouble",
        1,
    );
    node_event["involvedObject"] = json!({"kind": "Node", "name": HOST_NODE, "namespace": HOST_NS});
    create(&h.host, node_event).await;

    let message = format!(
        "Back-off restarting failed container app in pod {host_name}_{HOST_NS}({host_uid}) on {HOST_NODE}; see {HOST_NS}/{host_name}"
    );
    create(
        &h.host,
        host_event("web.1", &host_name, &host_uid, "BackOff", &message, 1),
    )
    .await;
    let copied = tenant_event_with(&h, "BackOff").await;
    assert_eq!(
        copied.data["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web", "uid": tenant_uid})
    );
    let text = copied.data["message"].as_str().unwrap();
    assert!(text.contains("in pod web_"), "{text}");
    assert!(text.contains("see shop/web"), "{text}");
    assert!(
        !text.contains(&host_name) && !text.contains("secret-rack"),
        "{text}"
    );
    assert_eq!(copied.data["type"], "Warning");
    assert_eq!(copied.data["source"], json!({"component": "kubelet"}));
    assert_eq!(copied.data["count"], 1);

    // The host counts it again: the same tenant Event counts up, no second one.
    let host_events = h.host_api("v1", "Event");
    merge_patch(
        &host_events,
        "web.1",
        json!({"count": 3, "lastTimestamp": "2026-01-01T00:05:00Z"}),
    )
    .await;
    let events = h.tenant_api("v1", "Event", "shop");
    let bumped = wait_for_that(
        &events,
        &copied.metadata.name.clone().unwrap(),
        "count 3",
        |e| e.data["count"] == 3,
    )
    .await;
    assert_eq!(bumped.data["lastTimestamp"], "2026-01-01T00:05:00Z");
    // The host Events are seen in order: once a later one about our Pod crossed, the
    // stranger's and the Node's were seen and dropped.
    create(
        &h.host,
        host_event("web.2", &host_name, &host_uid, "Pulled", "pulled", 1),
    )
    .await;
    tenant_event_with(&h, "Pulled").await;
    let all = events.list(&Default::default()).await.unwrap().items;
    assert_eq!(all.len(), 2, "{all:?}");
    let text = serde_json::to_string(&all).unwrap();
    assert!(
        !text.contains("stranger") && !text.contains("NodeTrouble"),
        "{text}"
    );
    assert!(controller.metrics.host_events_of("foreign") >= 2);
    assert_eq!(controller.metrics.host_events_of("copied"), 2);
    assert_eq!(controller.metrics.host_events_of("deduplicated"), 1);
    controller.stop().await;
}

#[tokio::test]
async fn host_service_events_reach_the_tenant_service_and_foreign_services_never_cross() {
    let h = Harness::start().await;
    create(
        &h.host,
        policy("pods", &[("v1", "Pod"), ("v1", "Service")], "2s"),
    )
    .await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start(&h.host).await;
    create(
        &h.host,
        tenant_cluster("dev", HOST_NS, "fast", "pods", "dev-kubeconfig"),
    )
    .await;
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
    )
    .await;
    let host_services = h.host_api("v1", "Service");
    let tenant_services = h.tenant_api("v1", "Service", "shop");
    let host_name = predicted("web", "shop", "dev");
    // The tenant Service is made again with its host copy's address: wait for that,
    // so the tenant UID read below is the final one.
    let (tenant_uid, host_copy) = eventually("web with its host copy's address", || async {
        let host = host_services.get_opt(&host_name).await.unwrap()?;
        let tenant = tenant_services.get_opt("web").await.unwrap()?;
        let address = |o: &DynamicObject| o.data["spec"]["clusterIP"].as_str().map(str::to_owned);
        (address(&host).is_some() && address(&host) == address(&tenant))
            .then(|| (tenant.metadata.uid.clone().unwrap(), host))
    })
    .await;
    let host_uid = host_copy.metadata.uid.clone().unwrap();

    // A host Service tenantplane does not own, and one carrying our copy's labels and
    // annotations (forged): Events about either never cross.
    create(
        &h.host,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "billing", "namespace": HOST_NS},
               "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    create(
        &h.host,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forged", "namespace": HOST_NS,
                            "labels": host_copy.metadata.labels, "annotations": host_copy.metadata.annotations},
               "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    for (event, object) in [("billing.1", "billing"), ("forged.1", "forged")] {
        let uid = uid_of(&host_services, object).await;
        create(
            &h.host,
            host_event_about(
                "Service",
                event,
                object,
                &uid,
                "ForeignTrouble",
                &format!("{object} failed in {HOST_NS}"),
                1,
            ),
        )
        .await;
    }

    let message = format!(
        "Error syncing load balancer for {HOST_NS}/{host_name}: {host_name} has no ingress"
    );
    create(
        &h.host,
        host_event_about(
            "Service",
            "web-svc.1",
            &host_name,
            &host_uid,
            "SyncLoadBalancerFailed",
            &message,
            2,
        ),
    )
    .await;
    let copied = tenant_event_with(&h, "SyncLoadBalancerFailed").await;
    assert_eq!(
        copied.data["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Service", "namespace": "shop", "name": "web", "uid": tenant_uid})
    );
    assert_eq!(
        copied.data["message"],
        "Error syncing load balancer for shop/web: web has no ingress"
    );
    assert_eq!(copied.data["count"], 2);
    assert_eq!(copied.metadata.namespace.as_deref(), Some("shop"));

    // Host Events are seen in order: once a later one about our Service crossed, the
    // foreign ones were seen and dropped.
    create(
        &h.host,
        host_event_about(
            "Service",
            "web-svc.2",
            &host_name,
            &host_uid,
            "EnsuredLoadBalancer",
            "ensured",
            1,
        ),
    )
    .await;
    tenant_event_with(&h, "EnsuredLoadBalancer").await;
    let all = h
        .tenant_api("v1", "Event", "shop")
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(all.len(), 2, "{all:?}");
    let text = serde_json::to_string(&all).unwrap();
    for leak in [
        "ForeignTrouble",
        "billing",
        "forged",
        HOST_NS,
        host_name.as_str(),
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    assert!(controller.metrics.host_events_of("foreign") >= 2);
    assert_eq!(controller.metrics.host_events_of("copied"), 2);
    controller.stop().await;
}
