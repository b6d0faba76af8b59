//! The namespace-tenant rules behind a real kube-apiserver, acting as different
//! users whose RBAC alone would allow every hijack below: only the webhooks stop
//! them. Namespaces cannot be moved, claimed, stripped or forged through PUT, merge
//! patch, JSON patch, server-side apply, `status` or `finalize`; an admin adoption
//! respects the quota; classes and node selectors are defaulted and restricted in
//! tenant namespaces (membership proven by owner-reference UID, not the label); a
//! cordoned tenant refuses writes except by admins; a Tenant with preventDeletion
//! is not deleted; and a down webhook blocks nothing in system namespaces.
//!
//! Every test is on its own and may run in parallel with the others: one control
//! plane serves the whole binary ([`shared`]), and each test has its own copy of the
//! tenants, their owners and first namespaces ([`Cluster`]).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};
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
    Admins, Error, WebhookClient, namespace_webhook_configuration, router_with_tenancy,
    serve_router, tls_config, webhook_configuration,
};
use tenantplane_api::Tenant;
use tenantplane_testenv::{ApiServer, ApiServerOptions, TestEnv, TestUser};
use tokio::net::TcpListener;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, mpsc, oneshot};
use tokio::task::JoinHandle;

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
/// Each test's tenants and users are named after its scenario (see [`Cluster`]).
const SCENARIOS: [&str; 7] = [
    "hijack", "create", "quota", "classes", "cordon", "delete", "down",
];
/// The admins (see `control_plane`), who own no Tenant.
const PLATFORM: &str = "pat";
const CONTROLLER: &str = "tenantplane-controller";
/// A user who owns no Tenant, whose refusals show that the webhooks answer.
const PROBE: &str = "prober";

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

/// `name` in `scenario`: its Tenants, their owners and namespaces.
fn named(scenario: &str, name: &str) -> String {
    format!("{scenario}-{name}")
}

/// The admins, and each scenario's owners: alice (acme), mallory (evil), carol (full).
fn users() -> Vec<TestUser> {
    let mut users = vec![
        TestUser::new(PLATFORM, &["platform"]),
        TestUser::new(CONTROLLER, &[]),
        TestUser::new(PROBE, &[]),
    ];
    for scenario in SCENARIOS {
        users.push(TestUser::new(&named(scenario, "alice"), &["devs"]));
        users.push(TestUser::new(&named(scenario, "mallory"), &[]));
        users.push(TestUser::new(&named(scenario, "carol"), &[]));
    }
    users
}

/// The control plane every test of this binary shares, started by the first test
/// that asks. etcd and the API server are here (nothing in them belongs to a Tokio
/// runtime); the webhook and its client are served by a thread with its own runtime,
/// since each test's runtime ends with the test. Nothing here ever drops: the
/// processes die with the test binary (`PR_SET_PDEATHSIG`) and their directory is
/// removed after it exits (`TestEnv::remove_dir_at_exit`).
struct Shared {
    _env: TestEnv,
    server: ApiServer,
    webhook: Webhook,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let (started, starting) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("control-plane".into())
                .spawn(move || {
                    tokio::runtime::Builder::new_multi_thread()
                        .enable_all()
                        .build()
                        .expect("the control plane's runtime")
                        .block_on(control_plane(started));
                })
                .expect("the control plane's thread");
            // Its panic, if it has one, is in the output of the test that started it.
            starting
                .recv()
                .map_err(|_| "the control plane did not start".to_owned())
        })
        .as_ref()
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Starts the control plane, hands it over through `started`, then serves the
/// webhook, and stops and restarts it when told, until the process exits.
async fn control_plane(started: std::sync::mpsc::Sender<Shared>) {
    let env = TestEnv::start_shared().await.expect("etcd");
    env.remove_dir_at_exit()
        .expect("the directory is removed at exit");
    let mut options = ApiServerOptions::new("host");
    options.users = users();
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let admin = server.client().await.expect("admin client");
    server
        .install_crds(tenantplane_api::crds())
        .await
        .expect("CRDs");
    grant_everything(&admin).await;
    create_classes(&admin).await;

    // Both webhooks, with the admin client, over TLS on a free loopback port.
    let cert = env.ca().issue(&["127.0.0.1"]).expect("serving certificate");
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).expect("TLS");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let base = format!("https://127.0.0.1:{}", address.port());
    let admins = Admins {
        groups: vec!["platform".into()],
        users: vec![CONTROLLER.into()],
    };
    let app = router_with_tenancy(admin.clone(), admins);
    let mut serving = Some(serve(listener, &tls, &app));
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
    let probe = server.client_as(PROBE).await.unwrap();
    webhooks_answer(&probe).await;

    let (control, mut commands) = mpsc::unbounded_channel();
    let webhook = Webhook {
        control,
        up: Arc::new(RwLock::new(())),
    };
    let shared = Shared {
        _env: env,
        server,
        webhook,
    };
    if started.send(shared).is_err() {
        return;
    }
    // The `static` holds the sender: this serves until the process exits.
    while let Some(command) = commands.recv().await {
        match command {
            Control::Stop(answer) => {
                let (stop, task) = serving.take().expect("the webhook is serving");
                stop.send(()).unwrap();
                answer.send(tokio::time::timeout(DEADLINE, task).await).ok();
            }
            Control::Start(alone) => {
                let listener = TcpListener::bind(address)
                    .await
                    .expect("the webhook's address again");
                serving = Some(serve(listener, &tls, &app));
                webhooks_answer(&probe).await;
                drop(alone);
            }
        }
    }
}

