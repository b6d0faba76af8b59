//! The kubelet paths a tenant reaches through its API server's node proxy
//! (`nodes/{node}/proxy/...`) rather than kubectl's Pod subresources: `run`
//! (a command's output, through the host `pods/exec`), `stats/summary` and
//! `metrics/resource` (the host node's figures through the host API server, cut
//! down to the tenant's own Pods under tenant names). The host node is a
//! TestKubelet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::{Value, json};
use tenantplane_core::metadata::{
    ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE,
    LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};

/// The tenant Node tenant Pod `shop/web` is bound to.
async fn tenant_node(w: &World) -> String {
    let pod =
        w.h.tenant_api("v1", "Pod", "shop")
            .get("web")
            .await
            .unwrap();
    pod.data["spec"]["nodeName"].as_str().unwrap().to_owned()
}

/// `method` on `path` of tenant Node `node`, through the tenant API server.
async fn node_proxy(
    w: &World,
    method: &str,
    node: &str,
    path: &str,
) -> Result<String, kube::Error> {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("/api/v1/nodes/{node}/proxy{path}"))
        .body(Vec::new())
        .unwrap();
    w.h.tenant.request_text(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_through_the_tenant_node_proxy_runs_the_command_in_the_host_pod() {
    let w = World::start().await;
    let (kubelet, host_name) = web_pod(&w).await;
    let node = tenant_node(&w).await;
    let dev = Some(&w.client_cert);

    let out = node_proxy(
        &w,
        "POST",
        &node,
        "/run/shop/web/app?cmd=echo%20hello%20tenant",
    )
    .await
    .unwrap();
    assert_eq!(out, "hello tenant\n");
    // A failing command: 500 naming its exit code, as the kubelet answers.
    match node_proxy(&w, "POST", &node, "/run/shop/web/app?cmd=false").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 500, "{status:?}");
            assert!(status.message.contains("exit code 1"), "{status:?}");
        }
        other => panic!("a failing command answered {other:?}"),
    }
    // No command: 400. Only POST runs.
    let answer = w.post(dev, "/run/shop/web/app").await.unwrap();
    assert_eq!(answer.status, 400, "{answer:?}");
    let answer = w.get(dev, "/run/shop/web/app?cmd=ls").await.unwrap();
    assert_eq!(answer.status, 405, "{answer:?}");

    // Tenant prod's host Pod placed under the name dev's path maps to: refused.
    let stolen = predicted("stolen", "shop", "dev");
    create(
        &w.h.host,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": stolen, "namespace": HOST_NS,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: "prod"},
                "annotations": {ANNOTATION_VIRTUAL_NAME: "stolen", ANNOTATION_VIRTUAL_NAMESPACE: "shop",
                                ANNOTATION_VIRTUAL_GROUP_KIND: "Pod"}},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}}),
    )
    .await;
    let answer = w
        .post(dev, "/run/shop/stolen/app?cmd=echo%20hi")
        .await
        .unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(answer.body.contains("refused run"), "{}", answer.body);
    let skip = eventually("the refused run in dev's SyncDecision", || async {
        w.kubelet_skips()
            .await
            .into_iter()
            .find(|d| d["tenant"]["name"] == "stolen")
    })
    .await;
    assert!(
        skip["reason"]
            .as_str()
            .unwrap()
            .contains("metadata names Pod shop/stolen of tenant prod"),
        "{skip}"
    );

    // The host kubelet ran the command in the host Pod, and saw no tenant name.
    let requests = kubelet.requests();
    let exec_path = format!("/exec/{HOST_NS}/{host_name}/app");
    assert!(
        requests.iter().any(
            |r| r.path == exec_path && r.param_values("command") == ["echo", "hello", "tenant"]
        ),
        "{requests:#?}"
    );
    assert!(
        requests.iter().all(|r| !r.path.contains("/shop/")),
        "the host kubelet was asked for a tenant name: {requests:#?}"
    );
    assert!(
        requests.iter().all(|r| !r.path.contains(&stolen)),
        "the refused run reached the host: {requests:#?}"
    );
    drop(kubelet);
    w.stop().await;
}

