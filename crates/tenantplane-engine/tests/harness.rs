//! Two real API servers (host and tenant), tenantplane's CRDs on the host, and the
//! controller running in-process against them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_engine::controller::{self, ControllerConfig};
use tenantplane_engine::decisions::TenantDecision;
use tenantplane_engine::metrics::Metrics;
use tenantplane_engine::tenant_dns::DnsDeployment;
use tenantplane_testenv::poll::Attempt;
use tenantplane_testenv::{ApiServer, ApiServerOptions, PooledServer, ServerPool, TestEnv};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub const DEADLINE: Duration = Duration::from_secs(30);
pub const HOST_NS: &str = "team-dev";

/// Polls `check` until it settles (see [`tenantplane_testenv::poll`]), failing the
/// test at [`DEADLINE`].
pub async fn eventually<A, F, Fut>(what: &str, check: F) -> A::Output
where
    A: Attempt,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = A>,
{
    tenantplane_testenv::eventually(what, DEADLINE, check).await
}

/// [`eventually`] with a deadline of its own, for what waits on a known longer
/// interval (such as a controller requeue).
pub async fn eventually_within<A, F, Fut>(what: &str, deadline: Duration, check: F) -> A::Output
where
    A: Attempt,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = A>,
{
    tenantplane_testenv::eventually(what, deadline, check).await
}

pub struct Controller {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    pub decisions: broadcast::Receiver<TenantDecision>,
    pub metrics: Arc<Metrics>,
}

/// How long a tenant object being deleted waits for an unreachable host in tests.
pub const HOST_UNREACHABLE_RELEASE: std::time::Duration = std::time::Duration::from_secs(2);

impl Controller {
    pub async fn start(host: &Client) -> Controller {
        Self::start_scoped(host, None, None, None).await
    }

    /// With tenant Nodes advertising `kubelet_endpoint` (when there is one).
    pub async fn start_with_kubelet_endpoint(
        host: &Client,
        kubelet_endpoint: Option<tenantplane_core::pods::KubeletEndpoint>,
    ) -> Controller {
        Self::start_scoped(host, None, kubelet_endpoint, None).await
    }

    /// For `h`'s TenantClusters only: on a shared host, those of its namespace.
    pub async fn start_for(h: &Harness) -> Controller {
        Self::start_scoped(&h.host, None, None, h.scope()).await
    }

    /// [`Controller::start_for`] with a DNS server per TenantCluster (its Deployment
    /// never runs: no kubelet).
    pub async fn start_for_with_dns(h: &Harness, dns: DnsDeployment) -> Controller {
        Self::start_scoped(&h.host, Some(dns), None, h.scope()).await
    }

    async fn start_scoped(
        host: &Client,
        dns: Option<DnsDeployment>,
        kubelet_endpoint: Option<tenantplane_core::pods::KubeletEndpoint>,
        namespace: Option<String>,
    ) -> Controller {
        // Logs only when asked for: RUST_LOG=tenantplane_engine=debug cargo test ...
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let (tx, rx) = broadcast::channel(100_000);
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(Metrics::unregistered());
        let config = ControllerConfig {
            host: host.clone(),
            metrics: Arc::clone(&metrics),
            decisions: tx,
            instance: "test".into(),
            workers: 8,
            // Short, so tests of a host that does not answer finish quickly.
            host_unreachable_release: HOST_UNREACHABLE_RELEASE,
            service_cidr: tenantplane_engine::provision::DEFAULT_SERVICE_CIDR.into(),
            dns,
            kubelet_endpoint,
            tenant_webhook: None,
            shards: None,
            namespace,
        };
        let task = tokio::spawn(controller::run(config, shutdown.clone()));
        Controller {
            shutdown,
            task,
            decisions: rx,
            metrics,
        }
    }

    /// Waits until `n` more full passes (over all kinds of `tenant`) complete.
    pub async fn wait_passes(&self, tenant: &str, n: u64) {
        let start = self.metrics.passes_of(tenant);
        eventually(&format!("{n} passes of {tenant}"), || async move {
            (self.metrics.passes_of(tenant) >= start + n).then_some(())
        })
        .await;
    }