/// Serves both webhooks on `listener` until the sender fires.
fn serve(
    listener: TcpListener,
    tls: &Arc<rustls::ServerConfig>,
    app: &axum::Router,
) -> (oneshot::Sender<()>, JoinHandle<Result<(), Error>>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_router(
        listener,
        Arc::clone(tls),
        app.clone(),
        async move {
            stopped.await.ok();
        },
    ));
    (stop, task)
}

/// Returns once the API server has the namespace webhooks and they answer (it loads
/// webhook configurations asynchronously).
async fn webhooks_answer(client: &Client) {
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    until_refused(BY_TENANT_NAMESPACES, || {
        let (api, dry_run) = (namespaces.clone(), dry_run.clone());
        async move {
            let claim = Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: "evil"}}}));
            api.patch("kube-system", &dry_run, &claim).await
        }
    })
    .await;
}

/// How the webhook's server task ended: within the deadline, without a panic,
/// without an error.
type Stopped =
    Result<Result<Result<(), Error>, tokio::task::JoinError>, tokio::time::error::Elapsed>;

enum Control {
    Stop(oneshot::Sender<Stopped>),
    /// Serve again at the same address; release `alone` once the webhooks answer.
    Start(OwnedRwLockWriteGuard<()>),
}

/// The webhook's controls, for the one test that stops it.
struct Webhook {
    control: mpsc::UnboundedSender<Control>,
    /// Read by every test while it runs, written by the test that stops the webhook:
    /// it runs alone.
    up: Arc<RwLock<()>>,
}

impl Webhook {
    /// Stops the webhook, which serves again once [`Restart`] drops (also when the
    /// test fails).
    async fn stop(&self, alone: OwnedRwLockWriteGuard<()>) -> (Stopped, Restart) {
        let restart = Restart {
            alone: Some(alone),
            control: self.control.clone(),
        };
        let (answer, stopped) = oneshot::channel();
        self.control.send(Control::Stop(answer)).unwrap();
        (stopped.await.expect("the control plane answers"), restart)
    }
}

struct Restart {
    alone: Option<OwnedRwLockWriteGuard<()>>,
    control: mpsc::UnboundedSender<Control>,
}

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(alone) = self.alone.take() {
            // Only fails if the control plane's thread is gone: the lock is released.
            self.control.send(Control::Start(alone)).ok();
        }
    }
}

/// One test's clients and Tenants: acme (owned by alice, with a quota of 3 and
/// class and node rules), evil (owned by mallory, with preventDeletion) and full
/// (owned by carol, with a quota of 1), each with its owner's first namespace
/// (`acme-1`, `evil-1`, `full-1`), all named after the test's scenario.
struct Cluster {
    scenario: &'static str,
    admin: Client,
    alice: Client,
    mallory: Client,
    carol: Client,
    platform: Client,
    controller: Client,
    acme: Tenant,
    evil: Tenant,
    full: Tenant,
    /// The webhook stays up while the test runs.
    _up: Option<OwnedRwLockReadGuard<()>>,
}

impl Cluster {
    async fn new(scenario: &'static str) -> Self {
        let up = shared().webhook.up.clone().read_owned().await;
        Self {
            _up: Some(up),
            ..Self::while_held(scenario).await
        }
    }

