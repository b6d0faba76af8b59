//! Every refusal path of the kubelet endpoint, called directly over HTTPS: no
//! client certificate, an unknown one, and for the known caller every path that
//! does not name a synced Pod of its own TenantCluster (403 and a Skip decision).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::json;
use tenantplane_core::metadata::{
    ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE,
    LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};

fn host_pod(
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": HOST_NS, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_that_is_not_for_a_synced_pod_of_the_caller_is_refused() {
    let w = World::start().await;

    // A synced Pod of dev, so the engine runs and there is a real host copy.
    create(
        &w.h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}]}}),
    )
    .await;
    let web = predicted("web", "shop", "dev");
    wait_for(&w.h.host_api("v1", "Pod"), &web).await;

    // No client certificate: the TLS handshake fails (or, at most, 401).
    match w.get(None, "/containerLogs/shop/web/app").await {
        Err(e) => assert!(e.contains("TLS"), "{e}"),
        Ok(answer) => assert_eq!(answer.status, 401, "{answer:?}"),
    }
    // A certificate no TenantCluster registered: 401, whatever the path.
    let stranger = w.h.env.ca().issue(&["stranger"]).unwrap();
    let answer = w
        .get(Some(&stranger), "/containerLogs/shop/web/app")
        .await
        .unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");
    assert!(answer.body.contains("not registered"), "{}", answer.body);
    // ... also for the health check's neighbours: nothing is served to it.
    let answer = w
        .get(Some(&stranger), "/exec/shop/web/app?command=ls&output=1")
        .await
        .unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");

    let dev = Some(&w.client_cert);
    assert_eq!(w.get(dev, "/healthz").await.unwrap().status, 200);

    // A Pod that is not synced (missing on the host): 403.
    let answer = w.get(dev, "/containerLogs/shop/ghost/app").await.unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.body.contains("no such Pod is synced"),
        "{}",
        answer.body
    );

    // Forged names: not Kubernetes names, so no tenant Pod has them.
    for path in [
        "/containerLogs/Shop/web/app",
        "/containerLogs/shop/web%2F..%2Fx/app",
        "/exec/shop/WEB/app?command=ls&output=1",
        "/portForward/shop/-web",
    ] {
        let answer = w.get(dev, path).await.unwrap();
        assert_eq!(answer.status, 403, "{path}: {answer:?}");
    }

    // A host Pod with the very name dev's path maps to, not made by tenantplane.
    let foreign = predicted("foreign", "shop", "dev");
    create(&w.h.host, host_pod(&foreign, json!({}), json!({}))).await;
    let answer = w.get(dev, "/containerLogs/shop/foreign/app").await.unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.body.contains("not managed by tenantplane"),
        "{}",
        answer.body
    );
    // port-forward to it is refused the same way, before any upgrade.
    let answer = w.get(dev, "/portForward/shop/foreign").await.unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    assert!(
        answer.body.contains("refused portForward"),
        "{}",
        answer.body
    );

    // Another tenant's host Pod (tenant prod's copy of shop/stolen) placed under the
    // name dev's path maps to: its metadata names prod, so dev may not reach it.
    let stolen = predicted("stolen", "shop", "dev");
    create(
        &w.h.host,
        host_pod(
            &stolen,
            json!({LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: "prod"}),
            json!({ANNOTATION_VIRTUAL_NAME: "stolen", ANNOTATION_VIRTUAL_NAMESPACE: "shop",
                   ANNOTATION_VIRTUAL_GROUP_KIND: "Pod"}),
        ),
    )
    .await;
    let answer = w
        .get(dev, "/exec/shop/stolen/app?command=ls&output=1")
        .await
        .unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    // And prod's real copy (its own name) is out of dev's reach by construction:
    // dev's path for shop/stolen never maps to prod's host name.
    assert_ne!(predicted("stolen", "shop", "prod"), stolen);

    // dev's own synced Pod, but a container it does not have: 403.
    let answer = w.get(dev, "/containerLogs/shop/web/sidecar").await.unwrap();
    assert_eq!(answer.status, 403, "{answer:?}");
    // (the Status body is JSON: the quotes are escaped)
    assert!(
        answer.body.contains(r#"has no container \"sidecar\""#),
        "{}",
        answer.body
    );

    // dev's own synced Pod and container: authorized (the host API server then
    // answers; the Pod is not bound to a node, so not 401/403 but the host's error).
    let answer = w.get(dev, "/containerLogs/shop/web/app").await.unwrap();
    assert!(![401, 403].contains(&answer.status), "{answer:?}");
    // portForward is authorized the same way; without the SPDY upgrade it is then 400.
    let answer = w.get(dev, "/portForward/shop/web").await.unwrap();
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.body.contains("SPDY/3.1"), "{}", answer.body);

    // Every refusal of dev's calls is a Skip decision of dev, naming the tenant Pod.
    let skips = eventually("the kubelet refusals in dev's SyncDecision", || async {
        let skips = w.kubelet_skips().await;
        (skips.len() >= 8).then_some(skips)
    })
    .await;
    let named = |pod: &str| {
        skips.iter().any(|d| {
            d["tenant"]["namespace"] == "shop" && d["tenant"]["name"] == pod && d["kind"] == "Pod"
        })
    };
    for pod in ["ghost", "foreign", "stolen", "web", "WEB"] {
        assert!(named(pod), "no Skip for shop/{pod}: {skips:#?}");
    }
    let text = serde_json::to_string(&skips).unwrap();
    assert!(
        text.contains("metadata names Pod shop/stolen of tenant prod"),
        "{text}"
    );
    // No refusal of the stranger is recorded anywhere (it is nobody's).
    assert!(!text.contains("stranger"), "{text}");
    w.stop().await;
}
