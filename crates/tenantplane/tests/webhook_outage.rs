//! A namespace webhook outage does not stop the cluster, and does not open it.
//!
//! The real binaries: `tenantplane webhook --namespace-tenancy` behind a real API
//! server, registered exactly as `tenantplane render webhookconfiguration
//! --namespaces --url` prints it, `tenantplane controller` (whose provisioner
//! guard grants owners namespace creation only while the webhook answers) and
//! kube-controller-manager's namespace controller. The webhook is stopped: admins
//! create, label and delete plain namespaces and the deletion finishes, while an
//! owner's creation, a hijack in either direction (label added, label stripped)
//! and even an admin's edit of a tenant namespace are refused. It is restarted on
//! the same address: owners create again.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tenantplane_api::Tenant;
use tenantplane_testenv::{ApiServerOptions, TestEnv, TestUser};

const DEADLINE: Duration = Duration::from_secs(60);

fn from<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Ends a process when the test ends, whatever happens.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts `tenantplane webhook --namespace-tenancy` on `listen` and returns it
/// with the address it serves once it logs that it listens.
fn start_webhook(
    kubeconfig: &std::path::Path,
    tls: &std::path::Path,
    listen: &str,
) -> (Process, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["webhook", "--listen", listen, "--log-format", "json"])
        .arg("--namespace-tenancy")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--tls-cert")
        .arg(tls.join("tls.crt"))
        .arg("--tls-key")
        .arg(tls.join("tls.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the webhook");
    let stderr = child.stderr.take().unwrap();
    let process = Process(child);
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && value["fields"]["listen"].is_string()
            {
                tx.send(value).ok();
            }
        }
    });
    let started = rx.recv_timeout(DEADLINE).expect("the webhook listens");
    let addr = started["fields"]["listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (process, addr)
}

async fn can_create_namespaces(admin: &Client, user: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                resource: Some("namespaces".into()),
                verb: Some("create".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

/// Polls until `user`'s right to create namespaces is `expected`.
async fn until_can_create(admin: &Client, user: &str, expected: bool) {
    tenantplane_testenv::eventually(
        &format!("{user} may create namespaces: {expected}"),
        DEADLINE,
        || async { (can_create_namespaces(admin, user).await == expected).then_some(()) },
    )
    .await;
}

fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("not refused: {other:?}"),
    }
}

fn namespace(name: &str) -> Namespace {
    from(json!({"metadata": {"name": name}}))
}