    /// [`Cluster::new`] for a test that holds the webhook's lock itself.
    async fn while_held(scenario: &'static str) -> Self {
        assert!(SCENARIOS.contains(&scenario), "{scenario} has no users");
        let server = &shared().server;
        let name = |name: &str| named(scenario, name);
        let admin = server.client().await.expect("admin client");
        // The three at once, then their namespaces at once: the tests wait for this.
        let tenants = [name("acme"), name("evil"), name("full")];
        let (acme, evil, full) = tokio::join!(
            create_tenant(
                &admin,
                &tenants[0],
                json!({"owners": [{"kind": "User", "name": name("alice")}],
                       "namespaceOptions": {"quota": 3},
                       "storageClasses": {"allowed": ["fast"], "default": "standard"},
                       "priorityClasses": {"allowed": ["high"], "default": "low"},
                       "runtimeClasses": {"allowed": [], "default": "gvisor"},
                       "ingressClasses": {"allowed": ["public"], "default": "internal"},
                       "nodeSelector": {"pool": "acme"}}),
            ),
            create_tenant(
                &admin,
                &tenants[1],
                json!({"owners": [{"kind": "User", "name": name("mallory")}], "preventDeletion": true}),
            ),
            create_tenant(
                &admin,
                &tenants[2],
                json!({"owners": [{"kind": "User", "name": name("carol")}], "namespaceOptions": {"quota": 1}}),
            ),
        );
        let cluster = Self {
            scenario,
            alice: server.client_as(&name("alice")).await.unwrap(),
            mallory: server.client_as(&name("mallory")).await.unwrap(),
            carol: server.client_as(&name("carol")).await.unwrap(),
            platform: server.client_as(PLATFORM).await.unwrap(),
            controller: server.client_as(CONTROLLER).await.unwrap(),
            admin,
            acme,
            evil,
            full,
            _up: None,
        };
        // Each tenant's owner creates a member namespace.
        let member = |owner: &Client, namespace: &str| {
            let (owner, namespace) = (owner.clone(), name(namespace));
            async move {
                create_namespace(&owner, json!({"metadata": {"name": namespace}}))
                    .await
                    .unwrap_or_else(|err| panic!("{namespace}: {err:?}"));
            }
        };
        tokio::join!(
            member(&cluster.alice, "acme-1"),
            member(&cluster.mallory, "evil-1"),
            member(&cluster.carol, "full-1"),
        );
        cluster
    }

    /// `name` in this test's scenario.
    fn named(&self, name: &str) -> String {
        named(self.scenario, name)
    }
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
    let subjects: Vec<Value> = users()
        .iter()
        .map(|user| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}))
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

