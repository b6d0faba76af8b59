//! `tenantplane status` against a real API server: TenantClusters with their status
//! and SyncDecision, Tenants with theirs, as a table and as JSON.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .output()
        .expect("run tenantplane")
}

/// Creates a tenantplane.io object, then sets its status.
async fn create_with_status(client: &Client, object: Value, plural: &str, status: Value) {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    let kind = object.types.clone().unwrap().kind;
    let resource = ApiResource {
        group: "tenantplane.io".into(),
        version: "v1alpha1".into(),
        api_version: "tenantplane.io/v1alpha1".into(),
        kind,
        plural: plural.into(),
    };
    let name = object.metadata.name.clone().unwrap();
    let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object).await.unwrap();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn ago(minutes: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let t = k8s_openapi::jiff::Timestamp::from_second(now - minutes * 60).unwrap();
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[tokio::test]
async fn status_shows_tenant_clusters_and_tenants_as_table_and_json() {
    let server = crate::servers::host_with_crds().await;
    let client = server.client().await.unwrap();
    for ns in ["team-dev", "team-ops"] {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let spec = json!({"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"}});
    let ready = |status: &str| {
        json!([{"type": "Ready", "status": status, "reason": "Test", "message": "",
                "lastTransitionTime": "2026-11-30T10:00:00Z"}])
    };
    create_with_status(
        &client,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": "dev", "namespace": "team-dev"}, "spec": spec}),
        "tenantclusters",
        json!({"phase": "Ready", "conditions": ready("True"),
               "syncedResources": [{"apiVersion": "v1", "kind": "ConfigMap"}, {"apiVersion": "v1", "kind": "Pod"}]}),
    )
    .await;
    // A TenantCluster the controller has not touched: no status, no decisions.
    create_with_status(
        &client,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": "fresh", "namespace": "team-ops"}, "spec": spec}),
        "tenantclusters",
        json!({}),
    )
    .await;
    let decision = |action: &str, name: &str, minutes: i64| {
        json!({"action": action, "apiVersion": "v1", "kind": "ConfigMap",
               "tenant": {"namespace": "shop", "name": name}, "host": {"namespace": "team-dev", "name": name},
               "reason": format!("{action} {name}"), "time": ago(minutes)})
    };
    create_with_status(
        &client,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncDecision",
               "metadata": {"name": "dev", "namespace": "team-dev"}, "spec": {"tenantCluster": "dev"}}),
        "syncdecisions",
        json!({"decisions": [decision("Skip", "old-skip", 120), decision("Skip", "new-skip", 10),
                             decision("Create", "latest", 1), decision("Update", "mid", 5)],
               "retained": 4, "total": 9}),
    )
    .await;
    create_with_status(
        &client,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
               "metadata": {"name": "acme"}, "spec": {"owners": [{"kind": "User", "name": "alice"}]}}),
        "tenants",
        json!({"state": "Active", "size": 2, "conditions": ready("False")}),
    )
    .await;

    let kubeconfig = server.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = tenantplane(&["status", "--kubeconfig", kubeconfig, "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tcs = report["tenantClusters"].as_array().unwrap();
    assert_eq!(tcs.len(), 2, "{report:#}");
    let dev = &tcs[0];
    assert_eq!(dev["name"], "dev");
    assert_eq!(dev["phase"], "Ready");
    assert_eq!(dev["ready"], "True");
    assert_eq!(dev["syncedKinds"], json!(["v1/ConfigMap", "v1/Pod"]));
    assert_eq!(dev["lastDecision"]["action"], "Create");
    assert_eq!(dev["lastDecision"]["tenantObject"], "shop/latest");
    assert_eq!(
        dev["errorsLastHour"], 1,
        "the 2h-old Skip is outside the hour"
    );
    assert_eq!(
        dev["decisionsByAction"],
        json!({"Create": 1, "Skip": 2, "Update": 1})
    );
    let fresh = &tcs[1];
    assert_eq!(
        (&fresh["namespace"], &fresh["phase"], &fresh["ready"]),
        (&json!("team-ops"), &json!("Pending"), &json!("Unknown"))
    );
    assert!(fresh.get("lastDecision").is_none());
    assert_eq!(fresh["errorsLastHour"], 0);
    assert_eq!(
        report["tenants"],
        json!([{"name": "acme", "state": "Active", "size": 2, "ready": "False"}])
    );

    // -n narrows the TenantClusters; Tenants are cluster-scoped and stay.
    let out = tenantplane(&[
        "status",
        "--kubeconfig",
        kubeconfig,
        "-n",
        "team-ops",
        "-o",
        "json",
    ]);
    let narrowed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(narrowed["tenantClusters"].as_array().unwrap().len(), 1);
    assert_eq!(narrowed["tenantClusters"][0]["name"], "fresh");
    assert_eq!(narrowed["tenants"].as_array().unwrap().len(), 1);

    // The table: one header and one line per object, values in their columns.
    let out = tenantplane(&["status", "--kubeconfig", kubeconfig]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE"), "{table}");
    let dev_line: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &dev_line[..5],
        ["team-dev", "dev", "Ready", "True", "ConfigMap,Pod"],
        "{table}"
    );
    assert_eq!(dev_line.last(), Some(&"1"), "{table}");
    assert!(lines[1].contains("Create ConfigMap shop/latest"), "{table}");
    assert!(lines.iter().any(|l| l.starts_with("TENANT")), "{table}");
    let acme: Vec<&str> = lines.last().unwrap().split_whitespace().collect();
    assert_eq!(acme, ["acme", "Active", "2", "False"], "{table}");
}