    /// Whether the controller task is still running (it has not panicked or returned).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

pub struct Harness {
    pub env: TestEnv,
    pub host_server: HostServer,
    /// Lent by this binary's pool of tenant servers (see [`pooled_tenant`]), or the
    /// test's own.
    pub tenant_server: PooledServer,
    pub host: Client,
    pub tenant: Client,
    /// The host namespace of TenantCluster `dev`: [`HOST_NS`] on a host of the
    /// test's own, `team-dev-N` on the shared one.
    pub ns: String,
    /// Appended to the names of cluster-scoped objects the test makes (see
    /// [`Harness::named`]): empty on a host of the test's own.
    suffix: String,
}

/// The host API server of a [`Harness`]: the test's own, or the one every
/// [`Harness::start_on_shared_host`] of the test binary uses.
pub enum HostServer {
    Own(Box<PooledServer>),
    Shared(&'static ApiServer),
}

impl std::ops::Deref for HostServer {
    type Target = ApiServer;
    fn deref(&self) -> &ApiServer {
        match self {
            HostServer::Own(server) => server,
            HostServer::Shared(server) => server,
        }
    }
}

impl std::ops::DerefMut for HostServer {
    fn deref_mut(&mut self) -> &mut ApiServer {
        match self {
            HostServer::Own(server) => server,
            HostServer::Shared(_) => {
                panic!("a test that stops or restarts the host needs its own: Harness::start")
            }
        }
    }
}

/// The host API server the tests of this binary share, with the CRDs, profile
/// `fast` and policy `default`. Started by the first test that asks, on the
/// shared etcd; it never drops (its process dies with the test binary, and its
/// directory is removed after the binary exits).
pub fn shared_host() -> &'static ApiServer {
    struct SharedHost {
        _env: TestEnv,
        server: ApiServer,
    }
    static SHARED: OnceLock<Result<SharedHost, String>> = OnceLock::new();
    let start = || async {
        let env = TestEnv::start_shared().await.map_err(|e| e.to_string())?;
        env.remove_dir_at_exit().map_err(|e| e.to_string())?;
        let server = env
            .start_apiserver_with_crds("shared-host", host_crds())
            .await
            .map_err(|e| e.to_string())?;
        let host = server.client().await.map_err(|e| e.to_string())?;
        create(&host, profile("fast", 1000, 2000)).await;
        create(&host, policy("default", DEFAULT_KINDS, "2s")).await;
        Ok(SharedHost { _env: env, server })
    };
    // On a thread with a runtime of its own: the asking test's runtime ends with
    // that test.
    let shared = SHARED.get_or_init(|| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?
                        .block_on(start())
                })
                .join()
                .unwrap_or_else(|_| Err("starting the shared host panicked".into()))
        })
    });
    match shared {
        Ok(shared) => &shared.server,
        Err(err) => panic!("the shared host API server: {err}"),
    }
}

/// The tenant API servers this binary's tests hand on to each other: a test that
/// neither stops its tenant server nor panics returns it, and the next one gets it
/// reset to how it started (see [`ServerPool`]). Each test still counts the tenant's
/// requests from before and after, never from zero.
static TENANT_POOL: ServerPool = ServerPool::new();

/// The host API servers of the tests that have a host to themselves
/// ([`Harness::start`]), handed on as [`TENANT_POOL`]'s tenants are.
static HOST_POOL: ServerPool = ServerPool::new();

/// A host API server with [`host_crds`], from [`HOST_POOL`].
pub async fn pooled_host() -> PooledServer {
    let mut options = ApiServerOptions::new("host");
    options.crds = host_crds();
    HOST_POOL.take_with(options).await.expect("host")
}

/// A tenant API server with [`tenant_crds`], from [`TENANT_POOL`].
pub async fn pooled_tenant() -> PooledServer {
    let mut options = ApiServerOptions::new("tenant");
    options.crds = tenant_crds();
    TENANT_POOL.take_with(options).await.expect("tenant")
}

pub fn widget_crd(scope: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    }))
    .unwrap()
}

/// tenantplane's CRDs and the Widget, on the host.
pub fn host_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = tenantplane_api::crds();
    crds.push(widget_crd("Namespaced"));
    crds
}

/// The Widget, in the tenant.
pub fn tenant_crds() -> Vec<CustomResourceDefinition> {
    vec![widget_crd("Namespaced")]
}

pub async fn install_crds(client: &Client, crds: Vec<CustomResourceDefinition>) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &crds {
        api.create(&PostParams::default(), crd).await.expect("CRD");
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap();
        eventually(&format!("{name} established"), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
}

pub async fn create_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

pub fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

pub async fn create(client: &Client, object: Value) -> DynamicObject {
    let api_version = object["apiVersion"].as_str().unwrap().to_owned();
    let kind = object["kind"].as_str().unwrap().to_owned();
    let ns = object["metadata"]["namespace"].as_str().map(str::to_owned);
    let api = dynamic(client, &api_version, &kind, ns.as_deref());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("create {kind}: {e}"))
}