/// The PriorityClasses and RuntimeClasses acme's rules name (and some they do not).
async fn create_classes(admin: &Client) {
    let pp = PostParams::default();
    for name in ["low", "high", "forbidden"] {
        Api::<PriorityClass>::all(admin.clone())
            .create(&pp, &from(json!({"metadata": {"name": name}, "value": 10})))
            .await
            .unwrap();
    }
    for name in ["gvisor", "runc"] {
        Api::<RuntimeClass>::all(admin.clone())
            .create(
                &pp,
                &from(json!({"metadata": {"name": name}, "handler": name})),
            )
            .await
            .unwrap();
    }
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

/// A Pod with one container and `spec`.
fn pod(name: &str, spec: Value) -> Pod {
    let mut full = json!({"containers": [{"name": "app", "image": "app:1"}]});
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    from(json!({"metadata": {"name": name}, "spec": full}))
}

fn configmap(name: &str) -> ConfigMap {
    from(json!({"metadata": {"name": name}}))
}

/// Down: system namespaces are unaffected (the in-namespace webhook never matches
/// them), tenant namespaces fail closed.
#[tokio::test]
async fn a_down_webhook_blocks_tenant_namespaces_only() {
    let shared = shared();
    // No other test runs while the webhook is down.
    let alone = shared.webhook.up.clone().write_owned().await;
    let cluster = Cluster::while_held("down").await;
    let (stopped, _restart) = shared.webhook.stop(alone).await;
    stopped
        .expect("the webhook stops within the deadline")
        .expect("the webhook task")
        .expect("the webhook shut down cleanly");
    for namespace in ["kube-system", "kube-public", "kube-node-lease", "default"] {
        Api::<ConfigMap>::namespaced(cluster.admin.clone(), namespace)
            .create(&PostParams::default(), &configmap("while-down"))
            .await
            .unwrap_or_else(|err| panic!("{namespace} blocked by a down webhook: {err:?}"));
    }
    let blocked = Api::<ConfigMap>::namespaced(cluster.alice.clone(), &cluster.named("acme-1"))
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

#[tokio::test]
async fn hijacks_through_every_update_path_are_refused() {
    let cluster = Cluster::new("hijack").await;
    let (acme, evil) = (cluster.named("acme"), cluster.named("evil"));
    let (acme_1, evil_1) = (cluster.named("acme-1"), cluster.named("evil-1"));
    let namespaces: Api<Namespace> = Api::all(cluster.mallory.clone());
    let pp = PatchParams::default();
    let all: Api<Namespace> = Api::all(cluster.admin.clone());
    let before: Vec<(String, Identity)> = {
        let mut out = Vec::new();
        for name in ["kube-system", "kube-public", &acme_1, &evil_1] {
            out.push((name.to_owned(), identity(&all.get(name).await.unwrap())));
        }
        out
    };
    let evil_ref = tenant_reference(&cluster.evil);
    let evil_1_uid = all.get(&evil_1).await.unwrap().metadata.uid;
    let owned_by_evil_1 = json!({"apiVersion": "v1", "kind": "Namespace",
        "name": evil_1, "uid": evil_1_uid});
    let mut forged = evil_ref.clone();
    forged["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let apply = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "kube-system", "ownerReferences": [evil_ref.clone()],
                     "labels": {TENANT_LABEL: evil}}});
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
            json!({"metadata": {"labels": {TENANT_LABEL: acme}}}),
            ONLY_ADMIN_LABEL,
        ),
        // Moving acme-1 into evil.
        (
            acme_1.as_str(),
            Via::Merge,
            json!({"metadata": {"ownerReferences": [evil_ref.clone()], "labels": {TENANT_LABEL: evil}}}),
            ONLY_ADMIN_REFS,
        ),
        // Escaping from evil: stripping the reference or the label; a forged UID.
        (
            evil_1.as_str(),
            Via::Json,
            json!([{"op": "remove", "path": "/metadata/ownerReferences"}]),
            ONLY_ADMIN_REFS,
        ),
        (
            evil_1.as_str(),
            Via::Json,
            json!([{"op": "remove", "path": "/metadata/labels/tenantplane.io~1tenant"}]),
            ONLY_ADMIN_LABEL,
        ),
        (
            evil_1.as_str(),
            Via::Merge,
            json!({"metadata": {"ownerReferences": [forged]}}),
            ONLY_ADMIN_REFS,
        ),
        // The status subresource rewrites metadata too.
        (
            acme_1.as_str(),
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
    let mut escaped = namespaces.get(&evil_1).await.unwrap();
    escaped.metadata.owner_references = None;
    assert_refused(
        namespaces
            .replace_subresource("finalize", &evil_1, &PostParams::default(), &escaped)
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
            evil_1.as_str(),
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"team": "red"}}})),
        )
        .await
        .expect("an ordinary label change");
    assert_eq!(relabelled.metadata.labels.unwrap()["team"], "red");
}

#[tokio::test]
async fn namespace_creations_cannot_name_another_tenant() {
    let cluster = Cluster::new("create").await;
    let (acme, evil) = (cluster.named("acme"), cluster.named("evil"));
    // A tenant owner cannot create a namespace straight into someone else's tenant,
    // nor can a user who owns no Tenant (the platform user is an admin; carol owns
    // `full`, so mallory it is, naming acme).
    let acme_ref = tenant_reference(&cluster.acme);
    assert_refused(
        create_namespace(
            &cluster.mallory,
            json!({"metadata": {"name": cluster.named("evil-sneaky"), "ownerReferences": [acme_ref]}}),
        )
        .await,
        BY_NAMESPACES,
        &format!(
            "may carry only the Tenant owner reference and tenantplane.io/tenant label of the tenant it joins (Tenant {evil})"
        ),
    );
    assert_refused(
        create_namespace(
            &cluster.mallory,
            json!({"metadata": {"name": cluster.named("evil-labelled"), "labels": {TENANT_LABEL: acme}}}),
        )
        .await,
        BY_TENANT_NAMESPACES,
        &format!("label tenantplane.io/tenant={acme}"),
    );
}

