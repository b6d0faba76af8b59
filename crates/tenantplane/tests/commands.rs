//! `tenantplane why` and `tenantplane controller` as real processes against a real
//! API server.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DynamicObject, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::transform::{TenantTarget, to_host};
use tenantplane_testenv::{ApiServer, TestEnv};

fn tenantplane(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .output()
        .expect("run tenantplane")
}

async fn namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn create_configmap(client: &Client, namespace: &str, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

async fn host_with_crds(env: &TestEnv) -> (ApiServer, Client) {
    let server = env.start_apiserver("host").await.unwrap();
    server.install_crds(tenantplane_api::crds()).await.unwrap();
    let client = server.client().await.unwrap();
    namespace(&client, "team-dev").await;
    (server, client)
}

#[tokio::test]
async fn why_names_the_tenant_object_and_its_decisions() {
    let env = TestEnv::start().await.unwrap();
    let (server, client) = host_with_crds(&env).await;
    let kubeconfig = server.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();
    // `why` about a team-dev object, with further arguments.
    let why = |object: &str, more: &[&str]| {
        let mut args = vec!["why", "--kubeconfig", kubeconfig, "-n", "team-dev", object];
        args.extend_from_slice(more);
        tenantplane(&args)
    };

    // A host copy exactly as the engine makes it, and a decision about it.
    let target = TenantTarget::new("dev", "team-dev").unwrap();
    let tenant_object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "shop", "uid": "tenant-uid-7"}, "data": {"k": "v"}});
    let (placement, host_object) = to_host(
        &target,
        &GroupKind::new("", "ConfigMap"),
        Scope::Namespaced,
        &tenant_object,
    )
    .unwrap();
    let cms: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "team-dev",
        &kube::api::ApiResource::erase::<ConfigMap>(&()),
    );
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(host_object).unwrap(),
    )
    .await
    .unwrap();
    let host_name = placement.host_name.name.clone();
    let sd = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncDecision",
        "metadata": {"name": "dev", "namespace": "team-dev"}, "spec": {"tenantCluster": "dev"}});
    let sds: Api<tenantplane_api::SyncDecision> = Api::namespaced(client.clone(), "team-dev");
    sds.create(&PostParams::default(), &serde_json::from_value(sd).unwrap())
        .await
        .unwrap();
    let decision = |name: &str, reason: &str| {
        json!({"action": "Create", "apiVersion": "v1", "kind": "ConfigMap",
        "tenant": {"namespace": "shop", "name": "x"}, "host": {"namespace": "team-dev", "name": name},
        "reason": reason, "time": "2026-11-30T10:00:00Z"})
    };
    // Its conflict history as the engine keeps it, and another object's.
    let history = |name: &str, records: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "tenant": {"namespace": "shop", "name": "web"}, "host": {"namespace": "team-dev", "name": name},
        "records": records})
    };
    let conflict = |time: &str, policy: &str, resolution: &str, detail: &str| {
        json!({"time": time, "fields": ["/data/k"], "policy": policy,
        "resolution": resolution, "detail": detail})
    };
    let conflicts = json!([
        history(
            &host_name,
            json!([
                conflict(
                    "2026-11-30T10:01:00Z",
                    "manual",
                    "LeftAlone",
                    "/data/k is \"a\" in the tenant and \"b\" on the host: left alone (manual)"
                ),
                conflict(
                    "2026-11-30T10:02:00Z",
                    "manual",
                    "Resolved",
                    "the tenant and the host agree again"
                ),
                conflict(
                    "2026-11-30T10:03:00Z",
                    "tenant-wins",
                    "TenantWon",
                    "/data/k is \"c\" in the tenant and \"d\" on the host: the tenant's value overwrites the host's"
                ),
            ])
        ),
        history(
            "other",
            json!([conflict(
                "2026-11-30T10:04:00Z",
                "host-wins",
                "HostWon",
                "unrelated"
            )])
        ),
    ]);
    let status = json!({"status": {"decisions": [decision(&host_name, "created because the tenant made it"), decision("other", "unrelated")], "retained": 2, "total": 2, "conflicts": conflicts}});
    sds.patch_status(
        "dev",
        &Default::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();

    let out = why(&format!("configmap/{host_name}"), &["-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["managedByTenantplane"], true);
    assert_eq!(answer["tenantObject"]["tenantCluster"], "team-dev/dev");
    assert_eq!(answer["tenantObject"]["namespace"], "shop");
    assert_eq!(answer["tenantObject"]["name"], "web");
    assert_eq!(answer["tenantObject"]["uid"], "tenant-uid-7");
    let decisions = answer["decisions"].as_array().unwrap();
    assert_eq!(
        decisions.len(),
        1,
        "only decisions about this object: {decisions:?}"
    );
    assert_eq!(decisions[0]["reason"], "created because the tenant made it");
    let conflicts = answer["conflicts"].as_array().unwrap();
    let resolutions: Vec<&str> = conflicts
        .iter()
        .map(|c| c["resolution"].as_str().unwrap())
        .collect();
    assert_eq!(
        resolutions,
        ["LeftAlone", "Resolved", "TenantWon"],
        "this object's conflicts, newest last: {conflicts:?}"
    );
    assert_eq!(conflicts[2]["policy"], "tenant-wins");
    assert_eq!(conflicts[2]["fields"], json!(["/data/k"]));
    assert_eq!(conflicts[2]["time"], "2026-11-30T10:03:00Z");
    // The default (YAML) answer shows them too.
    let out = why(&format!("configmap/{host_name}"), &[]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    assert!(text.contains("conflicts:"), "{text}");
    assert!(text.contains("resolution: TenantWon"), "{text}");
    assert!(
        text.contains("the tenant's value overwrites the host's"),
        "{text}"
    );
    assert!(
        !text.contains("HostWon"),
        "another object's conflict: {text}"
    );

    // A host Service shows the selector it actually has on the host.
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    let (placement, host_service) = to_host(
        &target,
        &GroupKind::new("", "Service"),
        Scope::Namespaced,
        &service,
    )
    .unwrap();
    let services: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "team-dev",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    );
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(host_service).unwrap(),
        )
        .await
        .unwrap();
    let out = why(
        &format!("svc/{}", placement.host_name.name),
        &["-o", "json"],
    );
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer["selectors"]["spec.selector"],
        json!({"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "shop"})
    );

    // A foreign object gets a plain answer, not an error (asked by short name).
    create_configmap(&client, "team-dev", "theirs").await;
    let out = why("cm/theirs", &[]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("managedByTenantplane: false"), "{text}");
    assert!(text.contains("not managed by tenantplane"), "{text}");

    // A missing object or a bad argument is one error line.
    for args in [
        vec!["configmap/absent"],
        vec!["no-slash"],
        vec!["frobnicators/x"],
    ] {
        let mut full = vec!["why", "--kubeconfig", kubeconfig, "-n", "team-dev"];
        full.extend(args);
        let out = tenantplane(&full);
        assert!(!out.status.success(), "{full:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr)
                .trim_end()
                .lines()
                .count(),
            1,
            "{out:?}"
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    ))
}

#[tokio::test]
async fn the_controller_command_syncs_serves_metrics_and_stops_on_sigterm() {
    let env = TestEnv::start().await.unwrap();
    let (host_server, host) = host_with_crds(&env).await;
    let tenant_server = env.start_apiserver("tenant").await.unwrap();
    let tenant = tenant_server.client().await.unwrap();
    for object in [
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": "restricted"}, "spec": {"level": "restricted"}}),
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "default"},
               "spec": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
    ] {
        let kind = object["kind"].as_str().unwrap();
        let plural = if kind == "SyncPolicy" {
            "syncpolicies"
        } else {
            "isolationprofiles"
        };
        let resource = kube::api::ApiResource {
            group: "tenantplane.io".into(),
            version: "v1alpha1".into(),
            api_version: "tenantplane.io/v1alpha1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        Api::<DynamicObject>::all_with(host.clone(), &resource)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .unwrap();
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("dev-kubeconfig".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "kubeconfig".to_owned(),
                ByteString(tenant_server.kubeconfig_yaml("admin").unwrap().into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(host.clone(), "team-dev")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let tc = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster", "metadata": {"name": "dev", "namespace": "team-dev"},
        "spec": {"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"},
                 "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "dev-kubeconfig"}}}}});
    Api::<tenantplane_api::TenantCluster>::namespaced(host.clone(), "team-dev")
        .create(&PostParams::default(), &serde_json::from_value(tc).unwrap())
        .await
        .unwrap();
    create_configmap(&tenant, "default", "hello").await;

    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "controller",
            "--kubeconfig",
            host_server.kubeconfig_path().to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--host-unreachable-release-secs",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), "team-dev");
    loop {
        if host_cms
            .get_opt("hello-x-default-x-dev")
            .await
            .unwrap()
            .is_some()
        {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the controller exited");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not synced by the controller process"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        http_get(port, "/healthz").await.unwrap(),
        (200, "ok".into())
    );
    assert_eq!(http_get(port, "/readyz").await.unwrap().0, 200);
    let (code, metrics) = http_get(port, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    for family in [
        "tenantplane_decisions_total{action=\"Create\"} 1",
        "tenantplane_host_writes_total{verb=\"create\"}",
        "tenantplane_reconciles_total",
        "tenantplane_sync_latency_seconds_bucket",
        "tenantplane_queue_depth",
        "tenantplane_sync_errors_total",
    ] {
        assert!(
            metrics.contains(family),
            "{family} missing from /metrics:\n{metrics}"
        );
    }

    // SIGTERM: a clean, prompt exit.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn up_starts_a_playground_and_prints_the_first_decision() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["up", "--exit-when-synced"])
        .output()
        .expect("run tenantplane up");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("host   kubeconfig: "), "{stdout}");
    assert!(stdout.contains("tenant kubeconfig: "), "{stdout}");
    assert!(
        stdout.contains("kubelet endpoint:  https://127.0.0.1:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Create ConfigMap default/welcome -> team-dev/welcome-x-default-x-dev"),
        "{stdout}"
    );
}

#[test]
fn up_with_a_real_node_runs_it_and_restores_the_machine_on_exit() {
    if let Some(reason) = tenantplane_testenv::RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["up", "--real-node", "--exit-when-synced"])
        .output()
        .expect("run tenantplane up --real-node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("real node 10.99.0.1"), "{stdout}");
    assert!(stdout.contains("--image=local/tenantplane:dev"), "{stdout}");
    assert!(
        stdout.contains("Create ConfigMap default/welcome -> team-dev/welcome-x-default-x-dev"),
        "{stdout}"
    );
    // Everything it changed is back: no bridge, no node directory, no kubepods cgroups.
    assert!(!std::path::Path::new("/sys/class/net/rn0").exists());
    assert!(!std::path::Path::new("/sys/class/net/rncni0").exists());
    assert!(!std::path::Path::new(tenantplane_testenv::node::NODE_DIR).exists());
    assert!(!std::path::Path::new("/sys/fs/cgroup/memory/kubepods").exists());
}
