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
use tenantplane_testenv::eventually as eventually_within;
use tenantplane_testenv::{ApiServer, PooledServer, gadget_crd, http_get};

fn tenantplane(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .output()
        .expect("run tenantplane")
}

/// `tenantplane why` about a team-dev object, with further arguments.
fn why(server: &ApiServer, object: &str, more: &[&str]) -> std::process::Output {
    let kubeconfig = server.kubeconfig_path();
    let mut args = vec![
        "why",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "-n",
        "team-dev",
        object,
    ];
    args.extend_from_slice(more);
    tenantplane(&args)
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

async fn host_with_crds() -> (PooledServer, Client) {
    let server = crate::servers::host_with_crds().await;
    let client = server.client().await.unwrap();
    namespace(&client, "team-dev").await;
    (server, client)
}

#[tokio::test]
async fn why_names_the_tenant_object_and_its_decisions() {
    let (server, client) = host_with_crds().await;
    let kubeconfig = server.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();

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

    let out = why(&server, &format!("configmap/{host_name}"), &["-o", "json"]);
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
    let out = why(&server, &format!("configmap/{host_name}"), &[]);
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
        &server,
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
    let out = why(&server, "cm/theirs", &[]);
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

/// IsolationProfile `restricted`, SyncPolicy `default` with `policy_spec`, and
/// TenantCluster team-dev/dev attached to `tenant_server`.
async fn attach_dev(host: &Client, tenant_server: &ApiServer, policy_spec: serde_json::Value) {
    for object in [
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": "restricted"}, "spec": {"level": "restricted"}}),
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "default"},
               "spec": policy_spec}),
    ] {
        let kind = object["kind"].as_str().unwrap();
        let plural = if kind == "SyncPolicy" {
            "syncpolicies"
        } else {
            "isolationprofiles"
        };
        Api::<DynamicObject>::all_with(host.clone(), &tenantplane_resource(kind, plural))
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
}

fn tenantplane_resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "tenantplane.io".into(),
        version: "v1alpha1".into(),
        api_version: "tenantplane.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `tenantplane controller` against the host, serving metrics on `port`.
fn spawn_controller(host_server: &ApiServer, port: u16) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
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
        .unwrap()
}

/// Sends SIGTERM and waits (at most 20 s) for the exit.
async fn sigterm(mut child: std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    eventually_within("an exit after SIGTERM", Duration::from_secs(20), || {
        let exited = child.try_wait().unwrap();
        async move { exited }
    })
    .await
}

