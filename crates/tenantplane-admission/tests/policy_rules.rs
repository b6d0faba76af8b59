//! `Tenant.spec.rules` behind a real kube-apiserver that calls the webhooks over
//! TLS, acting as tenant owners whose RBAC alone would allow every write: images of
//! every container kind, Service types and targets, metadata keys judged on the new
//! object with each key kind's own rule, patterns validated at admission (and a
//! stored bad one refusing, not crashing), Ingress hosts unique across tenants under
//! concurrent creates, and webhook rules that cover exactly the paths the handlers
//! protect, each of which exists in the API server's discovery (Capsule's 2026
//! advisory classes, one test each).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tenantplane_admission::config::{
    NAMESPACE_DELETION_WEBHOOK_NAME, TENANT_RESOURCES_WEBHOOK_NAME,
};
use tenantplane_admission::rules::{NAMESPACES_PROTECTED, Protected, TENANT_RESOURCES_PROTECTED};
use tenantplane_admission::{
    Admins, WebhookClient, namespace_webhook_configuration, router_with_rules, serve_router,
    tls_config, webhook_configuration,
};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_testenv::{ApiServerOptions, PooledServer, ServerPool, TestEnv, TestUser};

const DEADLINE: Duration = Duration::from_secs(30);
const BY_NAMESPACES: &str = "admission webhook \"namespaces.tenantplane.io\" denied the request";
/// Namespaces that carry (or carried) the tenant label go to the fail-closed webhook.
const BY_TENANT_NAMESPACES: &str =
    "admission webhook \"tenant-namespaces.tenantplane.io\" denied the request";
const BY_RESOURCES: &str =
    "admission webhook \"tenant-resources.tenantplane.io\" denied the request";
const BY_VALIDATE: &str = "admission webhook \"validate.tenantplane.io\" denied the request";
const CLAIMS_NAMESPACE: &str = "tenantplane-system";
/// Ephemeral containers are alpha on 1.20: the subresource exists only with the gate.
const EPHEMERAL_GATE: &str = "--feature-gates=EphemeralContainers=true";

fn from<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// `result` must be refused by `webhook` with a message that says every one of `says`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    webhook: &str,
    says: &[&str],
) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert!(status.message.contains(webhook), "{}", status.message);
            for said in says {
                assert!(
                    status.message.contains(said),
                    "{said:?} not in {}",
                    status.message
                );
            }
        }
        other => panic!("not refused (expected {says:?}): {other:?}"),
    }
}

/// Polls `attempt` until `webhook` refuses it (the API server loads webhook
/// configurations asynchronously).
async fn until_refused<F, Fut, T>(webhook: &str, attempt: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    tenantplane_testenv::until_refused(webhook, DEADLINE, attempt).await;
}

struct Cluster {
    _env: TestEnv,
    _server: PooledServer,
    admin: Client,
    alice: Client,
    bob: Client,
    base: String,
    ca: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
    }
}

/// The API servers of [`start`], with users alice and bob, tenantplane's CRDs and
/// ephemeral containers: handed on from test to test (see [`ServerPool`]; this
/// binary's modules run as one process).
static SERVERS: ServerPool = ServerPool::new();

