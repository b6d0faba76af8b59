//! The namespace-tenant rules behind a real kube-apiserver, acting as different
//! users whose RBAC alone would allow every hijack below: only the webhooks stop
//! them. Namespaces cannot be moved, claimed, stripped or forged through PUT, merge
//! patch, JSON patch, server-side apply, `status` or `finalize`; an admin adoption
//! respects the quota; classes and node selectors are defaulted and restricted in
//! tenant namespaces (membership proven by owner-reference UID, not the label); a
//! cordoned tenant refuses writes except by admins; a Tenant with preventDeletion
//! is not deleted; and a down webhook blocks nothing in system namespaces.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tenantplane_admission::{
    Admins, WebhookClient, namespace_webhook_configuration, router_with_tenancy, serve_router,
    tls_config, webhook_configuration,
};
use tenantplane_api::Tenant;
use tenantplane_testenv::{ApiServerOptions, TestEnv, TestUser};

const DEADLINE: Duration = Duration::from_secs(30);
const BY_NAMESPACES: &str = "admission webhook \"namespaces.tenantplane.io\" denied the request";
/// Same handler, for namespaces whose old or new object has the tenant label.
const BY_TENANT_NAMESPACES: &str =
    "admission webhook \"tenant-namespaces.tenantplane.io\" denied the request";
const BY_NAMESPACE_DELETION: &str =
    "admission webhook \"namespace-deletion.tenantplane.io\" denied the request";
const BY_RESOURCES: &str =
    "admission webhook \"tenant-resources.tenantplane.io\" denied the request";
const BY_VALIDATE: &str = "admission webhook \"validate.tenantplane.io\" denied the request";
const ONLY_ADMIN_REFS: &str = "only an admin may change a namespace's Tenant owner references";
const ONLY_ADMIN_LABEL: &str = "only an admin may change a namespace's tenantplane.io/tenant label";
const TENANT_LABEL: &str = "tenantplane.io/tenant";

fn from<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The API server's refusal of `result`, which must come from `webhook` and say `says`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, webhook: &str, says: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains(webhook), "{}", status.message);
            assert!(status.message.contains(says), "{}", status.message);
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

fn tenant_reference(tenant: &Tenant) -> Value {
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
           "name": tenant.metadata.name, "uid": tenant.metadata.uid})
}

fn identity(ns: &Namespace) -> Identity {
    let refs = ns
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.name, r.uid))
        .collect();
    let label = ns
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .get(TENANT_LABEL)
        .cloned();
    (refs, label)
}

struct Cluster {
    admin: Client,
    alice: Client,
    mallory: Client,
    carol: Client,
    platform: Client,
    controller: Client,
    acme: Tenant,
    evil: Tenant,
    full: Tenant,
}

/// RBAC that allows every user every write the webhooks must stop.
async fn grant_everything(admin: &Client) {
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &pp,
            &from(json!({
                "metadata": {"name": "too-broad"},
                "rules": [
                    {"apiGroups": [""], "resources": ["namespaces", "namespaces/status",
                        "namespaces/finalize", "configmaps", "pods",
                        "persistentvolumeclaims", "pods/exec", "pods/eviction"],
                     "verbs": ["get", "list", "create", "update", "patch", "delete"]},
                    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
                     "verbs": ["get", "list", "create", "update", "patch", "delete"]},
                    {"apiGroups": ["tenantplane.io"], "resources": ["tenants"],
                     "verbs": ["get", "list", "delete", "patch"]},
                ],
            })),
        )
        .await
        .expect("ClusterRole");
    let subjects: Vec<Value> = ["alice", "mallory", "carol", "pat", "tenantplane-controller"]
        .iter()
        .map(|user| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}))
        .collect();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &from(json!({
                "metadata": {"name": "too-broad"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "too-broad"},
                "subjects": subjects,
            })),
        )
        .await
        .expect("ClusterRoleBinding");
}

async fn create_tenant(admin: &Client, name: &str, spec: Value) -> Tenant {
    Api::<Tenant>::all(admin.clone())
        .create(
            &PostParams::default(),
            &from(
                json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                         "metadata": {"name": name}, "spec": spec}),
            ),
        )
        .await
        .unwrap_or_else(|err| panic!("Tenant {name}: {err:?}"))
}

async fn create_namespace(client: &Client, object: Value) -> Result<Namespace, kube::Error> {
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &from(object))
        .await
}