#[tokio::test]
async fn a_webhook_outage_lets_admins_through_and_keeps_tenancy_closed() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("host");
    options.users.push(TestUser::new("alice", &[]));
    options.users.push(TestUser::new("mallory", &[]));
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let admin = server.client().await.unwrap();
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");
    let _namespace_controller = env.start_controller_manager(&server).unwrap();
    let pp = PostParams::default();
    // mallory may edit namespaces (RBAC allows it); only the webhook stands between
    // her and a hijack.
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "namespace-editor"}, "rules": [
                {"apiGroups": [""], "resources": ["namespaces"],
                 "verbs": ["get", "list", "update", "patch"]}]})),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "namespace-editor"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "namespace-editor"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]})),
        )
        .await
        .unwrap();
    // As deploy/install ships it; the binding is the controller's to create.
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &pp,
            &from(
                json!({"metadata": {"name": "tenantplane-namespace-provisioner"}, "rules": [
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}]}),
            ),
        )
        .await
        .unwrap();
    Api::<Tenant>::all(admin.clone())
        .create(
            &pp,
            &from(
                json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "acme"},
                "spec": {"owners": [{"kind": "User", "name": "alice"}]}}),
            ),
        )
        .await
        .unwrap();

    // The webhook, registered as rendered.
    let cert = env.ca().issue(&["127.0.0.1"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).unwrap();
    std::fs::write(dir.path().join("ca.crt"), env.ca().cert_pem()).unwrap();
    let kubeconfig = server.kubeconfig_path();
    let (webhook, addr) = start_webhook(&kubeconfig, dir.path(), "127.0.0.1:0");
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "render",
            "webhookconfiguration",
            "--namespaces",
            "-o",
            "json",
        ])
        .arg("--ca-bundle")
        .arg(dir.path().join("ca.crt"))
        .args(["--url", &format!("https://{addr}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config: MutatingWebhookConfiguration = serde_json::from_slice(&out.stdout).unwrap();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(&pp, &config)
        .await
        .unwrap();

    // The controller, probing every second.
    let controller_log = std::fs::File::create(dir.path().join("controller.log")).unwrap();
    let _controller = Process(
        Command::new(env!("CARGO_BIN_EXE_tenantplane"))
            .args([
                "controller",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .args(["--provisioner-probe-secs", "1"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(controller_log)
            .spawn()
            .expect("start the controller"),
    );

    // Up: alice gets the grant and her new namespace joins acme.
    until_can_create(&admin, "alice", true).await;
    let as_alice: Api<Namespace> = Api::all(server.client_as("alice").await.unwrap());
    let joined = as_alice
        .create(&pp, &namespace("acme-one"))
        .await
        .expect("an owner creates a namespace while the webhook answers");
    assert_eq!(
        joined.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "acme",
        "the webhook joined it to acme"
    );

    // Down.
    drop(webhook);
    until_can_create(&admin, "alice", false).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());

    // An admin creates, labels and deletes a plain namespace; the namespace
    // controller's finalize goes through and the namespace is gone.
    namespaces
        .create(&pp, &namespace("plain"))
        .await
        .expect("an admin creates a plain namespace while the webhook is down");
    namespaces
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
        )
        .await
        .expect("an admin labels a plain namespace while the webhook is down");
    namespaces
        .patch(
            "kube-system",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"audited": "yes"}}})),
        )
        .await
        .expect("an admin labels kube-system while the webhook is down");
    namespaces
        .delete("plain", &DeleteParams::default())
        .await
        .expect("an admin deletes a plain namespace while the webhook is down");
    tenantplane_testenv::eventually(
        "the namespace controller to finish deleting `plain`",
        DEADLINE,
        || async {
            namespaces
                .get_opt("plain")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;

    // alice's creation is refused by RBAC.
    let refused = refusal(as_alice.create(&pp, &namespace("acme-two")).await);
    assert_eq!(refused.code, 403, "{refused:?}");

    // Hijacks in both directions fail closed: the tenant label added to kube-system
    // (only the new object has it) and stripped from acme-one (only the old one has).
    let as_mallory: Api<Namespace> = Api::all(server.client_as("mallory").await.unwrap());
    for (namespace, patch) in [
        (
            "kube-system",
            json!({"metadata": {"labels": {"tenantplane.io/tenant": "acme"}}}),
        ),
        (
            "acme-one",
            json!({"metadata": {"labels": {"tenantplane.io/tenant": null}}}),
        ),
    ] {
        let refused = refusal(
            as_mallory
                .patch(namespace, &PatchParams::default(), &Patch::Merge(patch))
                .await,
        );
        assert!(
            refused
                .message
                .contains("failed calling webhook \"tenant-namespaces.tenantplane.io\""),
            "{namespace}: {refused:?}"
        );
    }
    // Even an admin's edit of a tenant namespace waits for the webhook.
    let refused = refusal(
        namespaces
            .patch(
                "acme-one",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
            )
            .await,
    );
    assert!(
        refused
            .message
            .contains("failed calling webhook \"tenant-namespaces.tenantplane.io\""),
        "{refused:?}"
    );
    let kube_system = namespaces.get("kube-system").await.unwrap();
    assert!(
        !kube_system
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("tenantplane.io/tenant")
    );

    // Back on the same address: alice may create again, and her namespace joins acme.
    let (_webhook, _) = start_webhook(&kubeconfig, dir.path(), &addr.to_string());
    until_can_create(&admin, "alice", true).await;
    let joined = as_alice
        .create(&pp, &namespace("acme-two"))
        .await
        .expect("an owner creates a namespace once the webhook answers again");
    assert_eq!(
        joined.metadata.labels.unwrap()["tenantplane.io/tenant"],
        "acme"
    );
}
