//! fromHost kinds: host objects copied into the tenant, read-only there.
//!
//! One syncer per fromHost kind of a TenantCluster. Host objects come from a watch
//! (cluster-scoped kinds: all objects, or those the policy's selector picks; namespaced
//! kinds: the namespaces the policy's mappings name); tenant copies carry
//! `tenantplane.io/from-host` and the `tenantplane.io/host-source` annotation. Every
//! event triggers one reconcile of the whole (small) set: create what is missing,
//! revert what the tenant changed, delete copies whose host source is gone. Nothing
//! on the host is ever written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::from_host::{
    LABEL_FROM_HOST, Mapping, check_secret, drift, host_source, is_copy_of, source_of, tenant_copy,
};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::kind_sync::{KindProgress, SyncContext, post_params};

/// One fromHost kind of one TenantCluster.
pub struct FromHostKind {
    pub api_version: String,
    pub group_kind: GroupKind,
    pub tenant_resource: ApiResource,
    pub host_resource: ApiResource,
    pub cluster_scoped: bool,
    /// Which host objects of a cluster-scoped kind are copied (`None`: every one).
    pub selector: Option<LabelSelector>,
    pub mappings: Vec<Mapping>,
    /// Host Secrets the IsolationProfile lets cross, as `namespace/name`.
    pub allowed_secrets: Vec<String>,
}

/// A copy the tenant should hold.
struct Desired {
    namespace: Option<String>,
    name: String,
    source: String,
    host: HostTarget,
    object: Value,
}

struct FromHostSyncer {
    ctx: Arc<SyncContext>,
    kind: FromHostKind,
    tenant_store: Store<DynamicObject>,
    host_stores: Vec<Store<DynamicObject>>,
    /// Per tenant object: the last Skip recorded, so it is not repeated.
    skipped: Mutex<HashMap<(String, String), String>>,
}