#[tokio::test]
async fn namespace_tenant_rules_stop_hijacks_and_enforce_tenant_policy() {
    let env = TestEnv::start().await.expect("etcd");
    let mut options = ApiServerOptions::new("host");
    for (user, groups) in [
        ("alice", &["devs"][..]),
        ("mallory", &[]),
        ("carol", &[]),
        ("pat", &["platform"]),
        ("tenantplane-controller", &[]),
    ] {
        options.users.push(TestUser::new(user, groups));
    }
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let admin = server.client().await.expect("admin client");
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");
    grant_everything(&admin).await;

    let acme = create_tenant(
        &admin,
        "acme",
        json!({"owners": [{"kind": "User", "name": "alice"}],
               "namespaceOptions": {"quota": 3},
               "storageClasses": {"allowed": ["fast"], "default": "standard"},
               "priorityClasses": {"allowed": ["high"], "default": "low"},
               "runtimeClasses": {"allowed": [], "default": "gvisor"},
               "ingressClasses": {"allowed": ["public"], "default": "internal"},
               "nodeSelector": {"pool": "acme"}}),
    )
    .await;
    let evil = create_tenant(
        &admin,
        "evil",
        json!({"owners": [{"kind": "User", "name": "mallory"}], "preventDeletion": true}),
    )
    .await;
    let full = create_tenant(
        &admin,
        "full",
        json!({"owners": [{"kind": "User", "name": "carol"}], "namespaceOptions": {"quota": 1}}),
    )
    .await;

    // Both webhooks, with the admin client, over TLS on a free loopback port.
    let cert = env.ca().issue(&["127.0.0.1"]).expect("serving certificate");
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).expect("TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let admins = Admins {
        groups: vec!["platform".into()],
        users: vec!["tenantplane-controller".into()],
    };
    let webhook = tokio::spawn(serve_router(
        listener,
        tls,
        router_with_tenancy(admin.clone(), admins),
        async {
            stopped.await.ok();
        },
    ));
    let ca = env.ca().cert_pem();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(
            &PostParams::default(),
            &namespace_webhook_configuration(WebhookClient::Url(base.clone()), ca.as_bytes()),
        )
        .await
        .expect("namespace webhooks registered");
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(
            &PostParams::default(),
            &webhook_configuration(
                WebhookClient::Url(format!("{base}/validate")),
                ca.as_bytes(),
            ),
        )
        .await
        .expect("validating webhook registered");

    let cluster = Cluster {
        alice: server.client_as("alice").await.unwrap(),
        mallory: server.client_as("mallory").await.unwrap(),
        carol: server.client_as("carol").await.unwrap(),
        platform: server.client_as("pat").await.unwrap(),
        controller: server.client_as("tenantplane-controller").await.unwrap(),
        admin,
        acme,
        evil,
        full,
    };
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let mallory_namespaces: Api<Namespace> = Api::all(cluster.mallory.clone());
    until_refused(BY_TENANT_NAMESPACES, || {
        let (api, dry_run) = (mallory_namespaces.clone(), dry_run.clone());
        async move {
            let claim = Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: "evil"}}}));
            api.patch("kube-system", &dry_run, &claim).await
        }
    })
    .await;

    // Each tenant's owner creates a member namespace.
    create_namespace(&cluster.alice, json!({"metadata": {"name": "acme-1"}}))
        .await
        .expect("acme-1");
    create_namespace(&cluster.mallory, json!({"metadata": {"name": "evil-1"}}))
        .await
        .expect("evil-1");
    create_namespace(&cluster.carol, json!({"metadata": {"name": "full-1"}}))
        .await
        .expect("full-1");

    hijacks_through_every_update_path_are_refused(&cluster).await;
    namespace_creations_cannot_name_another_tenant(&cluster).await;
    admin_adoptions_respect_the_quota(&cluster).await;
    classes_and_node_selectors_in_tenant_namespaces(&cluster).await;
    a_cordoned_tenant_refuses_writes_but_not_admins(&cluster).await;
    prevent_deletion_keeps_a_tenant(&cluster).await;

    // Down: system namespaces are unaffected (the in-namespace webhook never
    // matches them), tenant namespaces fail closed.
    stop.send(()).unwrap();
    tokio::time::timeout(DEADLINE, webhook)
        .await
        .expect("the webhook stops within the deadline")
        .expect("the webhook task")
        .expect("the webhook shut down cleanly");
    let configmap = |name: &str| -> ConfigMap { from(json!({"metadata": {"name": name}})) };
    for namespace in ["kube-system", "kube-public", "kube-node-lease", "default"] {
        Api::<ConfigMap>::namespaced(cluster.admin.clone(), namespace)
            .create(&PostParams::default(), &configmap("while-down"))
            .await
            .unwrap_or_else(|err| panic!("{namespace} blocked by a down webhook: {err:?}"));
    }
    let blocked = Api::<ConfigMap>::namespaced(cluster.alice.clone(), "acme-1")
        .create(&PostParams::default(), &configmap("while-down"))
        .await;
    match blocked {
        Err(kube::Error::Api(status)) => assert!(
            status.message.contains("tenant-resources.tenantplane.io"),
            "{status:?}"
        ),
        other => panic!("a tenant write passed a down webhook: {other:?}"),
    }
}