/// An API server with alice (owner of Tenant acme) and bob (owner of Tenant beta),
/// both allowed by RBAC every write the rules must stop; the Tenants (created before
/// any webhook, so `acme`'s rules are stored unvalidated); the webhooks serving; the
/// namespace webhooks registered, and namespaces `acme-1` and `beta-1`.
async fn start(acme_rules: Value, beta_rules: Value) -> Cluster {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("policy-rules");
    options.users.push(TestUser::new("alice", &[]));
    options.users.push(TestUser::new("bob", &[]));
    options.extra_args = vec![EPHEMERAL_GATE.to_owned()];
    options.crds = tenantplane_api::crds();
    let server = SERVERS.take_with(options).await.expect("apiserver");
    let admin = server.client().await.expect("admin client");
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &from(json!({"metadata": {"name": "too-broad"}, "rules": [
            {"apiGroups": [""], "resources": ["namespaces", "pods", "pods/ephemeralcontainers",
                "services"], "verbs": ["get", "list", "create", "update", "patch", "delete"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
             "verbs": ["get", "list", "create", "update", "patch", "delete"]},
            {"apiGroups": ["tenantplane.io"], "resources": ["tenants"], "verbs": ["get", "list"]}]})))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &from(json!({"metadata": {"name": "too-broad"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "too-broad"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]})))
        .await
        .unwrap();
    let mut uids = Vec::new();
    for (tenant, owner, rules) in [("acme", "alice", acme_rules), ("beta", "bob", beta_rules)] {
        let mut spec = json!({"owners": [{"kind": "User", "name": owner}]});
        if !rules.is_null() {
            spec["rules"] = rules;
        }
        let created = Api::<Tenant>::all(admin.clone())
            .create(
                &pp,
                &from(
                    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                "metadata": {"name": tenant}, "spec": spec}),
                ),
            )
            .await
            .unwrap_or_else(|err| panic!("Tenant {tenant}: {err:?}"));
        uids.push((tenant, created.metadata.uid.unwrap()));
    }
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &from(json!({"metadata": {"name": CLAIMS_NAMESPACE}})))
        .await
        .unwrap();

    let cert = env.ca().issue(&["127.0.0.1"]).expect("serving certificate");
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).expect("TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = router_with_rules(admin.clone(), Admins::default(), CLAIMS_NAMESPACE.into());
    tokio::spawn(serve_router(listener, tls, router, async {
        stopped.await.ok();
    }));
    let ca = env.ca().cert_pem().to_owned();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(
            &pp,
            &namespace_webhook_configuration(WebhookClient::Url(base.clone()), ca.as_bytes()),
        )
        .await
        .expect("namespace webhooks registered");
    let cluster = Cluster {
        alice: server.client_as("alice").await.unwrap(),
        bob: server.client_as("bob").await.unwrap(),
        admin,
        base,
        ca,
        stop: Some(stop),
        _server: server,
        _env: env,
    };
    // The namespace webhook is consulted once a foreign Tenant cannot be named.
    let bob_namespaces: Api<Namespace> = Api::all(cluster.bob.clone());
    until_refused(BY_TENANT_NAMESPACES, || {
        let api = bob_namespaces.clone();
        async move {
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            api.create(
                &dry,
                &from(json!({"metadata": {"name": "x-probe",
                "labels": {"tenantplane.io/tenant": "acme"}}})),
            )
            .await
        }
    })
    .await;
    // Created by the admin into each tenant (an owner's creation would be judged by
    // the tenant's rules, which may be deliberately broken).
    for (tenant, uid) in uids {
        let namespace = format!("{tenant}-1");
        Api::<Namespace>::all(cluster.admin.clone())
            .create(&pp, &from(json!({"metadata": {"name": namespace, "ownerReferences": [
                {"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant", "name": tenant, "uid": uid}]}})))
            .await
            .unwrap_or_else(|err| panic!("{namespace}: {err:?}"));
    }
    cluster
}

impl Cluster {
    async fn register_validation(&self) {
        Api::<ValidatingWebhookConfiguration>::all(self.admin.clone())
            .create(
                &PostParams::default(),
                &webhook_configuration(
                    WebhookClient::Url(format!("{}/validate", self.base)),
                    self.ca.as_bytes(),
                ),
            )
            .await
            .expect("validating webhook registered");
    }
}

fn pod(name: &str, spec: Value) -> Pod {
    from(json!({"metadata": {"name": name}, "spec": spec}))
}

fn container(name: &str, image: &str, policy: &str) -> Value {
    json!({"name": name, "image": image, "imagePullPolicy": policy})
}