/// Runs until `cancel` fires.
pub async fn run(
    ctx: Arc<SyncContext>,
    kind: FromHostKind,
    progress: Arc<KindProgress>,
    cancel: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let notify = Arc::new(Notify::new());
    let mut host_stores = Vec::new();
    let host_namespaces: BTreeSet<String> = kind
        .mappings
        .iter()
        .map(|m| m.host_namespace.clone())
        .collect();
    let host_apis: Vec<(Api<DynamicObject>, watcher::Config)> = if kind.cluster_scoped {
        vec![(
            Api::all_with(ctx.host.clone(), &kind.host_resource),
            watcher::Config::default(),
        )]
    } else {
        host_namespaces
            .iter()
            .map(|ns| {
                (
                    Api::namespaced_with(ctx.host.clone(), ns, &kind.host_resource),
                    watcher::Config::default(),
                )
            })
            .collect()
    };
    for (api, config) in host_apis {
        let writer = reflector::store::Writer::new(kind.host_resource.clone());
        host_stores.push(writer.as_reader());
        let stream = reflector::reflector(writer, watcher(api, config).default_backoff()).boxed();
        tasks.spawn(forward(stream, Arc::clone(&notify), "host"));
    }
    let tenant_writer = reflector::store::Writer::new(kind.tenant_resource.clone());
    let tenant_store = tenant_writer.as_reader();
    let tenant_api: Api<DynamicObject> = Api::all_with(ctx.tenant.clone(), &kind.tenant_resource);
    let config = watcher::Config::default().labels(&format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_FROM_HOST}=true"
    ));
    let stream =
        reflector::reflector(tenant_writer, watcher(tenant_api, config).default_backoff()).boxed();
    tasks.spawn(forward(stream, Arc::clone(&notify), "tenant"));

    let syncer = FromHostSyncer {
        ctx,
        kind,
        tenant_store,
        host_stores,
        skipped: Mutex::new(HashMap::new()),
    };
    let resync = syncer.ctx.resync.unwrap_or(Duration::from_secs(300));
    let work = async {
        if syncer.tenant_store.wait_until_ready().await.is_err() {
            return;
        }
        for store in &syncer.host_stores {
            if store.wait_until_ready().await.is_err() {
                return;
            }
        }
        loop {
            let errors = syncer.reconcile().await;
            progress.last_pass_errors.store(errors, Ordering::Relaxed);
            progress.passes.fetch_add(1, Ordering::Relaxed);
            let retry = if errors > 0 {
                Duration::from_secs(2)
            } else {
                resync
            };
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(retry) => {}
            }
        }
    };
    tokio::select! {
        () = work => {}
        () = cancel.cancelled() => {}
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

/// Turns watch events into wake-ups of the reconcile loop.
async fn forward(
    mut stream: impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
    + Unpin,
    notify: Arc<Notify>,
    side: &'static str,
) {
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => {}
            Ok(_) => notify.notify_one(),
            Err(err) => tracing::warn!(%err, side, "fromHost watch failed; retrying"),
        }
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

impl FromHostSyncer {
    /// Brings every copy in line; returns the number of errors.
    async fn reconcile(&self) -> u64 {
        let desired = self.desired();
        let mut errors = 0;
        let sources: BTreeSet<String> = desired.iter().map(|d| d.source.clone()).collect();
        for copy in &desired {
            if let Err(err) = self.converge(copy).await {
                errors += 1;
                tracing::warn!(error = %err, kind = %self.kind.group_kind, name = %copy.name, tenant = %self.ctx.target.tenant, "fromHost copy failed; retrying");
            }
        }
        if let Err(err) = self.collect(&sources).await {
            errors += 1;
            tracing::warn!(error = %err, kind = %self.kind.group_kind, tenant = %self.ctx.target.tenant, "fromHost clean-up failed; retrying");
        }
        errors
    }

    fn desired(&self) -> Vec<Desired> {
        let kind = &self.kind;
        let copy = |host: &Value, namespace: Option<&str>, name: &str, source: String| {
            tenant_copy(
                host,
                &kind.api_version,
                &kind.group_kind.kind,
                namespace,
                name,
                &source,
            )
        };
        let mut out = Vec::new();
        if kind.cluster_scoped {
            for store in &self.host_stores {
                for object in store.state() {
                    if let Some(selector) = &kind.selector {
                        let labels = object.metadata.labels.clone().unwrap_or_default();
                        if !tenantplane_core::selector::matches(selector, &labels).unwrap_or(false)
                        {
                            continue;
                        }
                    }
                    let Ok(host) = serde_json::to_value(object.as_ref()) else {
                        continue;
                    };
                    let Some(name) = str_at(&host, "/metadata/name").map(str::to_owned) else {
                        continue;
                    };
                    let source = host_source(&kind.group_kind, None, &name);
                    out.push(Desired {
                        object: copy(&host, None, &name, source.clone()),
                        namespace: None,
                        host: HostTarget {
                            namespace: String::new(),
                            name: name.clone(),
                        },
                        name,
                        source,
                    });
                }
            }
            return out;
        }
        let by_name: BTreeMap<(String, String), Value> = self
            .host_stores
            .iter()
            .flat_map(|s| s.state())
            .filter_map(|o| {
                let v = serde_json::to_value(o.as_ref()).ok()?;
                let key = (
                    str_at(&v, "/metadata/namespace")?.to_owned(),
                    str_at(&v, "/metadata/name")?.to_owned(),
                );
                Some((key, v))
            })
            .collect();
        for mapping in &kind.mappings {
            if let Err(err) = check_secret(&kind.group_kind, mapping, &kind.allowed_secrets) {
                self.skip_once(
                    &mapping.tenant_namespace,
                    &mapping.tenant_name,
                    mapping,
                    err.to_string(),
                );
                continue;
            }
            let key = (mapping.host_namespace.clone(), mapping.host_name.clone());
            let Some(host) = by_name.get(&key) else {
                continue;
            };
            let source = host_source(
                &kind.group_kind,
                Some(&mapping.host_namespace),
                &mapping.host_name,
            );
            out.push(Desired {
                object: copy(
                    host,
                    Some(&mapping.tenant_namespace),
                    &mapping.tenant_name,
                    source.clone(),
                ),
                namespace: Some(mapping.tenant_namespace.clone()),
                name: mapping.tenant_name.clone(),
                host: HostTarget {
                    namespace: mapping.host_namespace.clone(),
                    name: mapping.host_name.clone(),
                },
                source,
            });
        }
        out
    }

    fn tenant_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => {
                Api::namespaced_with(self.ctx.tenant.clone(), ns, &self.kind.tenant_resource)
            }
            None => Api::all_with(self.ctx.tenant.clone(), &self.kind.tenant_resource),
        }
    }

    fn cached(&self, namespace: Option<&str>, name: &str) -> Option<Value> {
        let mut reference = reflector::ObjectRef::new_with(name, self.kind.tenant_resource.clone());
        if let Some(ns) = namespace {
            reference = reference.within(ns);
        }
        self.tenant_store
            .get(&reference)
            .and_then(|o| serde_json::to_value(o.as_ref()).ok())
    }

    async fn converge(&self, copy: &Desired) -> Result<(), kube::Error> {
        let api = self.tenant_api(copy.namespace.as_deref());
        let existing = match self.cached(copy.namespace.as_deref(), &copy.name) {
            Some(cached) => Some(cached),
            None => {
                let body: DynamicObject =
                    serde_json::from_value(copy.object.clone()).map_err(kube::Error::SerdeError)?;
                match api.create(&post_params(), &body).await {
                    Ok(created) => {
                        self.decide(
                            DecisionAction::Create,
                            copy,
                            created.metadata.uid.clone(),
                            format!(
                                "{} is copied fromHost into the tenant as {}, read-only there",
                                copy.source,
                                tenant_display(copy)
                            ),
                        );
                        return Ok(());
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => api
                        .get_opt(&copy.name)
                        .await?
                        .and_then(|o| serde_json::to_value(o).ok()),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 || s.code == 422 => {
                        self.skip_copy(
                            copy,
                            format!(
                                "the tenant API server refused the copy of {}: {}",
                                copy.source, s.message
                            ),
                        );
                        return Ok(());
                    }
                    Err(err) => return Err(err),
                }
            }
        };
        let Some(existing) = existing else {
            return Ok(());
        };
        if !is_copy_of(&existing, &copy.source) {
            self.skip_copy(copy, format!(
                "a tenant object that is not tenantplane's copy of {} holds {}; it is left alone",
                copy.source,
                tenant_display(copy)
            ));
            return Ok(());
        }
        let changed = drift(&copy.object, &existing);
        if changed.is_empty() {
            return Ok(());
        }
        let mut object = copy.object.clone();
        if let (Some(map), Some(version)) = (
            object
                .pointer_mut("/metadata")
                .and_then(Value::as_object_mut),
            str_at(&existing, "/metadata/resourceVersion"),
        ) {
            map.insert("resourceVersion".into(), Value::String(version.to_owned()));
        }
        let body: DynamicObject =
            serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        api.replace(&copy.name, &post_params(), &body).await?;
        self.decide(
            DecisionAction::Update,
            copy,
            str_at(&existing, "/metadata/uid").map(str::to_owned),
            format!(
                "{} in the tenant differed from its host source {} ({}): fromHost copies are read-only, the host wins and the tenant's change is reverted",
                tenant_display(copy),
                copy.source,
                changed.join(", ")
            ),
        );
        Ok(())
    }

    /// Deletes the copies of this kind whose host source is no longer desired.
    async fn collect(&self, sources: &BTreeSet<String>) -> Result<(), kube::Error> {
        let prefix = format!("{} ", self.kind.group_kind);
        for object in self.tenant_store.state() {
            let Ok(value) = serde_json::to_value(object.as_ref()) else {
                continue;
            };
            let Some(source) = source_of(&value) else {
                continue;
            };
            if !source.starts_with(&prefix) || sources.contains(source) {
                continue;
            }
            let namespace = str_at(&value, "/metadata/namespace");
            let name = str_at(&value, "/metadata/name")
                .unwrap_or_default()
                .to_owned();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: str_at(&value, "/metadata/uid").map(str::to_owned),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match self.tenant_api(namespace).delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
                Err(err) => return Err(err),
            }
            let gone = Desired {
                namespace: namespace.map(str::to_owned),
                name: name.clone(),
                source: source.to_owned(),
                host: HostTarget::default(),
                object: Value::Null,
            };
            self.decide(
                DecisionAction::Delete,
                &gone,
                str_at(&value, "/metadata/uid").map(str::to_owned),
                format!("its host source {source} is gone or no longer selected by the SyncPolicy"),
            );
        }
        Ok(())
    }

    fn decide(&self, action: DecisionAction, copy: &Desired, uid: Option<String>, reason: String) {
        self.ctx.decisions.send(
            action,
            &self.kind.api_version,
            &self.kind.group_kind.kind,
            TenantObjectRef {
                namespace: copy.namespace.clone().unwrap_or_default(),
                name: copy.name.clone(),
                uid,
            },
            copy.host.clone(),
            reason,
        );
    }

    fn skip_copy(&self, copy: &Desired, reason: String) {
        let key = (
            copy.namespace.clone().unwrap_or_default(),
            copy.name.clone(),
        );
        if self.first_skip(key, &reason) {
            self.decide(DecisionAction::Skip, copy, None, reason);
        }
    }

    fn skip_once(&self, namespace: &str, name: &str, mapping: &Mapping, reason: String) {
        if self.first_skip((namespace.to_owned(), name.to_owned()), &reason) {
            let copy = Desired {
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
                source: mapping.to_string(),
                host: HostTarget {
                    namespace: mapping.host_namespace.clone(),
                    name: mapping.host_name.clone(),
                },
                object: Value::Null,
            };
            self.decide(DecisionAction::Skip, &copy, None, reason);
        }
    }

    fn first_skip(&self, key: (String, String), reason: &str) -> bool {
        let mut skipped = self.skipped.lock().unwrap_or_else(PoisonError::into_inner);
        if skipped.get(&key).is_some_and(|r| r == reason) {
            return false;
        }
        skipped.insert(key, reason.to_owned());
        true
    }
}

fn tenant_display(copy: &Desired) -> String {
    match &copy.namespace {
        Some(ns) => format!("{ns}/{}", copy.name),
        None => copy.name.clone(),
    }
}