/// How an update reaches the API server.
#[derive(Clone, Copy)]
enum Via {
    Merge,
    Json,
    Apply,
    MergeStatus,
}

impl Via {
    async fn patch(
        self,
        api: &Api<Namespace>,
        name: &str,
        body: Value,
    ) -> Result<Namespace, kube::Error> {
        let pp = PatchParams::default();
        match self {
            Self::Merge => api.patch(name, &pp, &Patch::Merge(body)).await,
            Self::Json => api.patch(name, &pp, &Patch::Json::<()>(from(body))).await,
            Self::Apply => {
                api.patch(name, &PatchParams::apply("mallory"), &Patch::Apply(body))
                    .await
            }
            Self::MergeStatus => api.patch_status(name, &pp, &Patch::Merge(body)).await,
        }
    }
}

type Identity = (Vec<(String, String)>, Option<String>);

async fn hijacks_through_every_update_path_are_refused(cluster: &Cluster) {
    let namespaces: Api<Namespace> = Api::all(cluster.mallory.clone());
    let pp = PatchParams::default();
    let all: Api<Namespace> = Api::all(cluster.admin.clone());
    let before: Vec<(String, Identity)> = {
        let mut out = Vec::new();
        for name in ["kube-system", "kube-public", "acme-1", "evil-1"] {
            out.push((name.to_owned(), identity(&all.get(name).await.unwrap())));
        }
        out
    };
    let evil_ref = tenant_reference(&cluster.evil);
    let evil_1 = all.get("evil-1").await.unwrap();
    let owned_by_evil_1 = json!({"apiVersion": "v1", "kind": "Namespace",
        "name": "evil-1", "uid": evil_1.metadata.uid});
    let mut forged = evil_ref.clone();
    forged["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let apply = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "kube-system", "ownerReferences": [evil_ref.clone()],
                     "labels": {TENANT_LABEL: "evil"}}});
    let attempts = [
        // Claiming kube-system by merge patch, JSON patch and server-side apply.
        (
            "kube-system",
            Via::Merge,
            json!({"metadata": {"ownerReferences": [evil_ref.clone()]}}),
            ONLY_ADMIN_REFS,
        ),
        (
            "kube-system",
            Via::Json,
            json!([{"op": "add", "path": "/metadata/ownerReferences", "value": [evil_ref.clone()]}]),
            ONLY_ADMIN_REFS,
        ),
        ("kube-system", Via::Apply, apply, ONLY_ADMIN_REFS),
        // kube-system owned by mallory's namespace: deleting evil-1 would make the
        // garbage collector delete kube-system.
        (
            "kube-system",
            Via::Merge,
            json!({"metadata": {"ownerReferences": [owned_by_evil_1]}}),
            "only an admin may change a namespace's owner references",
        ),
        // A forged label alone, on kube-public.
        (
            "kube-public",
            Via::Merge,
            json!({"metadata": {"labels": {TENANT_LABEL: "acme"}}}),
            ONLY_ADMIN_LABEL,
        ),
        // Moving acme-1 into evil.
        (
            "acme-1",
            Via::Merge,
            json!({"metadata": {"ownerReferences": [evil_ref.clone()], "labels": {TENANT_LABEL: "evil"}}}),
            ONLY_ADMIN_REFS,
        ),
        // Escaping from evil: stripping the reference or the label; a forged UID.
        (
            "evil-1",
            Via::Json,
            json!([{"op": "remove", "path": "/metadata/ownerReferences"}]),
            ONLY_ADMIN_REFS,
        ),
        (
            "evil-1",
            Via::Json,
            json!([{"op": "remove", "path": "/metadata/labels/tenantplane.io~1tenant"}]),
            ONLY_ADMIN_LABEL,
        ),
        (
            "evil-1",
            Via::Merge,
            json!({"metadata": {"ownerReferences": [forged]}}),
            ONLY_ADMIN_REFS,
        ),
        // The status subresource rewrites metadata too.
        (
            "acme-1",
            Via::MergeStatus,
            json!({"metadata": {"ownerReferences": [evil_ref.clone()]}}),
            ONLY_ADMIN_REFS,
        ),
    ];
    for (name, via, body, says) in attempts {
        // The webhook that sees it: the tenant one when the old namespace (a
        // member) or the new one (the body adds the label) has the tenant label.
        let labelled = !matches!(name, "kube-system" | "kube-public")
            || body.to_string().contains(TENANT_LABEL);
        let by = if labelled {
            BY_TENANT_NAMESPACES
        } else {
            BY_NAMESPACES
        };
        assert_refused(via.patch(&namespaces, name, body).await, by, says);
    }
    // PUT.
    let mut kube_system = namespaces.get("kube-system").await.unwrap();
    kube_system.metadata.owner_references = Some(vec![from(evil_ref.clone())]);
    assert_refused(
        namespaces
            .replace("kube-system", &PostParams::default(), &kube_system)
            .await,
        BY_NAMESPACES,
        ONLY_ADMIN_REFS,
    );

    // The status and finalize subresources rewrite metadata too.
    assert_refused(
        namespaces
            .replace_status("kube-system", &PostParams::default(), &kube_system)
            .await,
        BY_NAMESPACES,
        ONLY_ADMIN_REFS,
    );
    let mut escaped = namespaces.get("evil-1").await.unwrap();
    escaped.metadata.owner_references = None;
    assert_refused(
        namespaces
            .replace_subresource("finalize", "evil-1", &PostParams::default(), &escaped)
            .await,
        BY_TENANT_NAMESPACES,
        ONLY_ADMIN_REFS,
    );

    // Nothing changed.
    for (name, identity_before) in &before {
        assert_eq!(
            &identity(&all.get(name).await.unwrap()),
            identity_before,
            "{name}"
        );
    }
    // An update that leaves the tenant identity alone is not the webhook's business.
    let relabelled = namespaces
        .patch(
            "evil-1",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"team": "red"}}})),
        )
        .await
        .expect("an ordinary label change");
    assert_eq!(relabelled.metadata.labels.unwrap()["team"], "red");
}