#[tokio::test]
async fn admin_adoptions_respect_the_quota() {
    let cluster = Cluster::new("quota").await;
    let (acme, full) = (cluster.named("acme"), cluster.named("full"));
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
                &adopt(full_ref.clone(), &full),
            )
            .await,
        BY_TENANT_NAMESPACES,
        &format!("Tenant {full} may have at most 1 namespaces and has 1"),
    );
    assert_refused(
        create_namespace(
            &cluster.platform,
            json!({"metadata": {"name": cluster.named("full-2"), "ownerReferences": [full_ref]}}),
        )
        .await,
        BY_NAMESPACES,
        &format!("Tenant {full} may have at most 1 namespaces"),
    );
    // An admin's namespace created with only acme's owner reference is labelled for
    // acme and takes a slot (acme: acme-1, then this one).
    let created = create_namespace(
        &cluster.platform,
        json!({"metadata": {"name": "by-admin", "ownerReferences": [tenant_reference(&cluster.acme)]}}),
    )
    .await
    .expect("an admin's namespace in a tenant with room");
    assert_eq!(identity(&created).1.as_deref(), Some(acme.as_str()));
    // acme has room for one more: the adoption is admitted and takes a slot.
    let adopted = namespaces
        .patch(
            "loose",
            &PatchParams::default(),
            &adopt(tenant_reference(&cluster.acme), &acme),
        )
        .await
        .expect("adoption into a tenant with room");
    assert_eq!(identity(&adopted).1.as_deref(), Some(acme.as_str()));
    let stored = Api::<Tenant>::all(cluster.admin.clone())
        .get(&acme)
        .await
        .unwrap();
    let reserved: Vec<String> = stored
        .status
        .unwrap_or_default()
        .reservations
        .into_iter()
        .map(|r| r.namespace)
        .collect();
    assert!(reserved.contains(&"loose".to_owned()), "{reserved:?}");
    // acme is now full (quota 3): its owner's next namespace is refused.
    assert_refused(
        create_namespace(
            &cluster.alice,
            json!({"metadata": {"name": cluster.named("acme-4")}}),
        )
        .await,
        BY_NAMESPACES,
        &format!("Tenant {acme} may have at most 3 namespaces and has 3"),
    );
}