pub fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

/// Fast fairness so tests measure behaviour, not the rate limit.
pub fn profile(name: &str, qps: u32, burst: u32) -> Value {
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": name},
           "spec": {"level": "restricted", "controls": {"apiFairness": {"qps": qps, "burst": burst}}}})
}

pub fn policy(name: &str, kinds: &[(&str, &str)], interval: &str) -> Value {
    let resources: Vec<Value> = kinds
        .iter()
        .map(|(api_version, kind)| json!({"apiVersion": api_version, "kind": kind, "direction": "toHost"}))
        .collect();
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": name},
           "spec": {"driftDetection": {"enabled": true, "interval": interval}, "explain": {"recordDecisions": true, "retain": 50},
                    "resources": resources}})
}

pub fn tenant_cluster(name: &str, ns: &str, profile: &str, policy: &str, secret: &str) -> Value {
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster", "metadata": {"name": name, "namespace": ns},
           "spec": {"isolationProfileRef": {"name": profile}, "syncPolicyRef": {"name": policy},
                    "controlPlane": {"external": {"kubeconfigSecretRef": {"name": secret}}}}})
}

pub async fn kubeconfig_secret(host: &Client, ns: &str, name: &str, kubeconfig: &str) {
    let api: Api<Secret> = Api::namespaced(host.clone(), ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "kubeconfig".to_owned(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret)
        .await
        .expect("kubeconfig secret");
}

/// The host name the engine gives tenant object `ns/name` of `tenant`.
pub fn predicted(name: &str, ns: &str, tenant: &str) -> String {
    host_name(&SourceName {
        name,
        virtual_namespace: ns,
        tenant,
    })
    .name
}

pub const DEFAULT_KINDS: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("example.com/v1", "Widget"),
];

impl Harness {
    /// Host and tenant servers, CRDs, namespace team-dev, profile `fast`, policy
    /// `default` (ConfigMap, Secret, Service, Widget; 2s drift interval) and
    /// TenantCluster `dev` attached to the tenant server. Both servers are this
    /// test's alone while it runs, lent by [`HOST_POOL`] and [`TENANT_POOL`]: it may
    /// count their requests (from before and after), stop them, or make cluster-wide
    /// objects.
    pub async fn start() -> Harness {
        let env = TestEnv::start_shared().await.expect("etcd");
        let (host_server, tenant_server) = tokio::join!(pooled_host(), pooled_tenant());
        Self::set_up_with(env, host_server, tenant_server).await
    }

    /// [`Harness::start`] on a host API server started for this test: for a test
    /// that counts what is open on the host (watches), which a previous test's
    /// closing connections could still hold, or that runs the real node.
    pub async fn start_on_fresh_host() -> Harness {
        let env = TestEnv::start_shared().await.expect("etcd");
        // The CRDs come with the servers: from the second test on, in the storage
        // they start on, which costs far less than installing them live.
        let (host_server, tenant_server) = tokio::join!(
            env.start_apiserver_with_crds("host", host_crds()),
            pooled_tenant(),
        );
        let host_server = PooledServer::own(host_server.expect("host"));
        Self::set_up_with(env, host_server, tenant_server).await
    }

    /// [`Harness::start`] on the host API server this test binary shares: a
    /// namespace of the test's own (`team-dev-N`), and its own tenant server. One
    /// API server start instead of two. For tests that neither stop the host nor
    /// count its requests, and that name their cluster-scoped objects with
    /// [`Harness::named`] and scope their controller with [`Controller::start_for`].
    pub async fn start_on_shared_host() -> Harness {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let host_server = shared_host();
        let env = TestEnv::start_shared().await.expect("etcd");
        let tenant_server = pooled_tenant().await;
        let host = host_server.client().await.unwrap();
        let tenant = tenant_server.client().await.unwrap();
        let ns = format!("{HOST_NS}-{n}");
        create_namespace(&host, &ns).await;
        kubeconfig_secret(
            &host,
            &ns,
            "dev-kubeconfig",
            &tenant_server.kubeconfig_yaml("admin").unwrap(),
        )
        .await;
        Harness {
            env,
            host_server: HostServer::Shared(host_server),
            tenant_server,
            host,
            tenant,
            ns,
            suffix: format!("-{n}"),
        }
    }