async fn namespace_creations_cannot_name_another_tenant(cluster: &Cluster) {
    // A tenant owner cannot create a namespace straight into someone else's tenant,
    // nor can a user who owns no Tenant (the platform user is an admin; carol owns
    // `full`, so mallory it is, naming acme).
    let acme_ref = tenant_reference(&cluster.acme);
    assert_refused(
        create_namespace(
            &cluster.mallory,
            json!({"metadata": {"name": "evil-sneaky", "ownerReferences": [acme_ref]}}),
        )
        .await,
        BY_NAMESPACES,
        "may carry only the Tenant owner reference and tenantplane.io/tenant label of the tenant it joins (Tenant evil)",
    );
    assert_refused(
        create_namespace(
            &cluster.mallory,
            json!({"metadata": {"name": "evil-labelled", "labels": {TENANT_LABEL: "acme"}}}),
        )
        .await,
        BY_TENANT_NAMESPACES,
        "label tenantplane.io/tenant=acme",
    );
}

async fn admin_adoptions_respect_the_quota(cluster: &Cluster) {
    let namespaces: Api<Namespace> = Api::all(cluster.platform.clone());
    namespaces
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "loose"}})),
        )
        .await
        .expect("an admin's unowned namespace");
    // `full` is at its quota of 1 (full-1): an admin's adoption is refused by the
    // quota, with the quota's message, through an update and through a creation.
    let full_ref = tenant_reference(&cluster.full);
    let adopt = |reference: Value, tenant: &str| {
        Patch::Merge(json!({"metadata": {"ownerReferences": [reference],
                                         "labels": {TENANT_LABEL: tenant}}}))
    };
    assert_refused(
        namespaces
            .patch(
                "loose",
                &PatchParams::default(),
                &adopt(full_ref.clone(), "full"),
            )
            .await,
        BY_TENANT_NAMESPACES,
        "Tenant full may have at most 1 namespaces and has 1",
    );
    assert_refused(
        create_namespace(
            &cluster.platform,
            json!({"metadata": {"name": "full-2", "ownerReferences": [full_ref]}}),
        )
        .await,
        BY_NAMESPACES,
        "Tenant full may have at most 1 namespaces",
    );
    // An admin's namespace created with only acme's owner reference is labelled for
    // acme and takes a slot (acme: acme-1, then this one).
    let created = create_namespace(
        &cluster.platform,
        json!({"metadata": {"name": "by-admin", "ownerReferences": [tenant_reference(&cluster.acme)]}}),
    )
    .await
    .expect("an admin's namespace in a tenant with room");
    assert_eq!(identity(&created).1.as_deref(), Some("acme"));
    // acme has room for one more: the adoption is admitted and takes a slot.
    let adopted = namespaces
        .patch(
            "loose",
            &PatchParams::default(),
            &adopt(tenant_reference(&cluster.acme), "acme"),
        )
        .await
        .expect("adoption into a tenant with room");
    assert_eq!(identity(&adopted).1.as_deref(), Some("acme"));
    let acme = Api::<Tenant>::all(cluster.admin.clone())
        .get("acme")
        .await
        .unwrap();
    let reserved: Vec<String> = acme
        .status
        .unwrap_or_default()
        .reservations
        .into_iter()
        .map(|r| r.namespace)
        .collect();
    assert!(reserved.contains(&"loose".to_owned()), "{reserved:?}");
    // acme is now full (quota 3): its owner's next namespace is refused.
    assert_refused(
        create_namespace(&cluster.alice, json!({"metadata": {"name": "acme-4"}})).await,
        BY_NAMESPACES,
        "Tenant acme may have at most 3 namespaces and has 3",
    );
}

