//! API servers that the tests of one binary hand on to each other.
//!
//! Starting a kube-apiserver costs about 4 CPU-seconds (most of it OpenAPI and
//! bootstrapping; see `snapshot.rs`), and most integration tests start one only as
//! a tenant to sync from. A [`ServerPool`] lends a server to one test at a time;
//! when the test ends without panicking and without having stopped, restarted or
//! otherwise taken the server mutably, the server goes back, and the next test to
//! take it gets it only after a reset has made it look as it did right after its
//! start: every object that was not there then is deleted (finalizers removed,
//! namespaces finalized, CRDs deleted with their objects), and the reset checks that
//! exactly the objects of that moment remain, with the resourceVersions they had.
//! A server the reset cannot restore is dropped (killed) and a fresh one started,
//! so a test never sees another's leftovers.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope, verbs};
use serde_json::json;

use crate::{ApiServer, ApiServerOptions, Error, Result, TestEnv};

/// How long a reset may wait for deleted objects to be gone.
const RESET_DEADLINE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

/// APIServices follow CRD groups (the server adds and removes them itself): the
/// reset compares their names but deletes none.
const APIREGISTRATION: &str = "apiregistration.k8s.io";
/// The group of webhook configurations.
const ADMISSIONREGISTRATION: &str = "admissionregistration.k8s.io";

/// Idle servers of one kind (same options), to lend to tests; kept in a `static`.
pub struct ServerPool {
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    // Dropped after the server: its directory holds the server's files.
    server: ApiServer,
    _env: Option<TestEnv>,
    baseline: Snapshot,
}

/// A server lent by a [`ServerPool`] (or, from [`PooledServer::own`], one that is
/// not): derefs to the [`ApiServer`]. Any mutable use (stop, restart) keeps it from
/// going back to the pool.
pub struct PooledServer {
    idle: Option<Idle>,
    pool: Option<&'static ServerPool>,
    reusable: bool,
}

impl Default for ServerPool {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerPool {
    pub const fn new() -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle server of this pool, reset to how it was right after its start, or,
    /// when there is none (or none could be reset), a new one from `start`, which
    /// must start every server of this pool the same way. The environment `start`
    /// returns lives as long as its server.
    pub async fn take<F, Fut>(&'static self, start: F) -> Result<PooledServer>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(TestEnv, ApiServer)>>,
    {
        loop {
            // The guard goes before the reset awaits.
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let Some(idle) = idle else { break };
            match reset(&idle.server, &idle.baseline).await {
                Ok(()) => return Ok(PooledServer::lent(idle, self)),
                Err(err) => {
                    // Shown with the output of a test that fails.
                    eprintln!(
                        "pooled server {} not reusable, starting another: {err}",
                        idle.server.name()
                    );
                }
            }
        }
        let (env, server) = start().await?;
        // The pool is static: an environment in it may never drop.
        env.remove_dir_at_exit()?;
        let baseline = Snapshot::take(&server.client().await?, server.name()).await?;
        Ok(PooledServer::lent(
            Idle {
                server,
                _env: Some(env),
                baseline,
            },
            self,
        ))
    }

    /// [`Self::take`] for the usual pool: servers started with `options` on the
    /// process's shared etcd ([`TestEnv::start_shared`]).
    pub async fn take_with(&'static self, options: ApiServerOptions) -> Result<PooledServer> {
        self.take(|| async move {
            let env = TestEnv::start_shared().await?;
            let server = env.start_apiserver_with(options).await?;
            Ok((env, server))
        })
        .await
    }

    fn give_back(&self, idle: Idle) {
        if let Ok(mut pool) = self.idle.lock() {
            pool.push(idle);
        }
    }
}

impl PooledServer {
    fn lent(idle: Idle, pool: &'static ServerPool) -> Self {
        Self {
            idle: Some(idle),
            pool: Some(pool),
            reusable: true,
        }
    }

