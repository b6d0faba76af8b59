//! A provisioned control plane on a real node: a TenantCluster without `external`
//! and with distro `k8s` starts kube-apiserver, kube-controller-manager and etcd as
//! one Pod (from a locally built image of the source-built binaries; no registry is
//! reachable here), becomes Ready, hands out a kubeconfig Secret that works, and the
//! tenant's Pods run on the real node; in it, tenantplane's webhook refuses the
//! tenant's writes to fromHost copies. Deleting the TenantCluster removes it all.
//! Needs root; skipped with a message otherwise.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::real_node_common::{kubectl, tenancy_defaults};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, Pod, Secret, Service};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tenantplane_api::{SyncPolicy, SyncPolicySpec, TenantCluster};
use tenantplane_testenv::node::image::Image;
use tenantplane_testenv::node::{NODE_IP, SERVICE_CIDR};
use tenantplane_testenv::{RealNode, TestEnv, create_from_json};

/// Real containers start in seconds, but CI machines are shared and busy.
const REAL: Duration = Duration::from_secs(180);
const HOST_NS: &str = "team";
const CP_NS: &str = "team-cp";
const IMAGE: &str = "local/kubernetes:test";
const STORAGE_CLASS: &str = "manual";

/// What the host shows about the control plane, for a failure message.
async fn diagnose(host: &Path, controller_log: &Path) -> String {
    let mut out = String::new();
    for args in [
        &["get", "pods,pvc,statefulsets", "-A", "-o", "wide"][..],
        &["-n", CP_NS, "describe", "pod", "dev-cp-0"][..],
        &[
            "-n",
            CP_NS,
            "logs",
            "dev-cp-0",
            "-c",
            "kube-apiserver",
            "--tail=30",
        ][..],
        &["-n", CP_NS, "logs", "dev-cp-0", "-c", "etcd", "--tail=10"][..],
        &["-n", HOST_NS, "get", "tenantclusters", "dev", "-o", "yaml"][..],
    ] {
        let got = kubectl(host, args).await;
        out.push_str(&format!(
            "\n$ kubectl {}\n{}\n",
            args.join(" "),
            match got {
                Ok(text) | Err(text) => text,
            }
        ));
    }
    let log = std::fs::read_to_string(controller_log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    out.push_str("\ncontroller log (last lines, newest first):\n");
    out.push_str(&tail.join("\n"));
    out
}

/// Polls `check` until it gives a value or [`REAL`] passes.
async fn until<T, F, Fut>(what: &str, host: &Path, log: &Path, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            eprintln!("{what}: {:.1} s", start.elapsed().as_secs_f64());
            return value;
        }
        if start.elapsed() > REAL {
            panic!("{what}: not within {REAL:?}{}", diagnose(host, log).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn storage_class() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.k8s.io", "v1", "StorageClass"),
        "storageclasses",
    )
}

fn ready(tc: &TenantCluster) -> bool {
    tc.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_k8s_control_plane_runs_as_a_pod_and_its_tenant_pods_run_on_the_node() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let env = TestEnv::start_shared().await.unwrap();
    let host_server = env.start_apiserver("host").await.unwrap();
    let host = host_server.client().await.unwrap();
    host_server
        .install_crds(tenantplane_api::crds())
        .await
        .unwrap();
    // The control plane's PVC binds to the PV below, and is released (its
    // protection finalizer) with the namespace at the end.
    let _host_controllers = env
        .start_controller_manager_with(
            &host_server,
            "namespace,garbagecollector,persistentvolume-binder,pvc-protection",
        )
        .unwrap();
    let node = RealNode::start(&host_server).await.expect("real node");
    let assets = env.assets();
    let image = Image::binaries(
        IMAGE,
        &[
            (&assets.kube_apiserver(), "kube-apiserver"),
            (
                &assets.kube_controller_manager().unwrap(),
                "kube-controller-manager",
            ),
            (&assets.etcd(), "etcd"),
        ],
    )
    .unwrap();
    node.import(&image).unwrap();

    // Static provisioning: no storage provisioner runs here.
    let data: PathBuf = env.root().join("control-plane-data");
    create_from_json(
        &Api::<PersistentVolume>::all(host.clone()),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "cp-data"},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS, "persistentVolumeReclaimPolicy": "Retain",
                        "hostPath": {"path": data, "type": "DirectoryOrCreate"}}}),
    )
    .await.unwrap();
    tenancy_defaults(&host, HOST_NS).await;
    // A host StorageClass the tenant sees read-only (fromHost).
    create_from_json(
        &Api::<DynamicObject>::all_with(host.clone(), &storage_class()),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "fast"}, "provisioner": "example.com/none"}),
    )
    .await
    .unwrap();
    let mut resources = serde_json::to_value(SyncPolicySpec::default_policy().resources).unwrap();
    resources.as_array_mut().unwrap().push(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "direction": "fromHost"}),
    );
    Api::<SyncPolicy>::all(host.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": resources}})),
        )
        .await
        .unwrap();

    // tenantplane's webhook server where the control-plane Pod reaches it: on the
    // node's address, with a certificate for it.
    let port = std::net::TcpListener::bind((NODE_IP, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issued = env.ca().issue(&[NODE_IP]).unwrap();
    let (cert, key, ca) = (
        env.root().join("webhook.crt"),
        env.root().join("webhook.key"),
        env.root().join("webhook-ca.crt"),
    );
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    std::fs::write(&ca, env.ca().cert_pem()).unwrap();
    let _webhook = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["webhook", "--listen", &format!("{NODE_IP}:{port}")])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run tenantplane webhook");
    let tcs: Api<TenantCluster> = Api::namespaced(host.clone(), HOST_NS);
    create_from_json(
        &tcs,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": "dev", "namespace": HOST_NS},
               "spec": {"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"},
                        "controlPlane": {"distro": "k8s",
                                         "images": {"apiServer": IMAGE, "controllerManager": IMAGE, "etcd": IMAGE},
                                         "storage": {"storageClassName": STORAGE_CLASS, "size": "1Gi"}}}}),
    )
    .await.unwrap();

    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = listen.local_addr().unwrap().to_string();
    drop(listen);
    let log = env.root().join("controller.log");
    let mut controller = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["controller", "--kubeconfig"])
        .arg(host_server.kubeconfig_path())
        .args(["--listen", &metrics, "--service-cidr", SERVICE_CIDR])
        .args(["--no-tenant-dns", "--workers", "4"])
        .args([
            "--tenant-webhook-url",
            &format!("https://{NODE_IP}:{port}/from-host"),
        ])
        .arg("--tenant-webhook-ca-file")
        .arg(&ca)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("run tenantplane controller");
    let hk = host_server.kubeconfig_path();

    // The control plane runs as a Pod on the node and becomes Ready.
    until("the TenantCluster Ready", &hk, &log, || async {
        tcs.get_opt("dev").await.ok().flatten().filter(ready)
    })
    .await;
    let cp_pod = Api::<Pod>::namespaced(host.clone(), CP_NS)
        .get("dev-cp-0")
        .await
        .unwrap();
    let spec = cp_pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(NODE_IP));
    let containers: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        containers,
        ["etcd", "kube-apiserver", "kube-controller-manager"]
    );

    // The kubeconfig Secret's CA and token work. Its server is the Service's
    // in-cluster DNS name, which only cluster DNS resolves: this test dials the
    // Service's address and presents that name (`tls-server-name`), as the
    // controller does.
    let secret = Api::<Secret>::namespaced(host.clone(), HOST_NS)
        .get("dev-kubeconfig")
        .await
        .unwrap();
    let text = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let mut kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cluster_ip = Api::<Service>::namespaced(host.clone(), CP_NS)
        .get("dev-cp")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let cluster = kubeconfig.clusters[0].cluster.as_mut().unwrap();
    assert_eq!(
        cluster.server.as_deref(),
        Some("https://dev-cp.team-cp.svc:6443")
    );
    cluster.server = Some(format!("https://{cluster_ip}:6443"));
    cluster.tls_server_name = Some("dev-cp.team-cp.svc".into());
    let tk = env.root().join("tenant.kubeconfig");
    std::fs::write(&tk, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
    let version = kubectl(&tk, &["version", "-o", "json"]).await.unwrap();
    assert!(version.contains("\"gitVersion\": \"v1.20"), "{version}");
    // Refused without the token: the credential is what grants access.
    let anonymous = Client::try_from({
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig.clone(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        config.auth_info = kube::config::AuthInfo::default();
        config
    })
    .unwrap();
    let denied = Api::<Namespace>::all(anonymous)
        .list(&Default::default())
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "{denied:?}"
    );

    // The host StorageClass is in the tenant, read-only: the syncer (its own
    // identity) writes the copy, the tenant's edits and deletes are refused at
    // admission by tenantplane's webhook, which the controller registered.
    until(
        "the fromHost StorageClass in the tenant",
        &hk,
        &log,
        || async {
            kubectl(&tk, &["get", "storageclass", "fast", "-o", "name"])
                .await
                .ok()
        },
    )
    .await;
    let read_only =
        "StorageClass fast is a read-only copy of host StorageClass.storage.k8s.io fast";
    // Until the webhook answers, an edit goes through (and is reverted): poll.
    let refused = until(
        "the tenant's edit refused at admission",
        &hk,
        &log,
        || async {
            kubectl(
                &tk,
                &["label", "--overwrite", "storageclass", "fast", "edited=yes"],
            )
            .await
            .err()
            .filter(|e| e.contains(read_only))
        },
    )
    .await;
    assert!(refused.contains("denied the request"), "{refused}");
    let delete = kubectl(&tk, &["delete", "storageclass", "fast"]).await;
    assert!(
        delete.as_ref().is_err_and(|e| e.contains(read_only)),
        "{delete:?}"
    );
    // A forged copy is refused too.
    kubectl(&tk, &["create", "configmap", "mine"])
        .await
        .unwrap();
    let forged = kubectl(
        &tk,
        &[
            "label",
            "configmap",
            "mine",
            "tenantplane.io/from-host=true",
        ],
    )
    .await;
    assert!(
        forged
            .as_ref()
            .is_err_and(|e| e.contains("only tenantplane sets it")),
        "{forged:?}"
    );
    // The host's change still reaches the copy: the syncer passes the webhook.
    Api::<DynamicObject>::all_with(host.clone(), &storage_class())
        .patch(
            "fast",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();
    until(
        "the host's change in the tenant copy",
        &hk,
        &log,
        || async {
            let tier = kubectl(
                &tk,
                &[
                    "get",
                    "storageclass",
                    "fast",
                    "-o",
                    "jsonpath={.metadata.labels.tier}",
                ],
            )
            .await
            .ok()?;
            (tier == "gold").then_some(())
        },
    )
    .await;

    // The tenant's own controllers run: its `default` ServiceAccount appears.
    until("the tenant's default ServiceAccount", &hk, &log, || async {
        kubectl(&tk, &["get", "serviceaccount", "default", "-o", "name"])
            .await
            .ok()
    })
    .await;
    kubectl(
        &tk,
        &[
            "run",
            "web",
            "--image=local/busybox:1",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "echo provisioned-hello; exec sleep 3600",
        ],
    )
    .await
    .unwrap();
    // Its host copy runs on the real node, and the tenant sees it Running.
    until("the tenant Pod Running", &hk, &log, || async {
        let phase = kubectl(
            &tk,
            &["get", "pod", "web", "-o", "jsonpath={.status.phase}"],
        )
        .await
        .ok()?;
        (phase == "Running").then_some(())
    })
    .await;
    let host_pod = Api::<Pod>::namespaced(host.clone(), HOST_NS)
        .get("web-x-default-x-dev")
        .await
        .unwrap();
    assert_eq!(host_pod.spec.unwrap().node_name.as_deref(), Some(NODE_IP));
    let logs = until("the host Pod's output", &hk, &log, || async {
        kubectl(&hk, &["-n", HOST_NS, "logs", "web-x-default-x-dev"])
            .await
            .ok()
            .filter(|l| l.contains("provisioned-hello"))
    })
    .await;
    assert_eq!(logs.trim(), "provisioned-hello");
    // The Pod's ServiceAccount token (a tenant token Secret, as 1.20 mounts it)
    // crossed as an Opaque Secret: as a host token Secret, the host's token
    // controller would delete it and the engine recreate it, over and over.
    let host_secrets = Api::<Secret>::namespaced(host.clone(), HOST_NS);
    let token_copy = host_secrets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("default-token-") && n.ends_with("-x-default-x-dev"))
        })
        .expect("the host copy of the tenant's token Secret");
    assert_eq!(token_copy.type_.as_deref(), Some("Opaque"));

    let still = host_secrets
        .get(token_copy.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        still.metadata.uid, token_copy.metadata.uid,
        "the token Secret's host copy was deleted and recreated"
    );

    // Deleting the TenantCluster removes the control plane, its PVC and namespace.
    tcs.delete("dev", &DeleteParams::default()).await.unwrap();
    until("the TenantCluster gone", &hk, &log, || async {
        matches!(tcs.get_opt("dev").await, Ok(None)).then_some(())
    })
    .await;
    assert!(
        Api::<StatefulSet>::namespaced(host.clone(), CP_NS)
            .get_opt("dev-cp")
            .await
            .map_or(true, |s| s.is_none()),
        "the StatefulSet outlived its TenantCluster"
    );
    until("the control-plane namespace gone", &hk, &log, || async {
        matches!(
            Api::<Namespace>::all(host.clone()).get_opt(CP_NS).await,
            Ok(None)
        )
        .then_some(())
    })
    .await;

    controller.kill().await.unwrap();
    drop(node);
}