async fn classes_and_node_selectors_in_tenant_namespaces(cluster: &Cluster) {
    let pp = PostParams::default();
    for name in ["low", "high", "forbidden"] {
        Api::<PriorityClass>::all(cluster.admin.clone())
            .create(&pp, &from(json!({"metadata": {"name": name}, "value": 10})))
            .await
            .unwrap();
    }
    for name in ["gvisor", "runc"] {
        Api::<RuntimeClass>::all(cluster.admin.clone())
            .create(
                &pp,
                &from(json!({"metadata": {"name": name}, "handler": name})),
            )
            .await
            .unwrap();
    }
    let pod = |name: &str, spec: Value| -> Pod {
        let mut full = json!({"containers": [{"name": "app", "image": "app:1"}]});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        from(json!({"metadata": {"name": name}, "spec": full}))
    };
    let pods: Api<Pod> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let defaulted = pods
        .create(&pp, &pod("defaulted", json!({})))
        .await
        .expect("a pod with no classes");
    let spec = defaulted.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("low"));
    // The Priority admission plugin computed the value from the injected class.
    assert_eq!(spec.priority, Some(10));
    assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(
        spec.node_selector.unwrap(),
        [("pool".to_owned(), "acme".to_owned())].into()
    );
    let chosen = pods
        .create(
            &pp,
            &pod(
                "chosen",
                json!({"priorityClassName": "high", "nodeSelector": {"zone": "a"}}),
            ),
        )
        .await
        .expect("an allowed priority class");
    let spec = chosen.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
    assert_eq!(spec.node_selector.unwrap().len(), 2);
    assert_refused(
        pods.create(&pp, &pod("runc", json!({"runtimeClassName": "runc"})))
            .await,
        BY_RESOURCES,
        "Tenant acme does not allow Runtime class \"runc\"",
    );
    assert_refused(
        pods.create(&pp, &pod("prio", json!({"priorityClassName": "forbidden"})))
            .await,
        BY_RESOURCES,
        "does not allow Priority class \"forbidden\"",
    );
    assert_refused(
        pods.create(
            &pp,
            &pod("elsewhere", json!({"nodeSelector": {"pool": "shared"}})),
        )
        .await,
        BY_RESOURCES,
        "nodeSelector pool=\"acme\"",
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let claim = |name: &str, class: Option<&str>| -> PersistentVolumeClaim {
        from(json!({"metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": "1Gi"}}}}))
    };
    let stored = claims.create(&pp, &claim("data", None)).await.unwrap();
    assert_eq!(
        stored.spec.unwrap().storage_class_name.as_deref(),
        Some("standard")
    );
    assert_refused(
        claims.create(&pp, &claim("gold", Some("gold"))).await,
        BY_RESOURCES,
        "does not allow Storage class \"gold\"",
    );

    let ingresses: Api<Ingress> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let ingress = |name: &str, class: Option<&str>, annotation: Option<&str>| -> Ingress {
        let annotations = annotation
            .map(|a| json!({"kubernetes.io/ingress.class": a}))
            .unwrap_or(json!({}));
        from(
            json!({"metadata": {"name": name, "annotations": annotations}, "spec": {
            "ingressClassName": class,
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
        )
    };
    let stored = ingresses
        .create(&pp, &ingress("plain", None, None))
        .await
        .unwrap();
    assert_eq!(
        stored.spec.unwrap().ingress_class_name.as_deref(),
        Some("internal")
    );
    ingresses
        .create(&pp, &ingress("public", Some("public"), None))
        .await
        .expect("an allowed ingress class");
    assert_refused(
        ingresses
            .create(&pp, &ingress("legacy", None, Some("nginx")))
            .await,
        BY_RESOURCES,
        "does not allow Ingress class \"nginx\"",
    );
    assert_refused(
        ingresses
            .patch(
                "public",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"ingressClassName": "nginx"}})),
            )
            .await,
        BY_RESOURCES,
        "does not allow Ingress class \"nginx\"",
    );

    // Membership is the owner reference: acme-1 relabelled for evil by an admin is
    // still acme's, with acme's rules.
    let relabel =
        |tenant: &str| Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: tenant}}}));
    let as_platform: Api<Namespace> = Api::all(cluster.platform.clone());
    as_platform
        .patch("acme-1", &PatchParams::default(), &relabel("evil"))
        .await
        .expect("an admin relabels");
    assert_refused(
        pods.create(&pp, &pod("runc", json!({"runtimeClassName": "runc"})))
            .await,
        BY_RESOURCES,
        "Tenant acme does not allow Runtime class \"runc\"",
    );
    as_platform
        .patch("acme-1", &PatchParams::default(), &relabel("acme"))
        .await
        .unwrap();

    // A tenant without rules (evil) restricts nothing, and a namespace that only
    // carries acme's label, without acme's owner reference, is not acme's.
    Api::<Namespace>::all(cluster.platform.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "label-only", "labels": {TENANT_LABEL: "acme"}}})),
        )
        .await
        .expect("an admin's labelled namespace");
    for (namespace, client) in [("evil-1", &cluster.mallory), ("label-only", &cluster.admin)] {
        let created = Api::<Pod>::namespaced(client.clone(), namespace)
            .create(&pp, &pod("free", json!({"runtimeClassName": "runc"})))
            .await
            .unwrap_or_else(|err| panic!("{namespace}: {err:?}"));
        let spec = created.spec.unwrap();
        assert_eq!(spec.runtime_class_name.as_deref(), Some("runc"));
        assert!(
            spec.node_selector.unwrap_or_default().is_empty(),
            "{namespace}"
        );
    }
}

