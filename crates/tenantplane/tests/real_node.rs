//! Two TenantClusters in ONE host namespace on a real node (containerd, kubelet,
//! kube-proxy), synced by the `tenantplane controller` process with each tenant's DNS
//! server running as a real Pod of the `tenantplane` image: each tenant's client
//! reaches only its own Pods, through its own Service and by its own DNS names.
//! Needs root; skipped with a message otherwise.
//!
//! No NetworkPolicy implementation runs here (bridge CNI enforces none), so the
//! IsolationProfile's policies are checked as objects; what crosses is decided by
//! the Services' host selectors and each tenant's DNS, which is what this tests.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::real_node_common::{kubectl, meta, tenancy_defaults};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tenantplane_testenv::node::image::Image;
use tenantplane_testenv::{ApiServer, ApiServerOptions, ControllerManager, RealNode, TestEnv};

/// Real containers start in seconds, but CI machines are shared and busy.
const REAL: Duration = Duration::from_secs(180);
const HOST_NS: &str = "team";
const IMAGE: &str = "local/tenantplane:test";

/// Runs `command` in tenant `tenant`'s client Pod, through the host API server (the
/// host copy: same network and DNS; the tenant's own `kubectl exec` is tested
/// with the kubelet endpoint elsewhere).
async fn in_client(host: &Path, tenant: &str, command: &[&str]) -> Result<String, String> {
    let pod = format!("client-x-default-x-{tenant}");
    let mut args = vec!["-n", HOST_NS, "exec", pod.as_str(), "--"];
    args.extend_from_slice(command);
    kubectl(host, &args).await
}

/// What tenant `tenant`'s client gets from `url` (`wget`), or the error.
async fn fetch(host: &Path, tenant: &str, url: &str) -> Result<String, String> {
    in_client(host, tenant, &["timeout", "5", "wget", "-qO-", url]).await
}

/// One tenant: its API server, its workload controllers, its TenantCluster.
struct Tenant {
    name: &'static str,
    server: ApiServer,
    _controllers: ControllerManager,
}