    /// `base` as the name of a cluster-scoped object of this test (a policy or
    /// profile): suffixed on the shared host, where other tests make their own.
    pub fn named(&self, base: &str) -> String {
        format!("{base}{}", self.suffix)
    }

    /// The namespace a controller of this test is scoped to: on the shared host,
    /// this test's; on its own host, none.
    fn scope(&self) -> Option<String> {
        matches!(self.host_server, HostServer::Shared(_)).then(|| self.ns.clone())
    }

    /// [`Harness::start`] on servers the test started itself (with flags of its own).
    pub async fn attach(env: TestEnv, host_server: ApiServer, tenant_server: ApiServer) -> Harness {
        let host = host_server.client().await.unwrap();
        let tenant = tenant_server.client().await.unwrap();
        install_crds(&host, host_crds()).await;
        install_crds(&tenant, tenant_crds()).await;
        Self::set_up(env, host_server, tenant_server).await
    }

    /// The namespace, profile, policy and kubeconfig Secret every test starts with,
    /// on servers that have their CRDs ([`host_crds`], [`tenant_crds`]).
    pub async fn set_up(env: TestEnv, host_server: ApiServer, tenant_server: ApiServer) -> Harness {
        let (host_server, tenant_server) = (
            PooledServer::own(host_server),
            PooledServer::own(tenant_server),
        );
        Self::set_up_with(env, host_server, tenant_server).await
    }

    /// [`Harness::set_up`] on servers that may be pooled.
    pub async fn set_up_with(
        env: TestEnv,
        host_server: PooledServer,
        tenant_server: PooledServer,
    ) -> Harness {
        let host = host_server.client().await.unwrap();
        let tenant = tenant_server.client().await.unwrap();
        create_namespace(&host, HOST_NS).await;
        create(&host, profile("fast", 1000, 2000)).await;
        create(&host, policy("default", DEFAULT_KINDS, "2s")).await;
        kubeconfig_secret(
            &host,
            HOST_NS,
            "dev-kubeconfig",
            &tenant_server.kubeconfig_yaml("admin").unwrap(),
        )
        .await;
        Harness {
            env,
            host_server: HostServer::Own(Box::new(host_server)),
            tenant_server,
            host,
            tenant,
            ns: HOST_NS.to_owned(),
            suffix: String::new(),
        }
    }

    pub async fn create_dev(&self) {
        self.create_dev_with("fast", "default").await;
    }

    /// TenantCluster `dev`, attached to the tenant server, with this profile and policy.
    pub async fn create_dev_with(&self, profile: &str, policy: &str) {
        create(
            &self.host,
            tenant_cluster("dev", &self.ns, profile, policy, "dev-kubeconfig"),
        )
        .await;
    }

    /// The tenant Node name TenantCluster `dev` gives host node `host` in `mode`.
    pub async fn tenant_node_name(&self, mode: tenantplane_api::NodeMode, host: &str) -> String {
        let tc = self.tenant_clusters().get("dev").await.unwrap();
        tenantplane_core::pods::NodeView {
            mode,
            salt: tc.metadata.uid.unwrap(),
            kubelet_endpoint: None,
            caps: Default::default(),
        }
        .tenant_node_name(host)
    }

    pub fn host_api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        dynamic(&self.host, api_version, kind, Some(&self.ns))
    }

    pub fn tenant_api(&self, api_version: &str, kind: &str, ns: &str) -> Api<DynamicObject> {
        dynamic(&self.tenant, api_version, kind, Some(ns))
    }

    pub fn tenant_clusters(&self) -> Api<DynamicObject> {
        dynamic(
            &self.host,
            "tenantplane.io/v1alpha1",
            "TenantCluster",
            Some(&self.ns),
        )
    }

    /// The decisions kept in the SyncDecision `name` (none when it does not exist).
    pub async fn decisions(&self, name: &str) -> Vec<Value> {
        let api = dynamic(
            &self.host,
            "tenantplane.io/v1alpha1",
            "SyncDecision",
            Some(&self.ns),
        );
        api.get_opt(name)
            .await
            .unwrap()
            .and_then(|sd| sd.data["status"]["decisions"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until the TenantCluster's condition `type_` has `status` and `reason`,
    /// and returns its message.
    pub async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
        deadline: Duration,
    ) -> String {
        let what = format!("TenantCluster {name} {type_}={status} ({reason})");
        eventually_within(&what, deadline, move || async move {
            let (s, r, message) = self.condition(name, type_).await?;
            (s == status && r == reason).then_some(message)
        })
        .await
    }

    /// Waits until the TenantCluster reports `Synced=True`.
    pub async fn wait_synced(&self, name: &str) {
        let api = dynamic(
            &self.host,
            "tenantplane.io/v1alpha1",
            "TenantCluster",
            Some(&self.ns),
        );
        eventually(&format!("TenantCluster {name} Synced"), || {
            let api = api.clone();
            let name = name.to_owned();
            async move {
                let tc = api.get(&name).await.ok()?;
                let conditions = tc.data["status"]["conditions"].as_array()?.clone();
                conditions
                    .iter()
                    .any(|c| c["type"] == "Synced" && c["status"] == "True")
                    .then_some(())
            }
        })
        .await;
    }

    /// The TenantCluster's condition of `type_`, as (status, reason, message).
    pub async fn condition(&self, name: &str, type_: &str) -> Option<(String, String, String)> {
        let api = dynamic(
            &self.host,
            "tenantplane.io/v1alpha1",
            "TenantCluster",
            Some(&self.ns),
        );
        let tc = api.get(name).await.ok()?;
        let c = tc.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)?
            .clone();
        Some((
            c["status"].as_str()?.to_owned(),
            c["reason"].as_str()?.to_owned(),
            c["message"].as_str().unwrap_or("").to_owned(),
        ))
    }
}

