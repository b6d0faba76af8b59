//! `deploy/samples/` exactly as a new user applies it: `kubectl apply -f` against a
//! fresh kube-apiserver with only the CRDs installed. Each file is applied on its
//! own in reverse order (so every file that refers to another comes first), then
//! the whole directory again, which must be a no-op.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/samples")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

#[tokio::test]
async fn every_sample_applies_with_kubectl_in_any_order() {
    let server = crate::servers::host_with_crds().await;
    let kubeconfig = server.kubeconfig_path();

    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    files.reverse();
    for file in &files {
        let out = kubectl(&kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The documented command, on top: everything is already there and unchanged.
    let out = kubectl(
        &kubeconfig,
        &["apply", "-f", samples_dir().to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(" created"), "{stdout}");
    assert!(
        stdout.contains("tenantcluster.tenantplane.io/dev unchanged"),
        "{stdout}"
    );

    // What the samples promise exists: the claim's namespace belongs to the pool's
    // tenant, and every kind is readable through kubectl.
    let client = server.client().await.unwrap();
    let batch = Api::<Namespace>::all(client)
        .get("team-a-batch")
        .await
        .unwrap();
    assert_eq!(
        batch.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "team-a"
    );
    for (kind, namespace, name) in [
        ("isolationprofiles.tenantplane.io", None, "restricted"),
        ("syncpolicies.tenantplane.io", None, "default"),
        ("resourcepools.tenantplane.io", None, "team-a"),
        (
            "resourcepoolclaims.tenantplane.io",
            Some("team-a-batch"),
            "batch",
        ),
        ("tenantclusters.tenantplane.io", Some("team-dev"), "dev"),
    ] {
        let mut args = vec!["get", kind, name, "-o", "name"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        let out = kubectl(&kubeconfig, &args);
        assert!(out.status.success(), "{kind} {name}: {out:?}");
    }
}