#[tokio::test]
async fn image_rules_cover_every_container_kind_and_update() {
    let rules = json!({"images": {
        "allowedRegistries": ["registry.example.com", "ghcr.io/acme/"],
        "allowedPullPolicies": ["Always"]}});
    let cluster = start(rules, json!(null)).await;
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(cluster.alice.clone(), "acme-1");
    until_refused(BY_RESOURCES, || {
        let pods = pods.clone();
        async move {
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            pods.create(
                &dry,
                &pod(
                    "probe",
                    json!({"containers": [container("a", "busybox", "Always")]}),
                ),
            )
            .await
        }
    })
    .await;

    assert_refused(
        pods.create(
            &pp,
            &pod(
                "hub",
                json!({"containers": [container("a", "busybox", "Always")]}),
            ),
        )
        .await,
        BY_RESOURCES,
        &[
            "spec.containers[0].image",
            "docker.io",
            "images.allowedRegistries",
        ],
    );
    // A repository prefix never matches a longer name.
    assert_refused(
        pods.create(
            &pp,
            &pod(
                "evil",
                json!({"containers": [container("a", "ghcr.io/acme-evil/x:1", "Always")]}),
            ),
        )
        .await,
        BY_RESOURCES,
        &["ghcr.io/acme-evil/x:1"],
    );
    assert_refused(
        pods.create(
            &pp,
            &pod(
                "init",
                json!({
            "initContainers": [container("i", "quay.io/tools:1", "Always")],
            "containers": [container("a", "registry.example.com/app:1", "Always")]}),
            ),
        )
        .await,
        BY_RESOURCES,
        &["spec.initContainers[0].image"],
    );
    assert_refused(
        pods.create(
            &pp,
            &pod(
                "policy",
                json!({"containers": [
            container("a", "registry.example.com/app:1", "IfNotPresent")]}),
            ),
        )
        .await,
        BY_RESOURCES,
        &[
            "spec.containers[0].imagePullPolicy",
            "images.allowedPullPolicies",
        ],
    );
    // Admins (and so every controller) are held to the image rules too.
    assert_refused(
        Api::<Pod>::namespaced(cluster.admin.clone(), "acme-1")
            .create(
                &pp,
                &pod(
                    "admin",
                    json!({"containers": [container("a", "busybox", "Always")]}),
                ),
            )
            .await,
        BY_RESOURCES,
        &["images.allowedRegistries"],
    );

    pods.create(
        &pp,
        &pod(
            "good",
            json!({
        "initContainers": [container("i", "ghcr.io/acme/init@sha256:abc", "Always")],
        "containers": [container("a", "registry.example.com/app:1", "Always")]}),
        ),
    )
    .await
    .expect("allowed images");
    // UPDATE: the new image is judged.
    assert_refused(
        pods.patch(
            "good",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [
            {"name": "a", "image": "docker.io/evil/app:1"}]}})),
        )
        .await,
        BY_RESOURCES,
        &["spec.containers[0].image", "docker.io/evil/app:1"],
    );
    // The ephemeralcontainers subresource (1.20 sends an EphemeralContainers object).
    let ephemeral = json!({"apiVersion": "v1", "kind": "EphemeralContainers",
        "metadata": {"name": "good", "namespace": "acme-1"},
        "ephemeralContainers": [{"name": "debug", "image": "busybox", "imagePullPolicy": "Always",
            "terminationMessagePolicy": "File"}]});
    let result = pods
        .replace_subresource("ephemeralcontainers", "good", &pp, &ephemeral)
        .await;
    assert_refused(
        result,
        BY_RESOURCES,
        &["ephemeralContainers[0].image", "images.allowedRegistries"],
    );
}