#[tokio::test]
async fn classes_and_node_selectors_in_tenant_namespaces() {
    let cluster = Cluster::new("classes").await;
    let (acme, evil) = (cluster.named("acme"), cluster.named("evil"));
    let (acme_1, evil_1) = (cluster.named("acme-1"), cluster.named("evil-1"));
    // The PriorityClasses and RuntimeClasses are the shared control plane's.
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(cluster.alice.clone(), &acme_1);
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
        &format!("Tenant {acme} does not allow Runtime class \"runc\""),
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

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.alice.clone(), &acme_1);
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

    let ingresses: Api<Ingress> = Api::namespaced(cluster.alice.clone(), &acme_1);
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
        .patch(&acme_1, &PatchParams::default(), &relabel(&evil))
        .await
        .expect("an admin relabels");
    assert_refused(
        pods.create(&pp, &pod("runc", json!({"runtimeClassName": "runc"})))
            .await,
        BY_RESOURCES,
        &format!("Tenant {acme} does not allow Runtime class \"runc\""),
    );
    as_platform
        .patch(&acme_1, &PatchParams::default(), &relabel(&acme))
        .await
        .unwrap();

    // A tenant without rules (evil) restricts nothing, and a namespace that only
    // carries acme's label, without acme's owner reference, is not acme's.
    Api::<Namespace>::all(cluster.platform.clone())
        .create(
            &pp,
            &from(json!({"metadata": {"name": "label-only", "labels": {TENANT_LABEL: acme}}})),
        )
        .await
        .expect("an admin's labelled namespace");
    for (namespace, client) in [
        (evil_1.as_str(), &cluster.mallory),
        ("label-only", &cluster.admin),
    ] {
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

#[tokio::test]
async fn a_cordoned_tenant_refuses_writes_but_not_admins() {
    let cluster = Cluster::new("cordon").await;
    let (acme, acme_1) = (cluster.named("acme"), cluster.named("acme-1"));
    let pp = PostParams::default();
    // Before the cordon: a Pod, and acme at its quota of 3 (acme-1 and two more).
    Api::<Pod>::namespaced(cluster.alice.clone(), &acme_1)
        .create(&pp, &pod("defaulted", json!({})))
        .await
        .expect("a pod with no classes");
    for namespace in ["acme-2", "acme-3"] {
        create_namespace(
            &cluster.alice,
            json!({"metadata": {"name": cluster.named(namespace)}}),
        )
        .await
        .unwrap_or_else(|err| panic!("{namespace}: {err:?}"));
    }
    let tenants: Api<Tenant> = Api::all(cluster.admin.clone());
    let cordon = |on: bool| Patch::Merge(json!({"spec": {"cordoned": on}}));
    tenants
        .patch(&acme, &PatchParams::default(), &cordon(true))
        .await
        .unwrap();
    let alices: Api<ConfigMap> = Api::namespaced(cluster.alice.clone(), &acme_1);
    let cordoned = &format!("Tenant {acme} is cordoned");
    assert_refused(
        alices.create(&pp, &configmap("c1")).await,
        BY_RESOURCES,
        cordoned,
    );
    assert_refused(
        Api::<Pod>::namespaced(cluster.alice.clone(), &acme_1)
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
            json!({"metadata": {"name": cluster.named("acme-cordoned")}}),
        )
        .await,
        BY_NAMESPACES,
        cordoned,
    );
    // Nor get into a Pod or evict one.
    assert_refused(
        exec(&cluster.alice, &acme_1, "defaulted").await,
        BY_RESOURCES,
        cordoned,
    );
    assert_refused(
        Api::<Pod>::namespaced(cluster.alice.clone(), &acme_1)
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
            .patch(&acme_1, &PatchParams::default(), &relabel)
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
            .delete(&acme_1, &DeleteParams::default())
            .await,
        BY_NAMESPACE_DELETION,
        cordoned,
    );
    // Admins (tenantplane's controller, the platform group) keep working.
    for (who, client) in [
        ("controller", &cluster.controller),
        ("platform", &cluster.platform),
    ] {
        Api::<ConfigMap>::namespaced(client.clone(), &acme_1)
            .create(&pp, &configmap(&format!("by-{who}")))
            .await
            .expect("an admin's write in a cordoned tenant");
        Api::<Namespace>::all(client.clone())
            .delete(&acme_1, &dry_run_delete)
            .await
            .expect("an admin's (dry-run) deletion of a cordoned tenant's namespace");
    }
    // Other tenants are not cordoned.
    Api::<ConfigMap>::namespaced(cluster.mallory.clone(), &cluster.named("evil-1"))
        .create(&pp, &configmap("c1"))
        .await
        .expect("evil is not cordoned");
    tenants
        .patch(&acme, &PatchParams::default(), &cordon(false))
        .await
        .unwrap();
    alices
        .create(&pp, &configmap("c1"))
        .await
        .expect("uncordoned");
    alices_namespaces
        .delete(&acme_1, &dry_run_delete)
        .await
        .expect("an uncordoned tenant's owner may delete its namespace (dry run)");
    // The webhook lets the exec through; the API server then fails it for want of
    // a node (no kubelet here), which is not the webhook's answer.
    match exec(&cluster.alice, &acme_1, "defaulted").await {
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

#[tokio::test]
async fn prevent_deletion_keeps_a_tenant() {
    let cluster = Cluster::new("delete").await;
    let (evil, full) = (cluster.named("evil"), cluster.named("full"));
    let as_mallory: Api<Tenant> = Api::all(cluster.mallory.clone());
    let as_admin: Api<Tenant> = Api::all(cluster.admin.clone());
    let dp = DeleteParams::default();
    until_refused(BY_VALIDATE, || {
        let (api, evil) = (as_admin.clone(), evil.clone());
        async move {
            let dry_run = DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            };
            api.delete(&evil, &dry_run).await
        }
    })
    .await;
    for tenants in [&as_mallory, &as_admin] {
        assert_refused(
            tenants.delete(&evil, &dp).await,
            BY_VALIDATE,
            &format!("Tenant {evil} has spec.preventDeletion"),
        );
    }
    assert!(as_admin.get_opt(&evil).await.unwrap().is_some());
    as_admin
        .patch(
            &evil,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"preventDeletion": false}})),
        )
        .await
        .unwrap();
    as_mallory
        .delete(&evil, &dp)
        .await
        .expect("deletion once allowed");
    // `full` never prevented deletion.
    as_mallory
        .delete(&full, &dp)
        .await
        .expect("an unprotected Tenant is deleted");
}
