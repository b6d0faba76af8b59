//! The kubelet paths a tenant reaches through its API server's node proxy
//! (`nodes/{node}/proxy/...`) rather than kubectl's Pod subresources: `run`
//! (a command's output, through the host `pods/exec`). The host node is a
//! TestKubelet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
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