async fn tenant(env: &TestEnv, host: &Client, name: &'static str) -> Tenant {
    let server = env.start_apiserver(name).await.unwrap();
    let controllers = env
        .start_controller_manager_with(&server, "deployment,replicaset")
        .unwrap();
    let secret = Secret {
        metadata: meta(&format!("{name}-kubeconfig"), Some(HOST_NS)),
        data: Some(
            [(
                "kubeconfig".to_owned(),
                ByteString(server.kubeconfig_yaml("admin").unwrap().into_bytes()),
            )]
            .into(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(host.clone(), HOST_NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let tc = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        "metadata": {"name": name, "namespace": HOST_NS},
        "spec": {"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"},
                 "controlPlane": {"external": {"kubeconfigSecretRef": {"name": format!("{name}-kubeconfig")}}}}});
    Api::<tenantplane_api::TenantCluster>::namespaced(host.clone(), HOST_NS)
        .create(&PostParams::default(), &serde_json::from_value(tc).unwrap())
        .await
        .unwrap();
    Tenant {
        name,
        server,
        _controllers: controllers,
    }
}

/// A Deployment `name` of busybox httpd answering `page`, and its Service.
async fn web(tenant: &Path, name: &str, page: &str) {
    let serve = format!("echo {page} > /tmp/index.html; exec httpd -f -p 8080 -h /tmp");
    kubectl(
        tenant,
        &[
            "create",
            "deployment",
            name,
            "--image=local/busybox:1",
            "--",
            "sh",
            "-c",
            &serve,
        ],
    )
    .await
    .unwrap();
    kubectl(
        tenant,
        &[
            "expose",
            "deployment",
            name,
            "--port=80",
            "--target-port=8080",
        ],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_in_one_namespace_reach_only_their_own_pods_by_their_own_names() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let env = TestEnv::start_shared().await.unwrap();
    let mut host_options = ApiServerOptions::new("host");
    // The DNS servers use in-cluster config.
    host_options.service_account_admission = true;
    let host_server = env.start_apiserver_with(host_options).await.unwrap();
    let host = host_server.client().await.unwrap();
    host_server
        .install_crds(tenantplane_api::crds())
        .await
        .unwrap();
    let mut node = RealNode::start(&host_server).await.expect("real node");
    node.serve_api_to_pods(&host_server).await.unwrap();
    let image = Image::with_shared_libraries(
        IMAGE,
        Path::new(env!("CARGO_BIN_EXE_tenantplane")),
        "tenantplane",
    )
    .unwrap();
    node.import(&image).unwrap();

    tenancy_defaults(&host, HOST_NS).await;
    let a = tenant(&env, &host, "a").await;
    let b = tenant(&env, &host, "b").await;

    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = listen.local_addr().unwrap().to_string();
    drop(listen);
    let mut controller = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["controller", "--kubeconfig"])
        .arg(host_server.kubeconfig_path())
        .args(["--listen", &metrics, "--dns-image", IMAGE, "--workers", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run tenantplane controller");

    let (ka, kb) = (a.server.kubeconfig_path(), b.server.kubeconfig_path());
    // The same Deployment and Service names and labels in both tenants: only the
    // host selectors tell them apart.
    web(&ka, "web", "page-of-a").await;
    web(&kb, "web", "page-of-b").await;
    web(&kb, "only-b", "only-in-b").await;
    for kc in [&ka, &kb] {
        kubectl(
            kc,
            &[
                "run",
                "client",
                "--image=local/busybox:1",
                "--restart=Never",
                "--",
                "sleep",
                "3600",
            ],
        )
        .await
        .unwrap();
    }

    let hk = host_server.kubeconfig_path();
    for (tenant, page) in [(&a, "page-of-a"), (&b, "page-of-b")] {
        let start = Instant::now();
        loop {
            let got = fetch(&hk, tenant.name, "http://web/").await;
            if got.as_deref().map(str::trim) == Ok(page) {
                break;
            }
            assert!(
                start.elapsed() < REAL,
                "tenant {}'s client never got its web page; last: {got:?}\nhost Pods:\n{:?}",
                tenant.name,
                kubectl(&hk, &["get", "pods", "-A", "-o", "wide"]).await
            );
            assert_ne!(
                got.as_deref().map(str::trim),
                Ok(if page == "page-of-a" {
                    "page-of-b"
                } else {
                    "page-of-a"
                })
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // kube-proxy picks an endpoint at random per connection: had the host
        // Service selected the other tenant's Pod too, some of these would show it.
        for name in ["web", "web.default", "web.default.svc.cluster.local"] {
            for _ in 0..4 {
                let got = fetch(&hk, tenant.name, &format!("http://{name}/"))
                    .await
                    .unwrap();
                assert_eq!(got.trim(), page, "tenant {} via {name}", tenant.name);
            }
        }
    }
    // b's names do not exist in a: its DNS answers only for a's Services.
    assert_eq!(
        fetch(&hk, "b", "http://only-b/").await.unwrap().trim(),
        "only-in-b"
    );
    for name in [
        "only-b",
        "only-b.default",
        "only-b.default.svc.cluster.local",
    ] {
        assert!(
            fetch(&hk, "a", &format!("http://{name}/")).await.is_err(),
            "tenant a reached b's {name}"
        );
    }
    // busybox nslookup applies search domains only to single labels, asks every
    // one and exits 1 if any is unknown: what counts is whether an answer (a
    // `Name:` line) came back.
    let answer = |out: Result<String, String>| match out {
        Ok(text) | Err(text) => text,
    };
    for name in ["only-b", "only-b.default.svc.cluster.local"] {
        let found = answer(in_client(&hk, "b", &["nslookup", name]).await);
        assert!(
            found.contains("Name:\tonly-b.default.svc.cluster.local"),
            "{name} did not resolve in tenant b: {found}"
        );
        let lookup = answer(in_client(&hk, "a", &["nslookup", name]).await);
        assert!(
            lookup.contains("NXDOMAIN") && !lookup.contains("Name:"),
            "{name} resolved in tenant a: {lookup}"
        );
    }

    // The policy objects: one per tenant, selecting only that tenant's host Pods.
    let policies: Api<NetworkPolicy> = Api::namespaced(host.clone(), HOST_NS);
    for name in ["a", "b"] {
        let policy = policies
            .get(&format!("tenantplane-isolation-{name}"))
            .await
            .unwrap();
        let selector = serde_json::to_value(policy.spec.unwrap().pod_selector).unwrap();
        assert_eq!(
            selector["matchLabels"]["tenantplane.io/tenant"], name,
            "{selector}"
        );
    }

    controller.kill().await.unwrap();
    drop(node);
}