async fn a_cordoned_tenant_refuses_writes_but_not_admins(cluster: &Cluster) {
    let tenants: Api<Tenant> = Api::all(cluster.admin.clone());
    let cordon = |on: bool| Patch::Merge(json!({"spec": {"cordoned": on}}));
    tenants
        .patch("acme", &PatchParams::default(), &cordon(true))
        .await
        .unwrap();
    let configmap = |name: &str| -> ConfigMap { from(json!({"metadata": {"name": name}})) };
    let pp = PostParams::default();
    let alices: Api<ConfigMap> = Api::namespaced(cluster.alice.clone(), "acme-1");
    let cordoned = "Tenant acme is cordoned";
    assert_refused(
        alices.create(&pp, &configmap("c1")).await,
        BY_RESOURCES,
        cordoned,
    );
    assert_refused(
        Api::<Pod>::namespaced(cluster.alice.clone(), "acme-1")
            .delete("defaulted", &DeleteParams::default())
            .await,
        BY_RESOURCES,
        cordoned,
    );
    // Nor can the owner open a new namespace in it (refused before the quota is
    // even looked at).
    assert_refused(
        create_namespace(
            &cluster.alice,
            json!({"metadata": {"name": "acme-cordoned"}}),
        )
        .await,
        BY_NAMESPACES,
        cordoned,
    );
    // Nor get into a Pod or evict one.
    assert_refused(
        exec(&cluster.alice, "acme-1", "defaulted").await,
        BY_RESOURCES,
        cordoned,
    );
    assert_refused(
        Api::<Pod>::namespaced(cluster.alice.clone(), "acme-1")
            .evict("defaulted", &EvictParams::default())
            .await,
        BY_RESOURCES,
        cordoned,
    );
    // Nor change or delete one of its namespaces (cluster-scoped, so not seen by
    // the in-namespace webhook).
    let alices_namespaces: Api<Namespace> = Api::all(cluster.alice.clone());
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"team": "x"}}}));
    assert_refused(
        alices_namespaces
            .patch("acme-1", &PatchParams::default(), &relabel)
            .await,
        BY_TENANT_NAMESPACES,
        cordoned,
    );
    let dry_run_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    assert_refused(
        alices_namespaces
            .delete("acme-1", &DeleteParams::default())
            .await,
        BY_NAMESPACE_DELETION,
        cordoned,
    );
    // Admins (tenantplane's controller, the platform group) keep working.
    for (who, client) in [
        ("controller", &cluster.controller),
        ("platform", &cluster.platform),
    ] {
        Api::<ConfigMap>::namespaced(client.clone(), "acme-1")
            .create(&pp, &configmap(&format!("by-{who}")))
            .await
            .expect("an admin's write in a cordoned tenant");
        Api::<Namespace>::all(client.clone())
            .delete("acme-1", &dry_run_delete)
            .await
            .expect("an admin's (dry-run) deletion of a cordoned tenant's namespace");
    }
    // Other tenants are not cordoned.
    Api::<ConfigMap>::namespaced(cluster.mallory.clone(), "evil-1")
        .create(&pp, &configmap("c1"))
        .await
        .expect("evil is not cordoned");
    tenants
        .patch("acme", &PatchParams::default(), &cordon(false))
        .await
        .unwrap();
    alices
        .create(&pp, &configmap("c1"))
        .await
        .expect("uncordoned");
    alices_namespaces
        .delete("acme-1", &dry_run_delete)
        .await
        .expect("an uncordoned tenant's owner may delete its namespace (dry run)");
    // The webhook lets the exec through; the API server then fails it for want of
    // a node (no kubelet here), which is not the webhook's answer.
    match exec(&cluster.alice, "acme-1", "defaulted").await {
        Err(kube::Error::Api(status)) => {
            assert!(!status.message.contains("tenantplane"), "{status:?}")
        }
        other => panic!("an exec into an unscheduled Pod cannot succeed: {other:?}"),
    }
}

