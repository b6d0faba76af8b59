//! `tenantplane connect` against real host and tenant API servers: the printed
//! kubeconfig drives kubectl against the tenant, merging keeps the host context and
//! is idempotent, the provisioned Secret is found by name, and no credential ever
//! reaches stdout or stderr outside `--print`.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DynamicObject, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run tenantplane")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
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

async fn kubeconfig_secret(client: &Client, name: &str, key: &str, kubeconfig: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([(key.to_owned(), ByteString(kubeconfig.as_bytes().to_vec()))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "team-dev")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn tenant_cluster(client: &Client, name: &str, control_plane: Value) {
    let tc = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        "metadata": {"name": name, "namespace": "team-dev"},
        "spec": {"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"},
                 "controlPlane": control_plane}});
    let object: DynamicObject = serde_json::from_value(tc).unwrap();
    Api::<tenantplane_api::TenantCluster>::namespaced(client.clone(), "team-dev")
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap(),
        )
        .await
        .unwrap();
}

/// The admin token of a testenv kubeconfig: what must never be printed outside --print.
fn token(kubeconfig: &str) -> String {
    let config: Value = serde_saphyr::from_str(kubeconfig).unwrap();
    config["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn connect_prints_and_merges_a_working_tenant_context() {
    let host_server = crate::servers::host_with_crds().await;
    let tenant_server = crate::servers::tenant().await;
    let host = host_server.client().await.unwrap();
    namespace(&host, "team-dev").await;
    namespace(&tenant_server.client().await.unwrap(), "only-in-tenant").await;
    let tenant_kubeconfig = tenant_server.kubeconfig_yaml("admin").unwrap();
    let tenant_token = token(&tenant_kubeconfig);
    kubeconfig_secret(&host, "dev-external", "config", &tenant_kubeconfig).await;
    tenant_cluster(
        &host,
        "dev",
        json!({"external": {"kubeconfigSecretRef": {"name": "dev-external", "key": "config"}}}),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let host_kubeconfig = dir.path().join("config");
    std::fs::copy(host_server.kubeconfig_path(), &host_kubeconfig).unwrap();
    let host_path = host_kubeconfig.to_str().unwrap();

    // --print: a kubeconfig kubectl uses as is, with one context named "dev".
    let out = tenantplane(&[
        "connect",
        "-n",
        "team-dev",
        "dev",
        "--print",
        "--kubeconfig",
        host_path,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let printed = dir.path().join("tenant");
    std::fs::write(&printed, &out.stdout).unwrap();
    let get = kubectl(&printed, &["get", "ns", "only-in-tenant", "-o", "name"]);
    assert!(get.status.success(), "{get:?}");
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "namespace/only-in-tenant"
    );
    let context = kubectl(&printed, &["config", "current-context"]);
    assert_eq!(String::from_utf8_lossy(&context.stdout).trim(), "dev");

    // Merge: the host context stays usable, "dev" becomes current, twice is once
    // (the second time "dev" is current, so the host is named with --context).
    for _ in 0..2 {
        let out = tenantplane(&[
            "connect",
            "-n",
            "team-dev",
            "dev",
            "--kubeconfig",
            host_path,
            "--context",
            "host",
        ]);
        assert!(out.status.success(), "{out:?}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("Switched to context \"dev\""), "{said}");
        assert!(
            !said.contains(&tenant_token),
            "connect printed a credential"
        );
    }
    let merged: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&host_kubeconfig).unwrap()).unwrap();
    assert_eq!(merged["contexts"].as_array().unwrap().len(), 2, "{merged}");
    assert_eq!(merged["current-context"], "dev");
    let get = kubectl(
        &host_kubeconfig,
        &["get", "ns", "only-in-tenant", "-o", "name"],
    );
    assert!(get.status.success(), "{get:?}");
    let get = kubectl(
        &host_kubeconfig,
        &["--context", "host", "get", "ns", "team-dev", "-o", "name"],
    );
    assert!(get.status.success(), "{get:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&host_kubeconfig)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o077,
        0,
        "merged kubeconfig is readable by others: {mode:o}"
    );

    // A provisioned control plane: the `<name>-kubeconfig` Secret, key kubeconfig.
    kubeconfig_secret(&host, "prov-kubeconfig", "kubeconfig", &tenant_kubeconfig).await;
    tenant_cluster(&host, "prov", json!({})).await;
    let host_only = host_server.kubeconfig_path();
    let out = tenantplane(&[
        "connect",
        "-n",
        "team-dev",
        "prov",
        "--print",
        "--kubeconfig",
        host_only.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let single: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(single["current-context"], "prov");

    // Not there yet / not a kubeconfig: one line naming the Secret, no content.
    tenant_cluster(&host, "pending", json!({})).await;
    let out = tenantplane(&[
        "connect",
        "-n",
        "team-dev",
        "pending",
        "--print",
        "--kubeconfig",
        host_only.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("team-dev/pending-kubeconfig not found"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    kubeconfig_secret(
        &host,
        "junk-kubeconfig",
        "kubeconfig",
        &format!("- {tenant_token}\n"),
    )
    .await;
    tenant_cluster(&host, "junk", json!({})).await;
    let out = tenantplane(&[
        "connect",
        "-n",
        "team-dev",
        "junk",
        "--print",
        "--kubeconfig",
        host_only.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not hold a kubeconfig"), "{err}");
    assert!(!err.contains(&tenant_token), "{err}");
    let out = tenantplane(&[
        "connect",
        "-n",
        "team-dev",
        "absent",
        "--print",
        "--kubeconfig",
        host_only.to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TenantCluster team-dev/absent not found"),
        "{out:?}"
    );
}
