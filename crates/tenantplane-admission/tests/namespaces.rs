//! Namespace tenancy admission behind a real kube-apiserver: a Tenant owner's new
//! namespaces join the tenant (owner reference and label), a forced prefix is
//! enforced, and the namespace quota holds under parallel creations.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tenantplane_admission::{
    WebhookClient, namespace_webhook_configuration, router_with_client, serve_router, tls_config,
};
use tenantplane_api::Tenant;
use tenantplane_testenv::{ApiServerOptions, TestEnv, TestUser};

const DEADLINE: Duration = Duration::from_secs(30);
const DENIED_BY: &str = "admission webhook \"namespaces.tenantplane.io\" denied the request";
const PREFIX_MESSAGE: &str = "namespace \"web\" must start with \"acme-\"";
const QUOTA_MESSAGE: &str = "Tenant acme may have at most 21 namespaces";

fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

async fn create(client: &Client, name: &str) -> Result<Namespace, kube::Error> {
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace(name))
        .await
}

fn api_status(result: Result<Namespace, kube::Error>, what: &str) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("{what} was not refused: {other:?}"),
    }
}

/// The namespaces holding a slot of `tenant`: recorded members and reservations.
fn reserved(tenant: &Tenant) -> Vec<String> {
    let mut slots: Vec<String> = tenant
        .status
        .as_ref()
        .map(|s| {
            s.namespaces
                .iter()
                .map(|n| n.name.clone())
                .chain(s.reservations.iter().map(|r| r.namespace.clone()))
                .collect()
        })
        .unwrap_or_default();
    slots.sort();
    slots.dedup();
    slots
}