/// Merge-patches `name` through `api`.
pub async fn merge_patch(api: &Api<DynamicObject>, name: &str, patch: Value) -> DynamicObject {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"))
}

/// Waits until `name` exists through `api`, and returns it.
/// The UID of object `name` (which must exist).
pub async fn uid_of(api: &Api<DynamicObject>, name: &str) -> String {
    api.get(name).await.unwrap().metadata.uid.unwrap()
}

pub async fn wait_for(api: &Api<DynamicObject>, name: &str) -> DynamicObject {
    eventually(&format!("{name} to exist"), || async {
        api.get_opt(name).await.ok().flatten()
    })
    .await
}

/// Waits until `name` exists and `check` holds for it.
pub async fn wait_for_that(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    check: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    eventually(&format!("{name}: {what}"), || async {
        api.get_opt(name).await.ok().flatten().filter(|o| check(o))
    })
    .await
}

/// Waits until `name` no longer exists through `api`.
pub async fn wait_gone(api: &Api<DynamicObject>, name: &str) {
    wait_gone_within(api, name, DEADLINE).await
}

/// [`wait_gone`] with a deadline of its own.
pub async fn wait_gone_within(api: &Api<DynamicObject>, name: &str, deadline: Duration) {
    eventually_within(&format!("{name} to be gone"), deadline, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

/// The names of the objects of `api` labelled as synced for `tenant`, sorted.
pub async fn managed_names(api: &Api<DynamicObject>, tenant: &str) -> Vec<String> {
    let params = ListParams::default().labels(&format!("tenantplane.io/tenant={tenant}"));
    let mut names: Vec<String> = api
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    names.sort();
    names
}

/// Creates pod `<sts>-0` from the StatefulSet's template, as the StatefulSet
/// controller would, and reports it Ready, as the kubelet would.
pub async fn play_statefulset_and_kubelet(host: &Client, sts: &StatefulSet) {
    let spec = sts.spec.as_ref().unwrap();
    let namespace = sts.namespace().unwrap();
    let template = spec.template.clone();
    let pods: Api<Pod> = Api::namespaced(host.clone(), &namespace);
    let name = format!("{}-0", sts.name_any());
    // Each volumeClaimTemplate becomes PVC `<template>-<pod>` with the template's
    // labels plus the selector's, and a pod volume of the template's name.
    let mut pod_spec = template.spec.unwrap();
    for claim_template in spec.volume_claim_templates.clone().unwrap_or_default() {
        let template_name = claim_template.name_any();
        let claim_name = format!("{template_name}-{name}");
        let mut claim = claim_template.clone();
        claim.metadata.name = Some(claim_name.clone());
        let mut labels = claim.labels().clone();
        labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
        claim.metadata.labels = Some(labels);
        Api::<PersistentVolumeClaim>::namespaced(host.clone(), &namespace)
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
        pod_spec.volumes.get_or_insert_with(Vec::new).push(
            serde_json::from_value(
                json!({"name": template_name, "persistentVolumeClaim": {"claimName": claim_name}}),
            )
            .unwrap(),
        );
    }
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: template.metadata.unwrap().labels,
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    };
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}})),
    )
    .await
    .unwrap();
}