#[tokio::test]
async fn the_controller_command_syncs_serves_metrics_and_stops_on_sigterm() {
    let (host_server, host) = host_with_crds().await;
    let tenant_server = crate::servers::tenant().await;
    let tenant = tenant_server.client().await.unwrap();
    attach_dev(
        &host,
        &tenant_server,
        json!({"resources": [{"apiVersion": "v1", "kind": "ConfigMap"}]}),
    )
    .await;
    create_configmap(&tenant, "default", "hello").await;

    let port = free_port();
    let mut child = spawn_controller(&host_server, port);
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
    let status = sigterm(child).await;
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

/// Polls `check` for at most 30 s.
async fn eventually<T, Fut: std::future::Future<Output = Option<T>>>(
    what: &str,
    check: impl FnMut() -> Fut,
) -> T {
    eventually_within(what, Duration::from_secs(30), check).await
}

#[tokio::test]
async fn why_shows_the_conflicts_the_controller_recorded() {
    let (host_server, host) = host_with_crds().await;
    let tenant_server = crate::servers::tenant().await;
    let tenant = tenant_server.client().await.unwrap();
    host_server.install_crds(vec![gadget_crd()]).await.unwrap();
    tenant_server
        .install_crds(vec![gadget_crd()])
        .await
        .unwrap();
    let policy_spec = |conflict_policy: &str| {
        json!({"conflictPolicy": conflict_policy,
               "driftDetection": {"enabled": true, "interval": "2s"},
               "explain": {"recordDecisions": true, "retain": 200},
               "resources": [{"apiVersion": "example.com/v1", "kind": "Gadget", "direction": "bidirectional"}]})
    };
    attach_dev(&host, &tenant_server, policy_spec("manual")).await;
    let gadgets = |client: &Client, ns: &str| {
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            ns,
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "example.com",
                "v1",
                "Gadget",
            )),
        )
    };
    let tenant_gadgets = gadgets(&tenant, "default");
    let host_gadgets = gadgets(&host, "team-dev");
    tenant_gadgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                "metadata": {"name": "g1", "namespace": "default"}, "spec": {"size": 1}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut controller = spawn_controller(&host_server, free_port());
    let host_name = eventually("the Gadget's host copy with its sync base", || async {
        let list = host_gadgets.list(&Default::default()).await.ok()?;
        let copy = list.items.into_iter().next()?;
        copy.metadata
            .annotations
            .as_ref()?
            .contains_key("tenantplane.io/sync-base")
            .then(|| copy.metadata.name.clone())?
    })
    .await;
    assert!(
        controller.try_wait().unwrap().is_none(),
        "the controller exited"
    );

    // Both sides change the size while no controller runs: a conflict on restart.
    let set_size = |api: Api<DynamicObject>, name: String, size: i64| async move {
        api.patch(
            &name,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"size": size}})),
        )
        .await
        .unwrap();
    };
    let conflicting_edits = |tenant_size: i64, host_size: i64| {
        let (t, h, name) = (
            tenant_gadgets.clone(),
            host_gadgets.clone(),
            host_name.clone(),
        );
        async move {
            set_size(t, "g1".into(), tenant_size).await;
            set_size(h, name, host_size).await;
        }
    };
    assert!(sigterm(controller).await.success());
    conflicting_edits(3, 4).await;
    controller = spawn_controller(&host_server, free_port());
    let sds: Api<tenantplane_api::SyncDecision> = Api::namespaced(host.clone(), "team-dev");
    let records = |n: usize| {
        let sds = sds.clone();
        async move {
            let status = sds.get_opt("dev").await.ok()??.status?;
            let history = status.conflicts.into_iter().next()?;
            (history.records.len() >= n).then_some(history.records)
        }
    };
    eventually("the manual conflict in the SyncDecision", || records(1)).await;
    // The tenant gives way: the conflict is resolved.
    set_size(tenant_gadgets.clone(), "g1".into(), 4).await;
    eventually("the resolution in the SyncDecision", || records(2)).await;

    // Under tenant-wins the tenant's value overwrites the host's.
    Api::<DynamicObject>::all_with(
        host.clone(),
        &tenantplane_resource("SyncPolicy", "syncpolicies"),
    )
    .patch(
        "default",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"spec": {"conflictPolicy": "tenant-wins"}})),
    )
    .await
    .unwrap();
    assert!(sigterm(controller).await.success());
    conflicting_edits(7, 8).await;
    controller = spawn_controller(&host_server, free_port());
    eventually("the tenant-wins conflict in the SyncDecision", || {
        records(3)
    })
    .await;

    let out = why(
        &host_server,
        &format!("gadget/{host_name}"),
        &["-o", "json"],
    );
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown: Vec<(&str, &str)> = answer["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["resolution"].as_str().unwrap(),
                c["policy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("LeftAlone", "manual"),
            ("Resolved", "manual"),
            ("TenantWon", "tenant-wins")
        ],
        "{answer}"
    );
    let out = why(&host_server, &format!("gadget/{host_name}"), &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    assert!(
        text.contains("/spec/size is 3 in the tenant and 4 on the host: left alone (manual)"),
        "{text}"
    );
    assert!(
        text.contains("/spec/size is 7 in the tenant and 8 on the host: the tenant's value overwrites the host's"),
        "{text}"
    );
    assert!(sigterm(controller).await.success());
}