#[tokio::test]
async fn tenant_owners_namespaces_join_their_tenant_within_a_race_free_quota() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("host");
    options.users.push(TestUser::new("alice", &["devs"]));
    options.users.push(TestUser::new("bob", &["others"]));
    options.users.push(TestUser::new("carol", &[]));
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let admin = server.client().await.expect("admin client");
    let alice = server.client_as("alice").await.expect("alice's client");
    let bob = server.client_as("bob").await.expect("bob's client");
    let carol = server.client_as("carol").await.expect("carol's client");
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");

    // RBAC: both users may create namespaces.
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "namespace-creator"},
                "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                           "verbs": ["create", "get", "list"]}],
            }))
            .unwrap(),
        )
        .await
        .expect("ClusterRole");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "namespace-creators"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "namespace-creator"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"},
                ],
            }))
            .unwrap(),
        )
        .await
        .expect("ClusterRoleBinding");

    let tenants: Api<Tenant> = Api::all(admin.clone());
    let acme = tenants
        .create(
            &pp,
            &serde_json::from_value(json!({
                "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "acme"},
                "spec": {"owners": [{"kind": "User", "name": "alice"}],
                         "namespaceOptions": {"quota": 21, "forceTenantPrefix": true}},
            }))
            .unwrap(),
        )
        .await
        .expect("Tenant acme");
    let acme_uid = acme.metadata.uid.clone().expect("a UID");
    tenants
        .create(
            &pp,
            &serde_json::from_value(json!({
                "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": "beta"},
                "spec": {"owners": [{"kind": "User", "name": "carol"}],
                         "namespaceOptions": {"quota": 5}},
            }))
            .unwrap(),
        )
        .await
        .expect("Tenant beta");

    // The webhook, with the admin client, over TLS on a free loopback port.
    let cert = env.ca().issue(&["127.0.0.1"]).expect("serving certificate");
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).expect("TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let webhook = tokio::spawn(serve_router(
        listener,
        tls,
        router_with_client(admin.clone()),
        async {
            stopped.await.ok();
        },
    ));
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(
            &pp,
            &namespace_webhook_configuration(
                WebhookClient::Url(format!("https://127.0.0.1:{port}/namespaces")),
                env.ca().cert_pem().as_bytes(),
            ),
        )
        .await
        .expect("webhook registered");

    // The configuration is picked up asynchronously: dry-run a namespace the webhook
    // refuses until it answers.
    let namespaces_as_alice: Api<Namespace> = Api::all(alice.clone());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let web = namespace("web");
    tenantplane_testenv::until_refused(DENIED_BY, DEADLINE, || {
        namespaces_as_alice.create(&dry_run, &web)
    })
    .await;

    // A dry run is admitted but takes no slot.
    let dry = namespaces_as_alice
        .create(&dry_run, &namespace("acme-dry"))
        .await
        .expect("dry run admitted");
    assert_eq!(
        dry.metadata.labels.unwrap_or_default()["tenantplane.io/tenant"],
        "acme"
    );
    assert!(reserved(&tenants.get("acme").await.unwrap()).is_empty());

    // alice's namespace joins acme.
    let created = create(&alice, "acme-1").await.expect("acme-1 admitted");
    let stored = Api::<Namespace>::all(admin.clone())
        .get("acme-1")
        .await
        .unwrap();
    assert_eq!(created.metadata.uid, stored.metadata.uid);
    let references = stored.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(references.len(), 1, "{references:?}");
    assert_eq!(references[0].kind, "Tenant");
    assert_eq!(references[0].api_version, "tenantplane.io/v1alpha1");
    assert_eq!(references[0].name, "acme");
    assert_eq!(references[0].uid, acme_uid);
    assert_eq!(
        stored.metadata.labels.clone().unwrap_or_default()["tenantplane.io/tenant"],
        "acme"
    );
    assert_eq!(
        reserved(&tenants.get("acme").await.unwrap()),
        ["acme-1".to_owned()]
    );

    // No prefix: denied with the prefix message.
    let status = api_status(create(&alice, "web").await, "web");
    assert_eq!(status.code, 403, "{status:?}");
    assert!(status.message.contains(DENIED_BY), "{}", status.message);
    assert!(
        status.message.contains(PREFIX_MESSAGE),
        "{}",
        status.message
    );

    // Fill the quota to one free slot, then race for it.
    for i in 2..=20 {
        create(&alice, &format!("acme-{i}"))
            .await
            .unwrap_or_else(|err| panic!("acme-{i}: {err:?}"));
    }
    assert_eq!(reserved(&tenants.get("acme").await.unwrap()).len(), 20);
    let racers: Vec<String> = (0..24).map(|i| format!("acme-race-{i}")).collect();
    let results = futures::future::join_all(racers.iter().map(|name| create(&alice, name))).await;
    let mut admitted = Vec::new();
    for (name, result) in racers.iter().zip(results) {
        match result {
            Ok(_) => admitted.push(name.clone()),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "{name}: {status:?}");
                assert!(
                    status.message.contains(DENIED_BY) && status.message.contains(QUOTA_MESSAGE),
                    "{name}: {}",
                    status.message
                );
            }
            Err(other) => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!(admitted.len(), 1, "admitted: {admitted:?}");
    let members = Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default().labels("tenantplane.io/tenant=acme"))
        .await
        .unwrap();
    assert_eq!(members.items.len(), 21);
    let acme_now = tenants.get("acme").await.unwrap();
    assert_eq!(reserved(&acme_now).len(), 21);
    assert!(reserved(&acme_now).contains(&admitted[0]));

    // Reservations expire (or a status is lost): the namespaces that exist still
    // count, because members are read from the namespaces themselves.
    tenants
        .patch_status(
            "acme",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"status": {"reservations": null, "namespaces": null}}),
            ),
        )
        .await
        .unwrap();
    let status = api_status(
        create(&alice, "acme-after-expiry").await,
        "a 22nd namespace",
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert!(status.message.contains(QUOTA_MESSAGE), "{}", status.message);

    // Several free slots raced for at once: the admissions read the same status, so
    // all but one writer per round get 409 Conflict and retry; exactly the quota wins.
    let racers: Vec<String> = (0..24).map(|i| format!("beta-{i}")).collect();
    let results = futures::future::join_all(racers.iter().map(|name| create(&carol, name))).await;
    let mut admitted = Vec::new();
    for (name, result) in racers.iter().zip(results) {
        match result {
            Ok(_) => admitted.push(name.clone()),
            Err(kube::Error::Api(status)) => assert!(
                status.code == 403
                    && status
                        .message
                        .contains("Tenant beta may have at most 5 namespaces"),
                "{name}: {status:?}"
            ),
            Err(other) => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!(admitted.len(), 5, "admitted: {admitted:?}");
    let beta = Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default().labels("tenantplane.io/tenant=beta"))
        .await
        .unwrap();
    assert_eq!(beta.items.len(), 5);

    // An existing namespace again: AlreadyExists, not the quota, though it is full.
    let status = api_status(create(&alice, "acme-1").await, "acme-1 again");
    assert_eq!(status.code, 409, "{status:?}");
    assert_eq!(status.reason, "AlreadyExists", "{status:?}");
    assert!(
        !status.message.contains(QUOTA_MESSAGE),
        "{}",
        status.message
    );

    // bob owns no Tenant: his namespace is not touched.
    let bobs = create(&bob, "bob-ns").await.expect("bob's namespace");
    assert!(
        bobs.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    assert!(
        !bobs
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("tenantplane.io/tenant")
    );

    stop.send(()).unwrap();
    tokio::time::timeout(DEADLINE, webhook)
        .await
        .expect("the webhook stops within the deadline")
        .expect("the webhook task")
        .expect("the webhook shut down cleanly");
}