/// One Pod's entry in a kubelet summary.
fn pod_stats(ns: &str, name: &str, uid: &str, cpu: u64, memory: u64) -> Value {
    json!({"podRef": {"name": name, "namespace": ns, "uid": uid},
           "startTime": "2026-01-01T00:00:00Z",
           "containers": [{"name": "app", "startTime": "2026-01-01T00:00:00Z",
                           "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": cpu},
                           "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": memory}}],
           "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": cpu},
           "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": memory}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_figures_through_the_tenant_node_proxy_show_only_the_tenants_pods() {
    let w = World::start().await;
    let (kubelet, host_name) = web_pod(&w).await;
    let node = tenant_node(&w).await;
    let host_uid = uid_of(&w.h.host_api("v1", "Pod"), &host_name).await;
    let tenant_uid = uid_of(&w.h.tenant_api("v1", "Pod", "shop"), "web").await;
    // The host node runs dev's Pod, tenant prod's copy of shop/web, a Pod
    // tenantplane does not own, and (elsewhere) one named like dev's.
    kubelet.set_stats_summary(json!({
        "node": {"nodeName": NODE, "startTime": "2025-06-01T00:00:00Z",
                 "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": 3_000_000_000u64},
                 "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": 7_000_000_000u64},
                 "systemContainers": [{"name": "kubelet"}], "fs": {"capacityBytes": 1}},
        "pods": [
            pod_stats(HOST_NS, &host_name, &host_uid, 100, 1000),
            pod_stats(HOST_NS, &predicted("web", "shop", "prod"), "prod-uid", 5_000, 50_000),
            pod_stats(HOST_NS, "stranger", "stranger-uid", 7_000, 70_000),
            pod_stats("other-ns", &host_name, &host_uid, 9_000, 90_000),
        ]
    }));

    let text = node_proxy(&w, "GET", &node, "/stats/summary")
        .await
        .unwrap();
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        summary["node"],
        json!({"nodeName": node,
               "cpu": {"time": "2026-01-01T00:01:00Z", "usageNanoCores": 100},
               "memory": {"time": "2026-01-01T00:01:00Z", "workingSetBytes": 1000}})
    );
    let pods = summary["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{summary:#}");
    assert_eq!(
        pods[0]["podRef"],
        json!({"name": "web", "namespace": "shop", "uid": tenant_uid})
    );
    assert_eq!(pods[0]["containers"][0]["cpu"]["usageNanoCores"], 100);
    for leak in [
        HOST_NS,
        host_name.as_str(),
        host_uid.as_str(),
        NODE,
        "prod",
        "stranger",
        "systemContainers",
        "2025-06-01",
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    // The host kubelet was asked through the host API server.
    assert!(
        kubelet
            .requests()
            .iter()
            .any(|r| r.path == "/stats/summary"),
        "{:#?}",
        kubelet.requests()
    );

    // Called directly (no node proxy naming the Node): the one Node dev's Pods run on.
    let dev = Some(&w.client_cert);
    let answer = w.get(dev, "/stats/summary").await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let direct: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(direct, summary);
    // /metrics/resource (what metrics-server reads), by the same rules.
    kubelet.set_resource_metrics(&format!(
        "# TYPE container_cpu_usage_seconds_total counter\n\
         container_cpu_usage_seconds_total{{container=\"app\",namespace=\"{HOST_NS}\",pod=\"{host_name}\"}} 1.5 1767225660000\n\
         container_cpu_usage_seconds_total{{container=\"app\",namespace=\"{HOST_NS}\",pod=\"stranger\"}} 9 1767225660000\n\
         # TYPE node_cpu_usage_seconds_total counter\n\
         node_cpu_usage_seconds_total 123456.7 1767225660000\n\
         scrape_error 0\n"
    ));
    let text = node_proxy(&w, "GET", &node, "/metrics/resource")
        .await
        .unwrap();
    assert_eq!(
        text,
        "# TYPE container_cpu_usage_seconds_total counter\n\
         container_cpu_usage_seconds_total{container=\"app\",namespace=\"shop\",pod=\"web\"} 1.5 1767225660000\n\
         # TYPE node_cpu_usage_seconds_total counter\n\
         node_cpu_usage_seconds_total 1.5 1767225660000\n\
         scrape_error 0\n"
    );

    // A caller no TenantCluster registered: 401.
    let stranger = w.h.env.ca().issue(&["stranger"]).unwrap();
    let answer = w.get(Some(&stranger), "/stats/summary").await.unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");
    drop(kubelet);
    w.stop().await;
}