/// `POST pods/NAME/exec` without an upgrade: admission runs first, so a refusal
/// comes back as a plain API error.
async fn exec(client: &Client, namespace: &str, pod: &str) -> Result<String, kube::Error> {
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/exec?command=true&stdout=true"
    ))
    .body(Vec::new())
    .unwrap();
    client.request_text(request).await
}

async fn prevent_deletion_keeps_a_tenant(cluster: &Cluster) {
    let as_mallory: Api<Tenant> = Api::all(cluster.mallory.clone());
    let as_admin: Api<Tenant> = Api::all(cluster.admin.clone());
    let dp = DeleteParams::default();
    until_refused(BY_VALIDATE, || {
        let api = as_admin.clone();
        async move {
            let dry_run = DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            };
            api.delete("evil", &dry_run).await
        }
    })
    .await;
    for tenants in [&as_mallory, &as_admin] {
        assert_refused(
            tenants.delete("evil", &dp).await,
            BY_VALIDATE,
            "Tenant evil has spec.preventDeletion",
        );
    }
    assert!(as_admin.get_opt("evil").await.unwrap().is_some());
    as_admin
        .patch(
            "evil",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"preventDeletion": false}})),
        )
        .await
        .unwrap();
    as_mallory
        .delete("evil", &dp)
        .await
        .expect("deletion once allowed");
    // `full` never prevented deletion.
    as_mallory
        .delete("full", &dp)
        .await
        .expect("an unprotected Tenant is deleted");
}