    /// A server of the test's own in the same wrapper: it stops when this drops.
    pub fn own(server: ApiServer) -> Self {
        Self {
            idle: Some(Idle {
                server,
                _env: None,
                baseline: Snapshot::default(),
            }),
            pool: None,
            reusable: false,
        }
    }
}

impl std::ops::Deref for PooledServer {
    type Target = ApiServer;
    fn deref(&self) -> &ApiServer {
        match &self.idle {
            Some(idle) => &idle.server,
            None => unreachable!("a PooledServer holds its server until it drops"),
        }
    }
}

impl std::ops::DerefMut for PooledServer {
    fn deref_mut(&mut self) -> &mut ApiServer {
        // Stopped, restarted or started with other flags: not what the pool lends.
        self.reusable = false;
        match &mut self.idle {
            Some(idle) => &mut idle.server,
            None => unreachable!("a PooledServer holds its server until it drops"),
        }
    }
}

impl Drop for PooledServer {
    fn drop(&mut self) {
        // A test that panicked may have left the server in any state; a fresh one is
        // cheaper than doubt.
        if !self.reusable || std::thread::panicking() {
            return;
        }
        let (Some(idle), Some(pool)) = (self.idle.take(), self.pool) else {
            return;
        };
        let give_back = GiveBack {
            idle: Some(idle),
            pool,
        };
        // Not before the test's runtime ends: until then a task of the test (a
        // controller) could still write to the server while the next test resets it.
        // A task's future drops when its runtime shuts down, and then nothing of that
        // runtime runs any more.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _give_back = give_back;
                    std::future::pending::<()>().await
                });
            }
            Err(_) => drop(give_back),
        }
    }
}

/// Gives its server back to the pool when it drops.
struct GiveBack {
    idle: Option<Idle>,
    pool: &'static ServerPool,
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if let Some(idle) = self.idle.take()
            && !std::thread::panicking()
        {
            self.pool.give_back(idle);
        }
    }
}

/// Every object the server has, by resource, namespace and name: its uid and
/// resourceVersion.
#[derive(Default, Debug, PartialEq, Eq)]
struct Snapshot {
    objects: BTreeMap<ObjectKey, (String, String)>,
    api_services: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ObjectKey {
    resource: String,
    namespace: String,
    name: String,
}

/// The resources a reset lists, with whether they are namespaced.
async fn resources(client: &Client, server: &str) -> Result<Vec<(ApiResource, bool)>> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|source| kube_err(server, source))?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        if group.name() == APIREGISTRATION {
            continue;
        }
        for (resource, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || !caps.supports_operation(verbs::DELETE) {
                continue;
            }
            out.push((resource, caps.scope == Scope::Namespaced));
        }
    }
    Ok(out)
}

fn kube_err(server: &str, source: kube::Error) -> Error {
    Error::Kube {
        server: server.to_owned(),
        source,
    }
}

fn resource_id(resource: &ApiResource) -> String {
    format!("{}/{}", resource.api_version, resource.plural)
}

impl Snapshot {
    async fn take(client: &Client, server: &str) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        for (resource, _) in resources(client, server).await? {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let Some(list) = list_unless_gone(&api, server).await? else {
                continue;
            };
            for object in list.items {
                let meta = object.metadata;
                snapshot.objects.insert(
                    ObjectKey {
                        resource: resource_id(&resource),
                        namespace: meta.namespace.unwrap_or_default(),
                        name: meta.name.unwrap_or_default(),
                    },
                    (
                        meta.uid.unwrap_or_default(),
                        meta.resource_version.unwrap_or_default(),
                    ),
                );
            }
        }
        snapshot.api_services = api_services(client, server).await?;
        Ok(snapshot)
    }
}

async fn api_services(client: &Client, server: &str) -> Result<Vec<String>> {
    let api: Api<APIService> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|source| kube_err(server, source))?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Every object of a resource; `None` when the resource went away after discovery
/// (a CRD being deleted).
async fn list_unless_gone(
    api: &Api<DynamicObject>,
    server: &str,
) -> Result<Option<kube::core::ObjectList<DynamicObject>>> {
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(list)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(kube_err(server, source)),
    }
}

/// A reset's failure: the server stays out of the pool.
fn not_reusable(server: &str, message: String) -> Error {
    Error::Reset {
        server: server.to_owned(),
        message,
    }
}