#[tokio::test]
async fn service_and_metadata_rules_judge_the_new_object_with_their_own_rule() {
    let rules = json!({
        "services": {"allowedTypes": ["ClusterIP", "ExternalName"],
                     "allowedExternalNames": ["*.svc.example.com"]},
        "metadata": {
            "namespaces": {"forbiddenLabels": {"exact": ["tier"]},
                           "forbiddenAnnotations": {"regex": "audit\\..*"}},
            "services": {"forbiddenLabels": {"regex": "internal-.*"},
                         "forbiddenAnnotations": {"exact": ["lb.example.com/expose"]}}}});
    let cluster = start(rules, json!(null)).await;
    let pp = PostParams::default();
    let services: Api<Service> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let service = |name: &str, metadata: Value, spec: Value| -> Service {
        let mut meta = json!({"name": name});
        meta.as_object_mut()
            .unwrap()
            .extend(metadata.as_object().unwrap().clone());
        let mut full = json!({"ports": [{"port": 80}]});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        from(json!({"metadata": meta, "spec": full}))
    };
    until_refused(BY_RESOURCES, || {
        let services = services.clone();
        async move {
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            services
                .create(
                    &dry,
                    &service("probe", json!({}), json!({"type": "NodePort"})),
                )
                .await
        }
    })
    .await;
    assert_refused(
        services
            .create(&pp, &service("np", json!({}), json!({"type": "NodePort"})))
            .await,
        BY_RESOURCES,
        &["spec.type", "services.allowedTypes"],
    );
    assert_refused(
        services
            .create(
                &pp,
                &service("ips", json!({}), json!({"externalIPs": ["203.0.113.9"]})),
            )
            .await,
        BY_RESOURCES,
        &["spec.externalIPs", "services.allowExternalIPs"],
    );
    let external = |name: &str, target: &str| {
        from::<Service>(json!({"metadata": {"name": name},
            "spec": {"type": "ExternalName", "externalName": target}}))
    };
    assert_refused(
        services.create(&pp, &external("far", "db.evil.com")).await,
        BY_RESOURCES,
        &["spec.externalName", "services.allowedExternalNames"],
    );
    services
        .create(&pp, &external("db", "db.svc.example.com"))
        .await
        .expect("allowed target");
    // Labels are judged by the labels rule, annotations by the annotations rule.
    assert_refused(
        services
            .create(
                &pp,
                &service("lbl", json!({"labels": {"internal-x": "1"}}), json!({})),
            )
            .await,
        BY_RESOURCES,
        &["metadata.services.forbiddenLabels"],
    );
    services
        .create(
            &pp,
            &service(
                "ann",
                json!({"annotations": {"internal-x": "1"}}),
                json!({}),
            ),
        )
        .await
        .expect("the labels regex does not judge annotations");
    assert_refused(
        services
            .patch(
                "ann",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
            "annotations": {"lb.example.com/expose": "yes"}}})),
            )
            .await,
        BY_RESOURCES,
        &[
            "metadata.services.forbiddenAnnotations",
            "lb.example.com/expose",
        ],
    );

    // Namespaces: on CREATE and on UPDATE the new object's keys are judged.
    let namespaces: Api<Namespace> = Api::all(cluster.alice.clone());
    assert_refused(
        namespaces
            .create(
                &pp,
                &from(json!({"metadata": {"name": "acme-2", "labels": {"tier": "gold"}}})),
            )
            .await,
        BY_NAMESPACES,
        &["metadata.namespaces.forbiddenLabels", "\"tier\""],
    );
    assert_refused(
        namespaces
            .create(
                &pp,
                &from(json!({"metadata": {"name": "acme-2", "annotations": {"audit.log": "x"}}})),
            )
            .await,
        BY_NAMESPACES,
        &["metadata.namespaces.forbiddenAnnotations"],
    );
    namespaces
        .create(
            &pp,
            &from(json!({"metadata": {"name": "acme-2", "annotations": {"tier": "gold"}}})),
        )
        .await
        .expect("a label rule does not judge annotations");
    assert_refused(
        namespaces
            .patch(
                "acme-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
            )
            .await,
        BY_TENANT_NAMESPACES,
        &["metadata.namespaces.forbiddenLabels"],
    );
    // An admin may set it; the owner's later unrelated edit keeps it.
    Api::<Namespace>::all(cluster.admin.clone())
        .patch(
            "acme-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .expect("admins are exempt from metadata rules");
    namespaces
        .patch(
            "acme-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("a key already set is not judged again");
    assert_refused(
        namespaces
            .patch(
                "acme-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"tier": "platinum"}}})),
            )
            .await,
        BY_TENANT_NAMESPACES,
        &["metadata.namespaces.forbiddenLabels"],
    );
}

#[tokio::test]
async fn invalid_patterns_are_refused_at_admission_and_a_stored_one_never_crashes() {
    // beta's rules were stored before the validating webhook existed.
    let broken = json!({"metadata": {"namespaces": {"forbiddenLabels": {"regex": "("}}},
                        "images": {"allowedRegistries": ["registry.example.com"]}});
    let cluster = start(json!(null), broken).await;
    let pp = PostParams::default();
    assert_refused(
        Api::<Namespace>::all(cluster.bob.clone())
            .create(&pp, &from(json!({"metadata": {"name": "beta-2"}})))
            .await,
        BY_NAMESPACES,
        &[
            "Tenant beta's rules are invalid",
            "spec.rules.metadata.namespaces.forbiddenLabels.regex",
            "regex parse error",
        ],
    );
    assert_refused(
        Api::<Pod>::namespaced(cluster.bob.clone(), "beta-1")
            .create(
                &pp,
                &pod(
                    "p",
                    json!({"containers": [container("a", "registry.example.com/a:1", "Always")]}),
                ),
            )
            .await,
        BY_RESOURCES,
        &["Tenant beta's rules are invalid"],
    );
    // The webhook is still serving: the other tenant's writes go through.
    Api::<Namespace>::all(cluster.alice.clone())
        .create(&pp, &from(json!({"metadata": {"name": "acme-2"}})))
        .await
        .expect("the webhook survived the stored bad regex");

    cluster.register_validation().await;
    let tenants: Api<Tenant> = Api::all(cluster.admin.clone());
    let bad_tenant = |name: &str, rules: Value| -> Tenant {
        from(
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant", "metadata": {"name": name},
            "spec": {"owners": [{"kind": "User", "name": "carol"}], "rules": rules}}),
        )
    };
    until_refused(BY_VALIDATE, || {
        let tenants = tenants.clone();
        let tenant = bad_tenant(
            "probe",
            json!({"metadata": {"services": {"forbiddenAnnotations": {"regex": "["}}}}),
        );
        async move {
            tenants
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &tenant,
                )
                .await
        }
    })
    .await;
    assert_refused(
        tenants.create(&pp, &bad_tenant("t1", json!({"metadata": {"services": {"forbiddenAnnotations": {"regex": "a{2,1}"}}}}))).await,
        BY_VALIDATE,
        &["spec.rules.metadata.services.forbiddenAnnotations.regex", "regex parse error"],
    );
    assert_refused(
        tenants
            .create(
                &pp,
                &bad_tenant(
                    "t2",
                    json!({"images": {"allowedRegistries": ["ghcr.io/acme"]},
            "ingress": {"allowedHostnames": ["*.*.acme.com"]}}),
                ),
            )
            .await,
        BY_VALIDATE,
        &[
            "spec.rules.images.allowedRegistries[0]",
            "must end with '/'",
            "spec.rules.ingress.allowedHostnames[0]",
        ],
    );
    assert_refused(
        tenants
            .patch(
                "acme",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"rules": {
            "metadata": {"namespaces": {"allowedLabels": {"regex": "(?P<"}}}}}})),
            )
            .await,
        BY_VALIDATE,
        &["spec.rules.metadata.namespaces.allowedLabels.regex"],
    );
    assert_refused(
        Api::<IsolationProfile>::all(cluster.admin.clone())
            .create(&pp, &from(json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
                "metadata": {"name": "p"}, "spec": {"rules": {"services": {"allowedExternalNames": ["a b"]}}}})))
            .await,
        BY_VALIDATE,
        &["spec.rules.services.allowedExternalNames[0]"],
    );
    tenants
        .create(
            &pp,
            &bad_tenant(
                "fine",
                json!({"metadata": {"namespaces": {"forbiddenLabels": {"regex": "x-.*"}}}}),
            ),
        )
        .await
        .expect("a valid Tenant");
}

