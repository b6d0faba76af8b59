//! The kustomize layout exactly as the README's install section uses it: the base
//! (deploy/install) and both overlays render with `kubectl kustomize`, and a real
//! kube-apiserver accepts the result with `kubectl apply --dry-run=server`. The
//! self-signed overlay is first filled by `tenantplane render webhook-certificate`,
//! in a copy of deploy/ so the test never writes into the source tree.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().expect("runs")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Schemaless stand-ins for cert-manager's kinds (as in install.rs): the server
/// checks their apiVersion, kind, scope and namespace.
fn cert_manager_stand_in(kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.cert-manager.io")},
        "spec": {
            "group": "cert-manager.io", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

#[tokio::test]
async fn base_and_overlays_render_with_kustomize_and_the_server_accepts_them() {
    let server = crate::servers::host().await;
    let mut crds = tenantplane_api::crds();
    crds.push(cert_manager_stand_in("Issuer", "issuers"));
    crds.push(cert_manager_stand_in("Certificate", "certificates"));
    server.install_crds(crds).await.expect("CRDs");
    let kubeconfig = server.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();
    // A server-side dry run creates nothing, not even the Namespace the rest lives in.
    ok(run(
        "kubectl",
        &[
            "--kubeconfig",
            kubeconfig,
            "create",
            "namespace",
            "tenantplane-system",
        ],
    ));

    // deploy/ as a user has it, the self-signed overlay filled as documented.
    let copy = tempfile::tempdir().unwrap();
    copy_dir(&deploy(), &copy.path().join("deploy"));
    let self_signed = copy.path().join("deploy/overlays/self-signed");
    let said = ok(run(
        env!("CARGO_BIN_EXE_tenantplane"),
        &[
            "render",
            "webhook-certificate",
            "--out-dir",
            self_signed.to_str().unwrap(),
        ],
    ));
    assert!(!said.contains("PRIVATE KEY"), "{said}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(self_signed.join("webhook-tls.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the private key is readable by others");

    let mut rendered = Vec::new();
    for dir in [
        "install",
        "overlays/cert-manager",
        "overlays/self-signed",
        "overlays/sharded",
    ] {
        let path = copy.path().join("deploy").join(dir);
        let yaml = ok(run("kubectl", &["kustomize", path.to_str().unwrap()]));
        let file = copy.path().join(format!("{}.yaml", dir.replace('/', "-")));
        std::fs::write(&file, &yaml).unwrap();
        let out = ok(run(
            "kubectl",
            &[
                "--kubeconfig",
                kubeconfig,
                "apply",
                "--dry-run=server",
                "-f",
                file.to_str().unwrap(),
            ],
        ));
        assert!(out.contains("(server dry run)"), "{dir}: {out}");
        rendered.push((dir, documents(&yaml)));
    }

    let [(_, base), (_, cert_manager), (_, self_signed), (_, sharded)] = &rendered[..] else {
        unreachable!()
    };
    // Sharded: cert-manager's objects, with three controller replicas dividing
    // the TenantClusters into twelve shards.
    assert_eq!(sharded.len(), cert_manager.len());
    let controller = of_kind(sharded, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "tenantplane-controller")
        .unwrap();
    assert_eq!(controller["spec"]["replicas"], 3);
    let args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(args.iter().any(|a| a == "--shards=12"), "{args:?}");
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    // The base has no certificate source; each overlay adds exactly one.
    for kind in ["Issuer", "Certificate", "Secret"] {
        assert!(of_kind(base, kind).is_empty(), "base has a {kind}");
    }
    assert_eq!(of_kind(cert_manager, "Certificate").len(), 1);
    assert!(of_kind(cert_manager, "Secret").is_empty());
    let secrets = of_kind(self_signed, "Secret");
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0]["metadata"]["name"], "tenantplane-webhook-tls");
    assert_eq!(secrets[0]["type"], "kubernetes.io/tls");
    assert!(of_kind(self_signed, "Certificate").is_empty());
    // Both overlays keep every other object of the base.
    for overlay in [cert_manager, self_signed] {
        assert_eq!(
            overlay.len(),
            base.len() + if overlay == cert_manager { 2 } else { 1 }
        );
    }

    // cert-manager: cainjector fills the caBundle. Self-signed: every webhook of
    // both configurations carries the CA that signed the Secret's certificate, and
    // nothing asks cainjector to overwrite it.
    let ca = secrets[0]["stringData"]["ca.crt"].as_str().unwrap();
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let managed = of_kind(cert_manager, kind)[0];
        assert_eq!(
            managed["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "tenantplane-system/tenantplane-webhook"
        );
        let config = of_kind(self_signed, kind)[0];
        assert!(
            config["metadata"]["annotations"]
                .get("cert-manager.io/inject-ca-from")
                .is_none(),
            "{config}"
        );
        let webhooks = config["webhooks"].as_array().unwrap();
        assert_eq!(
            webhooks.len(),
            managed["webhooks"].as_array().unwrap().len()
        );
        for webhook in webhooks {
            // ByteString is base64 on the wire, as caBundle is.
            let pem: k8s_openapi::ByteString =
                serde_json::from_value(webhook["clientConfig"]["caBundle"].clone()).unwrap();
            assert_eq!(String::from_utf8(pem.0).unwrap(), ca, "{}", webhook["name"]);
            // The patch only added the CA: the rest of the webhook is the base's.
            assert_eq!(
                webhook["clientConfig"]["service"]["name"],
                "tenantplane-webhook"
            );
            assert!(webhook["rules"].is_array(), "{webhook}");
        }
    }
}