/// Deletes everything `baseline` does not have, then waits until the server holds
/// exactly `baseline`.
async fn reset(server: &ApiServer, baseline: &Snapshot) -> Result<()> {
    let name = server.name();
    let client = server.client().await?;
    let mut now = resources(&client, name).await?;
    // Webhook configurations first: one whose webhook died with its test would
    // refuse (fail closed) the deletes of everything it guards.
    now.sort_by_key(|(resource, _)| resource.group != ADMISSIONREGISTRATION);
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    let writes_until = Instant::now() + RESET_DEADLINE;
    let mut namespaces = Vec::new();
    let mut crds = Vec::new();
    for (resource, namespaced) in &now {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
        let Some(list) = list_unless_gone(&api, name).await? else {
            continue;
        };
        for object in list.items {
            let key = ObjectKey {
                resource: resource_id(resource),
                namespace: object.metadata.namespace.clone().unwrap_or_default(),
                name: object.metadata.name.clone().unwrap_or_default(),
            };
            let uid = object.metadata.uid.clone().unwrap_or_default();
            if baseline.objects.get(&key).is_some_and(|(u, _)| *u == uid) {
                continue;
            }
            match resource.kind.as_str() {
                // Deleted last: their contents go first.
                "Namespace" => namespaces.push(key.name),
                // Its own finalizer deletes its objects; never strip it.
                "CustomResourceDefinition" => crds.push(key.name),
                _ => {
                    let api: Api<DynamicObject> = if *namespaced {
                        Api::namespaced_with(client.clone(), &key.namespace, resource)
                    } else {
                        Api::all_with(client.clone(), resource)
                    };
                    if object
                        .metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| !f.is_empty())
                    {
                        let patch = json!({"metadata": {"finalizers": null}});
                        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
                        write_unless_gone(name, writes_until, || {
                            api.patch(&key.name, &params, &patch)
                        })
                        .await?;
                    }
                    write_unless_gone(name, writes_until, || api.delete(&key.name, &force)).await?;
                }
            }
        }
    }
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &crds {
        ignore_gone(crd_api.delete(crd, &force).await.map(|_| ()), name)?;
    }
    let namespace_api: Api<Namespace> = Api::all(client.clone());
    for namespace in &namespaces {
        write_unless_gone(name, writes_until, || {
            namespace_api.delete(namespace, &force)
        })
        .await?;
        // Without kube-controller-manager nothing finalizes a namespace: its
        // contents are gone already, so say so as the namespace controller would.
        let finalized = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace},
            "spec": {"finalizers": []},
        });
        let params = PostParams::default();
        write_unless_gone(name, writes_until, || {
            namespace_api.replace_subresource("finalize", namespace, &params, &finalized)
        })
        .await?;
    }
    let deadline = Instant::now() + RESET_DEADLINE;
    loop {
        let current = match Snapshot::take(&client, name).await {
            Ok(current) => current,
            // Discovery names a group whose last CRD is just going (404).
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
                continue;
            }
            Err(err) => return Err(err),
        };
        if current == *baseline {
            return Ok(());
        }
        let changed_baseline: Vec<&ObjectKey> = baseline
            .objects
            .iter()
            .filter(|(key, value)| current.objects.get(*key) != Some(*value))
            .map(|(key, _)| key)
            .collect();
        if !changed_baseline.is_empty() {
            // Deleted or changed by the test: no reset brings it back.
            return Err(not_reusable(
                name,
                format!("objects it started with were changed or deleted: {changed_baseline:?}"),
            ));
        }
        if Instant::now() > deadline {
            let extra: Vec<&ObjectKey> = current
                .objects
                .keys()
                .filter(|key| !baseline.objects.contains_key(*key))
                .collect();
            return Err(not_reusable(
                name,
                format!(
                    "still there after {}s: {extra:?}; APIServices {:?} (at start {:?})",
                    RESET_DEADLINE.as_secs(),
                    current.api_services,
                    baseline.api_services
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Sends `attempt` until the server takes it or answers that the object is gone,
/// retrying while a webhook call fails: the server loads webhook configurations
/// asynchronously, so just after the reset deleted one whose webhook has stopped with
/// its test, it may still call that webhook (and fail closed).
async fn write_unless_gone<T, F, Fut>(server: &str, until: Instant, mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    loop {
        match attempt().await {
            Err(kube::Error::Api(status))
                if status.message.contains("failed calling webhook") && Instant::now() < until =>
            {
                tokio::time::sleep(POLL).await;
            }
            result => return ignore_gone(result, server),
        }
    }
}

/// Gone already (404) or going (409 on a namespace that terminates) is what a reset wants.
fn ignore_gone(result: kube::Result<impl Sized>, server: &str) -> Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(kube_err(server, source)),
    }
}
