//! The real binary wired end to end: `tenantplane webhook --namespace-tenancy
//! --admin-group platform` behind a real API server, registered with what `tenantplane
//! render webhookconfiguration --namespaces --url` prints. A user whose RBAC allows it
//! cannot claim kube-system, an admin-group member can adopt a namespace into a
//! tenant, and the cordon of that tenant reaches writes inside the namespace.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tenantplane_api::Tenant;
use tenantplane_testenv::{ApiServerOptions, TestEnv, TestUser};

const DEADLINE: Duration = Duration::from_secs(30);

fn from<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Ends the webhook process when the test ends, whatever happens.
struct Webhook(Child);

impl Drop for Webhook {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test]
async fn the_binary_serves_namespace_tenancy_with_its_admin_group() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("host");
    options.users.push(TestUser::new("mallory", &[]));
    options.users.push(TestUser::new("pat", &["platform"]));
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let admin = server.client().await.unwrap();
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "broad"}, "rules": [
                {"apiGroups": [""], "resources": ["namespaces", "configmaps"],
                 "verbs": ["get", "create", "patch"]}]})),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "broad"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "broad"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "pat"}]})),
        )
        .await
        .unwrap();
    let acme = Api::<Tenant>::all(admin.clone())
        .create(
            &pp,
            &from(
                json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "acme"},
                "spec": {"owners": [{"kind": "User", "name": "alice"}], "cordoned": true}}),
            ),
        )
        .await
        .unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &from(json!({"metadata": {"name": "team"}})))
        .await
        .unwrap();

    // The webhook process, with the admin kubeconfig and the platform group.
    let cert = env.ca().issue(&["127.0.0.1"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(path("tls.key"), &cert.key_pem).unwrap();
    std::fs::write(path("ca.crt"), env.ca().cert_pem()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["webhook", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--namespace-tenancy", "--admin-group", "platform"])
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .arg("--tls-cert")
        .arg(path("tls.crt"))
        .arg("--tls-key")
        .arg(path("tls.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the webhook");
    let stderr = child.stderr.take().unwrap();
    let _webhook = Webhook(child);
    let (lines_tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(value) = serde_json::from_str(&line)
                && lines_tx.send(value).is_err()
            {
                break;
            }
        }
    });
    let started = lines.recv_timeout(DEADLINE).expect("a first log line");
    let addr = started["fields"]["listen"].as_str().unwrap().to_owned();
    assert_eq!(
        started["fields"]["admin_groups"], "[\"platform\"]",
        "{started}"
    );

    // Registered exactly as the render command prints it.
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "render",
            "webhookconfiguration",
            "--namespaces",
            "-o",
            "json",
        ])
        .arg("--ca-bundle")
        .arg(path("ca.crt"))
        .args(["--url", &format!("https://{addr}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config: MutatingWebhookConfiguration = serde_json::from_slice(&out.stdout).unwrap();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(&pp, &config)
        .await
        .unwrap();

    // mallory's claim of kube-system is refused once the API server uses the config.
    let as_mallory: Api<Namespace> = Api::all(server.client_as("mallory").await.unwrap());
    let claim = Patch::Merge(json!({"metadata": {"labels": {"tenantplane.io/tenant": "acme"}}}));
    let message = tenantplane_testenv::eventually(
        "the webhook consulted on mallory's claim",
        DEADLINE,
        || async {
            let dry_run = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            match as_mallory.patch("kube-system", &dry_run, &claim).await {
                Err(kube::Error::Api(status))
                    if status.message.contains("namespaces.tenantplane.io") =>
                {
                    Ok(status.message)
                }
                other => Err(other.map(|_| "admitted")),
            }
        },
    )
    .await;
    assert!(message.contains("only an admin may change"), "{message}");
    let refused = refusal(
        as_mallory
            .patch("kube-system", &PatchParams::default(), &claim)
            .await,
    );
    assert!(refused.contains("only an admin may change"), "{refused}");

    // pat, in the admin group, adopts `team` into acme: owner reference and label.
    let as_pat: Client = server.client_as("pat").await.unwrap();
    let adopted = Api::<Namespace>::all(as_pat.clone())
        .patch(
            "team",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [{
                "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "name": "acme", "uid": acme.metadata.uid}]}})),
        )
        .await
        .expect("an admin adopts a namespace");
    assert_eq!(
        adopted.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "acme"
    );

    // acme is cordoned: mallory's write inside `team` is refused, pat's is not.
    let configmap: ConfigMap = from(json!({"metadata": {"name": "settings"}}));
    let refused = refusal(
        Api::<ConfigMap>::namespaced(server.client_as("mallory").await.unwrap(), "team")
            .create(&pp, &configmap)
            .await,
    );
    assert!(refused.contains("Tenant acme is cordoned"), "{refused}");
    Api::<ConfigMap>::namespaced(as_pat, "team")
        .create(&pp, &configmap)
        .await
        .expect("an admin writes in a cordoned tenant");
}
