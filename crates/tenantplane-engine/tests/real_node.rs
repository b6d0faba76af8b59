//! End to end on a real node: the host cluster has a kubelet, containerd, kube-proxy
//! and a scheduler (tenantplane-testenv's RealNode), so the tenant's Pods really run.
//! Needs root; skipped with a message otherwise.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::harness::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use serde_json::{Value, json};
use tenantplane_testenv::RealNode;
use tenantplane_testenv::node::NODE_IP;

/// Real containers start in seconds, but this machine is shared and busy.
const REAL: Duration = Duration::from_secs(120);

const KINDS: &[(&str, &str)] = &[("v1", "Pod"), ("v1", "Service")];

fn busybox_pod(name: &str, command: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
           "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
               "name": "main", "image": "local/busybox:1", "imagePullPolicy": "Never",
               "command": ["sh", "-c", command]}]}})
}

/// `kubectl exec` in a host Pod, as a user would; the output, or the error text.
fn kubectl_exec(
    kubeconfig: &std::path::Path,
    pod: &str,
    command: &[&str],
) -> Result<String, String> {
    let mut args = vec!["-n", HOST_NS, "exec", pod, "--"];
    args.extend_from_slice(command);
    tenantplane_testenv::kubectl(kubeconfig, &args)
}

#[tokio::test]
async fn tenant_pods_really_run_report_status_and_reach_each_other_through_a_service() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let h = Harness::start_on_fresh_host().await;
    let node = RealNode::start(&h.host_server).await.expect("real node");
    create(&h.host, policy("pods", KINDS, "2s")).await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start(&h.host).await;
    h.create_dev_with("fast", "pods").await;

    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
    )
    .await;
    create(&h.tenant, busybox_pod("web",
        "echo web-started; echo tenant-web-page > /www/index.html; exec httpd -f -v -p 8080 -h /www")).await;
    create(&h.tenant, busybox_pod("client", "exec sleep 3600")).await;

    // The host Pod really runs: Running, on the node, its container started.
    let host_pods: Api<Pod> = Api::namespaced(h.host.clone(), HOST_NS);
    let web = predicted("web", "shop", "dev");
    let running = eventually_within(&format!("host Pod {web} Running"), REAL, || async {
        let pod = host_pods.get_opt(&web).await.ok().flatten()?;
        let status = pod.status.clone()?;
        let started = status
            .container_statuses
            .as_ref()?
            .first()?
            .state
            .as_ref()?
            .running
            .is_some();
        (status.phase.as_deref() == Some("Running") && started).then_some(pod)
    })
    .await;
    assert_eq!(
        running.spec.as_ref().unwrap().node_name.as_deref(),
        Some(NODE_IP)
    );
    let host_ip = running.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(host_ip.starts_with("10.244.0."), "{host_ip}");

    // Its output, through the host API server, the kubelet and containerd.
    eventually_within("the web Pod's log", REAL, || async {
        let logs = host_pods.logs(&web, &LogParams::default()).await.ok()?;
        logs.starts_with("web-started\n").then_some(())
    })
    .await;

    // The tenant sees what really happened: Running, the real Pod IP.
    let tenant_pods: Api<Pod> = Api::namespaced(h.tenant.clone(), "shop");
    let tenant_web = eventually_within(
        "tenant Pod web Running with the host's IP",
        REAL,
        || async {
            let pod = tenant_pods.get("web").await.ok()?;
            let status = pod.status.clone()?;
            (status.phase.as_deref() == Some("Running")
                && status.pod_ip.as_deref() == Some(&host_ip))
            .then_some(pod)
        },
    )
    .await;
    let started = tenant_web.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .running;
    assert!(
        started.is_some(),
        "the tenant Pod's container state is the real one"
    );
    // Bound to the virtual Node standing for the real node (the default node mode):
    // neither its name nor its address is the host node's.
    let virtual_node = h
        .tenant_node_name(tenantplane_api::NodeMode::Virtual, NODE_IP)
        .await;
    let bound = eventually_within("tenant Pod web bound to the virtual node", REAL, || async {
        let pod = tenant_pods.get("web").await.ok()?;
        (pod.spec.as_ref()?.node_name.as_deref() == Some(virtual_node.as_str())).then_some(pod)
    })
    .await;
    assert_eq!(bound.status.unwrap().host_ip, None, "no host address");
    let tenant_node = dynamic(&h.tenant, "v1", "Node", None)
        .get(&virtual_node)
        .await
        .unwrap();
    let shown = serde_json::to_string(&tenant_node).unwrap();
    assert!(!shown.contains(NODE_IP), "{shown}");

    // The client reaches the web Pod through the host Service's ClusterIP (kube-proxy).
    let services = h.host_api("v1", "Service");
    let service = wait_for(&services, &predicted("web", "shop", "dev")).await;
    let cluster_ip = service.data["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = predicted("client", "shop", "dev");
    let kubeconfig = h.host_server.kubeconfig_path();
    // busybox's `wget -T` segfaults; `timeout` bounds each attempt instead.
    let url = format!("http://{cluster_ip}/");
    let page = eventually_within(&format!("client -> {url}"), REAL, || {
        let (kubeconfig, client, url) = (kubeconfig.clone(), client.clone(), url.clone());
        async move {
            let result = tokio::task::spawn_blocking(move || {
                kubectl_exec(
                    &kubeconfig,
                    &client,
                    &["timeout", "5", "wget", "-qO-", &url],
                )
            })
            .await
            .ok()?;
            result.ok()
        }
    })
    .await;
    assert_eq!(page, "tenant-web-page\n");

    controller.stop().await;
    drop(node);
}