/// Every resource and subresource named in `rendered` rules or `protected` lists
/// exists in the API server's discovery, e.g. `namespaces/finalize` (a misspelt
/// `namespace/finalize` would be silently never matched).
async fn missing_from_discovery(
    client: &Client,
    paths: &BTreeSet<(String, String)>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for (group, resource) in paths {
        let versions: Vec<String> = if group.is_empty() {
            vec!["v1".into()]
        } else {
            let groups = client.list_api_groups().await.unwrap();
            groups
                .groups
                .iter()
                .filter(|g| g.name == *group)
                .flat_map(|g| g.versions.iter().map(|v| v.group_version.clone()))
                .collect()
        };
        let mut found = false;
        for version in versions {
            let list = if group.is_empty() {
                client.list_core_api_resources(&version).await.unwrap()
            } else {
                client.list_api_group_resources(&version).await.unwrap()
            };
            found |= list.resources.iter().any(|r| r.name == *resource);
        }
        if !found {
            missing.push(format!("{group}/{resource}"));
        }
    }
    missing
}

/// `(group, resource[/subresource], operation)` of a protected list.
fn claimed(list: &[Protected]) -> BTreeSet<(String, String, String)> {
    list.iter()
        .flat_map(|p| {
            let path = if p.subresource.is_empty() {
                p.resource.to_owned()
            } else {
                format!("{}/{}", p.resource, p.subresource)
            };
            p.operations
                .iter()
                .map(move |op| (p.group.to_owned(), path.clone(), (*op).to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn webhook_rules_cover_exactly_the_protected_paths_and_each_exists() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("coverage");
    options.extra_args.push(EPHEMERAL_GATE.into());
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let client = server.client().await.unwrap();

    let config = serde_json::to_value(namespace_webhook_configuration(
        WebhookClient::Url("https://h:1".into()),
        b"PEM",
    ))
    .unwrap();
    // Rendered (group, resource, operation) per handler path; "*" rules separately.
    let mut explicit: std::collections::BTreeMap<String, BTreeSet<(String, String, String)>> =
        Default::default();
    let mut wildcard: std::collections::BTreeMap<String, BTreeSet<(String, String, String)>> =
        Default::default();
    for webhook in config["webhooks"].as_array().unwrap() {
        let url = webhook["clientConfig"]["url"].as_str().unwrap();
        let path = url.trim_start_matches("https://h:1").to_owned();
        for rule in webhook["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for op in rule["operations"].as_array().unwrap() {
                        let triple = (
                            group.as_str().unwrap().to_owned(),
                            resource.as_str().unwrap().to_owned(),
                            op.as_str().unwrap().to_owned(),
                        );
                        let into = if triple.0 == "*" || triple.1.starts_with('*') {
                            &mut wildcard
                        } else {
                            &mut explicit
                        };
                        into.entry(path.clone()).or_default().insert(triple);
                    }
                }
            }
        }
    }
    assert!(
        config["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["name"] == TENANT_RESOURCES_WEBHOOK_NAME)
    );
    assert!(
        config["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["name"] == NAMESPACE_DELETION_WEBHOOK_NAME)
    );

    // /namespaces: the rendered rules are exactly the claimed paths.
    assert_eq!(
        explicit.get("/namespaces").cloned().unwrap_or_default(),
        claimed(NAMESPACES_PROTECTED)
    );
    assert!(!wildcard.contains_key("/namespaces"));
    // /tenant-resources: every explicit (subresource) rule is claimed and every
    // claimed subresource is rendered; every claimed resource is under "*".
    let resources = claimed(TENANT_RESOURCES_PROTECTED);
    let subresources: BTreeSet<_> = resources
        .iter()
        .filter(|(_, r, _)| r.contains('/'))
        .cloned()
        .collect();
    assert_eq!(
        explicit
            .get("/tenant-resources")
            .cloned()
            .unwrap_or_default(),
        subresources
    );
    let wild = wildcard
        .get("/tenant-resources")
        .cloned()
        .unwrap_or_default();
    for (_, resource, op) in resources.iter().filter(|(_, r, _)| !r.contains('/')) {
        assert!(
            wild.contains(&("*".into(), "*".into(), op.clone())),
            "{resource} {op} is not sent"
        );
    }

    // Every claimed and every explicitly rendered path exists.
    let mut paths: BTreeSet<(String, String)> = BTreeSet::new();
    for (group, resource, _) in claimed(NAMESPACES_PROTECTED)
        .into_iter()
        .chain(resources)
        .chain(explicit.values().flatten().cloned())
    {
        paths.insert((group, resource));
    }
    let validation = serde_json::to_value(webhook_configuration(
        WebhookClient::Url("https://h:1/validate".into()),
        b"PEM",
    ))
    .unwrap();
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");
    for rule in validation["webhooks"][0]["rules"].as_array().unwrap() {
        for resource in rule["resources"].as_array().unwrap() {
            paths.insert((
                "tenantplane.io".into(),
                resource.as_str().unwrap().to_owned(),
            ));
        }
    }
    // CRDs are served a moment after they are established.
    tenantplane_testenv::eventually(
        "every validated resource in discovery",
        DEADLINE,
        || async {
            let missing = missing_from_discovery(&client, &paths).await;
            if missing.is_empty() {
                Ok(())
            } else {
                Err(missing)
            }
        },
    )
    .await;
    // The check catches Capsule's misspelling.
    let misspelt = BTreeSet::from([(String::new(), "namespace/finalize".to_owned())]);
    assert_eq!(
        missing_from_discovery(&client, &misspelt).await,
        ["/namespace/finalize"]
    );
}

fn ingress(name: &str, host: &str) -> Ingress {
    from(
        json!({"metadata": {"name": name}, "spec": {"rules": [{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
    )
}

#[tokio::test]
async fn ingress_hosts_follow_patterns_and_one_tenant_wins_a_host() {
    let rules =
        json!({"ingress": {"allowedHostnames": ["acme.example.com", "*.acme.example.com"]}});
    let cluster = start(rules, json!(null)).await;
    let pp = PostParams::default();
    let alice: Api<Ingress> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let bob: Api<Ingress> = Api::namespaced(cluster.bob.clone(), "beta-1");
    until_refused(BY_RESOURCES, || {
        let alice = alice.clone();
        async move {
            alice
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &ingress("probe", "evil.com"),
                )
                .await
        }
    })
    .await;
    assert_refused(
        alice
            .create(&pp, &ingress("deep", "a.b.acme.example.com"))
            .await,
        BY_RESOURCES,
        &["spec.rules[0].host", "ingress.allowedHostnames"],
    );
    alice
        .create(&pp, &ingress("www", "www.acme.example.com"))
        .await
        .expect("an allowed host");
    assert_refused(
        bob.create(&pp, &ingress("www", "www.acme.example.com"))
            .await,
        BY_RESOURCES,
        &["already served by another tenant"],
    );

    // The race: both tenants create Ingresses for one host at once.
    const EACH: usize = 4;
    let host = "race.acme.example.com";
    let mut attempts = Vec::new();
    for i in 0..EACH {
        for (tenant, api) in [("acme", alice.clone()), ("beta", bob.clone())] {
            attempts.push(tokio::spawn(async move {
                let result = api
                    .create(&PostParams::default(), &ingress(&format!("race-{i}"), host))
                    .await;
                (tenant, result)
            }));
        }
    }
    let mut won: std::collections::BTreeMap<&str, usize> = Default::default();
    for attempt in attempts {
        let (tenant, result) = attempt.await.unwrap();
        match result {
            Ok(_) => *won.entry(tenant).or_default() += 1,
            Err(kube::Error::Api(status)) => {
                assert!(
                    status.message.contains("already served by another tenant"),
                    "{}",
                    status.message
                )
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one tenant wins the host: {won:?}");
    let (winner, count) = won.into_iter().next().unwrap();
    assert_eq!(count, EACH, "the winner's own creates all succeed");

    // Once the winner's Ingresses are gone and the claim is past its grace, the
    // other tenant gets the host (the stale claim is removed on its next check).
    let (winner_api, loser_api) = if winner == "acme" {
        (alice.clone(), bob.clone())
    } else {
        (bob.clone(), alice.clone())
    };
    for i in 0..EACH {
        winner_api
            .delete(&format!("race-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let limit = tenantplane_admission::ingress_claims::CLAIM_GRACE + DEADLINE;
    tenantplane_testenv::eventually("the stale claim released", limit, || async {
        match loser_api.create(&pp, &ingress("taken-over", host)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status))
                if status.message.contains("already served by another tenant") =>
            {
                Err(status.message)
            }
            Err(other) => panic!("{other:?}"),
        }
    })
    .await;
    assert_refused(
        winner_api.create(&pp, &ingress("back", host)).await,
        BY_RESOURCES,
        &["already served by another tenant"],
    );
}
