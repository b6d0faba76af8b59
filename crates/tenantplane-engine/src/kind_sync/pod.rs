//! The Pod path of a [`KindSyncer`]: a tenant Pod becomes a host Pod only with
//! everything it uses (ConfigMaps, Secrets, PVCs with their PV), under the
//! IsolationProfile; its host status flows back; its deletion waits for the host
//! Pod (finalizer); dependency copies no Pod uses any more are removed.
//!
//! It reuses the generic machinery of the kind: the same watches, queue, passes,
//! plan ([`plan_apply`]) and writes ([`KindSyncer::carry_out`]).

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::dns::dns_object_name;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_selector;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::{ApplyPlan, plan_apply, stamp_desired_hash};
use tenantplane_core::pods::node::pin_to_host_node;
use tenantplane_core::pods::refcount::{
    ANNOTATION_POD_DEPENDENCY, DependencyKey, is_collectable, needed_dependencies,
};
use tenantplane_core::pods::status::{
    FINALIZER, REASON_PHYSICAL_POD_LOST, lost_pod_status, mapping_annotations, records_host_pod,
    tenant_pod_status_update,
};
use tenantplane_core::pods::storage::{secrets_held_by_volumes, volume_secrets};
use tenantplane_core::pods::{
    DependencyKind, HostPodContext, HostPodError, NodeView, PodControls, PodDns, TenantApiEndpoint,
    dependencies, to_host_pod,
};
use tenantplane_core::provenance::source_in;
use tenantplane_core::services::ingress::is_ingress;
use tenantplane_core::services::ingress_refs::needed_by_ingresses;
use tenantplane_core::transform::dependency_to_host;
use tenantplane_core::write_outcome::WriteOutcome;

use super::dependency_finalizer::{
    DependencyRef, release_dependency_finalizers, release_finalizers, remove_finalizer,
};
use super::outage::{HostOutages, is_unreachable, released_reason};
use super::{Key, KindSyncer, SyncError, post_params, typed_value};
use crate::deletion::{delete_exact, exactly};
use crate::queue::WorkQueue;
use crate::tenant_dns::dns_service_ip;

/// How long a tenant object being deleted waits for a host API server that does
/// not answer before its finalizer is released anyway.
pub const DEFAULT_HOST_UNREACHABLE_RELEASE: Duration = Duration::from_secs(120);

/// A host copy being deleted is looked at again this often even without a watch
/// event, so a host that stops answering meanwhile starts the unreachable bound.
const TERMINATING_RECHECK: Duration = Duration::from_secs(10);

/// What the Pod path needs beyond a kind's syncer.
#[derive(Clone, Debug)]
pub struct PodSettings {
    pub controls: PodControls,
    /// The tenant API server's URL, as Pods on the host reach it.
    pub endpoint: Option<String>,
    /// Kinds the SyncPolicy syncs for their own sake: their copies are never
    /// removed by reference counting.
    pub synced_kinds: BTreeSet<GroupKind>,
    /// A tenant Pod (or dependency) being deleted while the host does not answer
    /// keeps its finalizer at most this long.
    pub host_unreachable_release: Duration,
    /// The cluster domain of the tenant's DNS server; `Some` makes every host Pod
    /// resolve through it (and wait until its Service has an IP).
    pub dns_domain: Option<String>,
    /// The profile's `controls.allowedIngressClasses` (absent allows any).
    pub allowed_ingress_classes: Option<Vec<String>>,
    /// How the tenant's Nodes are named and what they advertise.
    pub nodes: NodeView,
}

impl Default for PodSettings {
    fn default() -> Self {
        Self {
            controls: PodControls::default(),
            endpoint: None,
            synced_kinds: BTreeSet::new(),
            host_unreachable_release: DEFAULT_HOST_UNREACHABLE_RELEASE,
            dns_domain: None,
            allowed_ingress_classes: None,
            nodes: NodeView::default(),
        }
    }
}

/// How soon a Pod waiting for the tenant DNS Service's IP is tried again.
const DNS_RETRY: Duration = Duration::from_secs(2);

/// The Pod path's state, built once per syncer.
pub(super) struct PodPath {
    context: HostPodContext,
    /// See [`PodSettings::dns_domain`].
    dns_domain: Option<String>,
    synced_kinds: BTreeSet<GroupKind>,
    events: Recorder,
    pub(super) outages: HostOutages,
    /// Tenant dependencies being deleted, to finalize.
    pub(super) dependencies: Arc<WorkQueue<DependencyRef>>,
}

/// Where deleting the host copy of a tenant object stands.
enum HostCopy {
    /// Deleted or terminating: its watch event (or a recheck) brings us back.
    Deleting,
    /// Not on the host (any more): the tenant object may go.
    Gone,
}

/// The key a full pass queues to run dependency garbage collection (no Pod has an
/// empty namespace or name).
pub(super) fn gc_key() -> Key {
    (String::new(), String::new())
}

impl PodPath {
    pub(super) fn new(settings: PodSettings, tenant: Client) -> Self {
        let reporter = Reporter {
            controller: "tenantplane.io/sync-engine".into(),
            instance: None,
        };
        Self {
            context: HostPodContext {
                controls: settings.controls,
                api_endpoint: settings
                    .endpoint
                    .as_deref()
                    .and_then(TenantApiEndpoint::from_url),
                dns: PodDns::Unchanged,
            },
            dns_domain: settings.dns_domain,
            synced_kinds: settings.synced_kinds,
            events: Recorder::new(tenant, reporter),
            outages: HostOutages::new(settings.host_unreachable_release),
            dependencies: WorkQueue::new(),
        }
    }
}

/// Whether a dependency is on the host, or why the Pod must wait.
pub(super) enum DependencyState {
    Ready,
    Waiting(String),
}

fn core_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind))
}

fn api_error(verb: &'static str, name: &str) -> impl FnOnce(kube::Error) -> SyncError {
    let name = name.to_owned();
    move |source| SyncError::Api { verb, name, source }
}

/// Removes tenantplane's finalizer from every tenant Pod and every tenant Pod
/// dependency: the TenantCluster is going, its host copies are removed by the
/// controller, and nothing would ever release these objects otherwise. Returns
/// how many were released.
pub async fn release_pod_finalizers(tenant: &Client) -> Result<usize, kube::Error> {
    let pods = release_finalizers(tenant, &core_resource("Pod"), None).await?;
    Ok(pods + release_dependency_finalizers(tenant).await?)
}

/// `GET` one object as JSON with its kind; `None` when it does not exist.
pub(super) async fn get_value(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
) -> Result<Option<Value>, SyncError> {
    api.get_opt(name)
        .await
        .map_err(api_error("get", name))?
        .map(|o| typed_value(&o, resource))
        .transpose()
}

/// `PUT <resource>/status`: `object` (as observed, with its resourceVersion)
/// carrying `status`.
pub(super) async fn put_status(
    api: &Api<DynamicObject>,
    object: &Value,
    status: Value,
) -> Result<(), SyncError> {
    let name = str_at(object, "/metadata/name").unwrap_or_default();
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.insert("status".into(), status);
    }
    let body: DynamicObject =
        serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
    api.replace_status(&name, &post_params(), &body)
        .await
        .map_err(api_error("update the status of", &name))?;
    Ok(())
}

fn to_value(object: &DynamicObject) -> Result<Value, SyncError> {
    serde_json::to_value(object).map_err(|e| SyncError::Decode(e.to_string()))
}

impl KindSyncer {
    pub(super) fn pod_path(&self) -> Result<&PodPath, SyncError> {
        self.pods
            .as_ref()
            .ok_or_else(|| SyncError::Decode("the Pod path is not configured".into()))
    }

    fn tenant_pods(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.tenant.clone(), namespace, &self.tenant_resource)
    }

    /// Syncs one tenant Pod (or, for [`gc_key`], collects unused dependency copies).
    pub(super) async fn sync_pod(&self, key: &Key) -> Result<(), SyncError> {
        if *key == gc_key() {
            self.collect_nodes().await?;
            return self.collect_dependencies().await;
        }
        let (tenant_pod, host_name, host_pod) = self.cached_pair(key)?;
        let Some(tenant_pod) = tenant_pod else {
            // Gone without our finalizer (it was never synced, or removed by hand).
            if let Some(host_pod) = host_pod {
                self.collect(key, &host_name, &host_pod).await?;
            }
            return self.collect_dependencies().await;
        };
        if tenant_pod.pointer("/metadata/deletionTimestamp").is_some() {
            return self
                .finalize_pod(key, &tenant_pod, &host_name, host_pod.as_ref())
                .await;
        }
        let status = tenant_pod.get("status");
        if status.and_then(|s| s.get("reason")).and_then(Value::as_str)
            == Some(REASON_PHYSICAL_POD_LOST)
        {
            return Ok(());
        }
        let Some(host_pod) = host_pod else {
            if records_host_pod(tenant_pod.pointer("/metadata/annotations")).is_some() {
                return self.mark_lost(key, &tenant_pod, &host_name).await;
            }
            return self.create_or_update_pod(key, &tenant_pod, None).await;
        };
        // Exists: keep it up to date, then report back.
        self.create_or_update_pod(key, &tenant_pod, Some(&host_pod))
            .await?;
        self.report_back(key, &tenant_pod, &host_pod).await
    }

    /// The finalizer first (from then on the tenant Pod cannot disappear before its
    /// host copy is gone), then the host Pod.
    async fn create_or_update_pod(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_pod: Option<&Value>,
    ) -> Result<(), SyncError> {
        self.ensure_finalizer(key, tenant_pod).await?;
        self.apply_pod(key, tenant_pod, host_pod.cloned()).await
    }

    /// Plans the host Pod, brings its dependencies, and writes it.
    async fn apply_pod(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_pod: Option<Value>,
    ) -> Result<(), SyncError> {
        let path = self.pod_path()?;
        let uid = str_at(tenant_pod, "/metadata/uid");
        let host_name = host_name(&SourceName {
            name: &key.1,
            virtual_namespace: &key.0,
            tenant: &self.ctx.target.tenant,
        })
        .name;
        let mut context = path.context.clone();
        if let Some(domain) = &path.dns_domain {
            let target = &self.ctx.target;
            match dns_service_ip(&self.ctx.host, &target.host_namespace, &target.tenant).await {
                Ok(Some(ip)) => {
                    context.dns = PodDns::Tenant {
                        nameserver: ip,
                        cluster_domain: domain.clone(),
                    }
                }
                Ok(None) => {
                    let why = "waits for the tenant DNS: not ready (its Service has no IP yet)";
                    self.skip_once(key, uid, &host_name, "", why.into());
                    self.queue.add_after(key.clone(), DNS_RETRY);
                    return Ok(());
                }
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "get",
                        name: dns_object_name(&target.tenant),
                        source,
                    });
                }
            }
        }
        let pinned = match self.scheduled_host_node(tenant_pod).await? {
            None => None,
            Some(Ok(host_node)) => Some(host_node),
            Some(Err(why)) => {
                self.skip_once(key, uid, &host_name, "", why);
                return Ok(());
            }
        };
        let built = match to_host_pod(&self.ctx.target, tenant_pod, &context) {
            Ok(built) => built,
            Err(err) => {
                if let HostPodError::Refused(refusals) = &err
                    && self.skip_is_new(&host_name, &err.to_string())
                {
                    // Each refused field with the control or rule that refuses it.
                    let fields: Vec<String> = refusals
                        .iter()
                        .map(|r| format!("{} ({})", r.field, r.control))
                        .collect();
                    self.warn_tenant_pod(
                        tenant_pod,
                        "IsolationRefused",
                        format!(
                            "not synced to the host: the IsolationProfile refuses {}",
                            fields.join(", ")
                        ),
                    )
                    .await;
                }
                self.skip_once(key, uid, &host_name, "", format!("cannot be synced: {err}"));
                return Ok(());
            }
        };
        for (dependency, (required, field)) in dependencies(&built.references) {
            let state = self
                .ensure_dependency(key, dependency.kind, &key.0, &dependency.name, &field)
                .await?;
            if let DependencyState::Waiting(why) = state
                && required
            {
                self.skip_once(
                    key,
                    uid,
                    &host_name,
                    "",
                    format!(
                        "waits for {} {}/{} ({field}): {why}",
                        dependency.kind, key.0, dependency.name
                    ),
                );
                return Ok(());
            }
        }
        if let DependencyState::Waiting(why) = self.ensure_tokens(key, tenant_pod, &built).await? {
            self.skip_once(
                key,
                uid,
                &host_name,
                "",
                format!("waits for its service-account tokens: {why}"),
            );
            return Ok(());
        }
        let mut desired = built.object;
        if let Some(host_node) = &pinned {
            pin_to_host_node(&mut desired, host_node);
        }
        self.add_service_env(key, tenant_pod, host_pod.as_ref(), &mut desired)
            .await?;
        let hash = stamp_desired_hash(&mut desired);
        let source = built
            .placement
            .source_identity(&self.ctx.target.tenant, uid.as_deref());
        let memo = self.memo_of(&host_name);
        let plan = plan_apply(&source, &desired, host_pod.as_ref(), memo.as_ref());
        let reason = format!(
            "{} with {} dependencies rewritten to their host copies",
            super::placement_reason(&self.ctx.target, &built.placement),
            built.references.len()
        );
        self.carry_out(key, &source, &reason, &hash, plan, true)
            .await
    }

    /// Whether a Skip with this reason was not yet recorded for `host_name`.
    pub(super) fn skip_is_new(&self, host_name: &str, reason: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused
            .get(host_name)
            .is_none_or(|refusal| !refusal.reason.ends_with(reason))
    }

    /// A Warning Event on the tenant Pod, where its owner looks.
    async fn warn_tenant_pod(&self, tenant_pod: &Value, reason: &str, note: String) {
        let Ok(path) = self.pod_path() else { return };
        warn_tenant_object(&path.events, "v1", "Pod", tenant_pod, reason, note).await;
    }
}

/// A Warning Event on a tenant object, where its owner looks.
pub(super) async fn warn_tenant_object(
    events: &Recorder,
    api_version: &str,
    kind: &str,
    object: &Value,
    reason: &str,
    note: String,
) {
    let reference = ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: str_at(object, "/metadata/name"),
        namespace: str_at(object, "/metadata/namespace"),
        uid: str_at(object, "/metadata/uid"),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Sync".into(),
        secondary: None,
    };
    if let Err(err) = events.publish(&event, &reference).await {
        tracing::warn!(%err, kind, "could not publish an event on a tenant object");
    }
}

impl KindSyncer {
    /// Makes sure the host copy of one dependency is there and current.
    async fn ensure_dependency(
        &self,
        pod: &Key,
        kind: DependencyKind,
        namespace: &str,
        name: &str,
        field: &str,
    ) -> Result<DependencyState, SyncError> {
        match kind {
            DependencyKind::ConfigMap | DependencyKind::Secret => {
                self.ensure_copy(pod, kind, namespace, name, field, None)
                    .await
            }
            DependencyKind::PersistentVolumeClaim => {
                self.ensure_claim(pod, namespace, name, field).await
            }
        }
    }

    /// Copies tenant object `namespace/name` of core `kind` to the host, marked as a
    /// Pod dependency unless its kind is synced for its own sake. `adjust` changes
    /// the desired host object before it is planned.
    pub(super) async fn ensure_copy(
        &self,
        pod: &Key,
        dependency: DependencyKind,
        namespace: &str,
        name: &str,
        field: &str,
        adjust: Option<&(dyn Fn(&mut Value) + Sync)>,
    ) -> Result<DependencyState, SyncError> {
        // Also used by the Ingress path (its TLS Secrets), which has no Pod path.
        let synced_kinds = &self.ctx.pods.synced_kinds;
        let kind = dependency.as_str();
        let resource = core_resource(kind);
        let group_kind = dependency.group_kind();
        let tenant_api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), namespace, &resource);
        let Some(tenant_value) = get_value(&tenant_api, &resource, name).await? else {
            return Ok(DependencyState::Waiting(
                "it does not exist in the tenant".into(),
            ));
        };
        if tenant_value
            .pointer("/metadata/deletionTimestamp")
            .is_some()
        {
            // Its copy is being removed (finalizer): never made again meanwhile.
            return Ok(DependencyState::Waiting(
                "it is being deleted in the tenant".into(),
            ));
        }
        let kind_synced = synced_kinds.contains(&group_kind);
        if !kind_synced {
            // The finalizer first: from then on the tenant object cannot disappear
            // before its host copy is gone.
            self.ensure_dependency_finalizer(dependency, &tenant_value)
                .await?;
        }
        let (placement, mut desired) =
            match dependency_to_host(&self.ctx.target, &group_kind, &tenant_value) {
                Ok(ok) => ok,
                Err(err) => return Ok(DependencyState::Waiting(err.to_string())),
            };
        if let Some(adjust) = adjust {
            adjust(&mut desired);
        }
        if !kind_synced
            && let Some(annotations) = desired
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
        {
            annotations.insert(
                ANNOTATION_POD_DEPENDENCY.into(),
                Value::String("true".into()),
            );
        }
        stamp_desired_hash(&mut desired);
        let host_api: Api<DynamicObject> = Api::namespaced_with(
            self.ctx.host.clone(),
            &self.ctx.target.host_namespace,
            &resource,
        );
        let host_name = placement.host_name.name.clone();
        let observed = get_value(&host_api, &resource, &host_name).await?;
        let uid = str_at(&tenant_value, "/metadata/uid");
        let source = placement.source_identity(&self.ctx.target.tenant, uid.as_deref());
        let user = if self.pods.is_some() {
            "Pod"
        } else {
            self.group_kind.kind.as_str()
        };
        let why = format!("used by {user} {}/{} ({field})", pod.0, pod.1);
        let (action, object) = match plan_apply(&source, &desired, observed.as_ref(), None) {
            ApplyPlan::Noop => return Ok(DependencyState::Ready),
            ApplyPlan::Skip { reason } => return Ok(DependencyState::Waiting(reason)),
            ApplyPlan::Create { object } => (DecisionAction::Create, object),
            ApplyPlan::Update { object, .. } => (DecisionAction::Update, object),
        };
        let waited = self.write_budget().await;
        let body: DynamicObject =
            serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
        let result = if action == DecisionAction::Create {
            self.count_write("create");
            host_api.create(&post_params(), &body).await
        } else {
            self.count_write("update");
            host_api.replace(&host_name, &post_params(), &body).await
        };
        match result {
            Ok(_) => {}
            // A Conflict is an error: someone else wrote it meanwhile (another Pod's
            // worker), and the next look decides again.
            Err(kube::Error::Api(status)) if WriteOutcome::of_status(status.code).is_refused() => {
                return Ok(DependencyState::Waiting(format!(
                    "the host API server refused its copy: {}",
                    status.message
                )));
            }
            Err(source) => {
                return Err(SyncError::Api {
                    verb: "write",
                    name: host_name,
                    source,
                });
            }
        }
        self.ctx.decisions.send(
            action,
            "v1",
            kind,
            TenantObjectRef {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid,
            },
            HostTarget {
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name,
            },
            format!("{why}{waited}"),
        );
        Ok(DependencyState::Ready)
    }

    /// Adds the finalizer to the tenant Pod (a write only when it is missing).
    async fn ensure_finalizer(&self, key: &Key, tenant_pod: &Value) -> Result<(), SyncError> {
        let mut finalizers = string_list(tenant_pod.pointer("/metadata/finalizers"));
        if finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        finalizers.push(FINALIZER.to_owned());
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": tenant_pod.pointer("/metadata/resourceVersion"),
        }});
        self.tenant_pods(&key.0)
            .patch(&key.1, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error("add the finalizer to", &key.1))?;
        Ok(())
    }

    /// The tenant Pod is being deleted: delete the host Pod with the same grace
    /// period and a UID precondition; once it is gone, let the tenant Pod go. A
    /// host that does not answer for longer than the bound lets it go too.
    async fn finalize_pod(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_name: &str,
        host_pod: Option<&Value>,
    ) -> Result<(), SyncError> {
        let finalizers = string_list(tenant_pod.pointer("/metadata/finalizers"));
        if !finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let outages = &self.pod_path()?.outages;
        let unreachable_for = match self
            .remove_host_pod(key, tenant_pod, host_name, host_pod)
            .await
        {
            Ok(HostCopy::Deleting) => {
                outages.answered("Pod", key);
                self.queue.add_after(key.clone(), TERMINATING_RECHECK);
                return Ok(());
            }
            Ok(HostCopy::Gone) => None,
            Err(err) if is_unreachable(&err) => match outages.failed("Pod", key) {
                Some(down_for) => Some(down_for),
                None => return Err(err),
            },
            Err(err) => return Err(err),
        };
        let pods = self.tenant_pods(&key.0);
        remove_finalizer(&pods, &key.1, tenant_pod).await?;
        // A Pod bound to a node waits for its kubelet to confirm; the host's kubelet
        // confirmed by deleting the host Pod, so confirm for it.
        if tenant_pod.pointer("/spec/nodeName").is_some() {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                ..exactly(str_at(tenant_pod, "/metadata/uid"))
            };
            match delete_exact(&pods, &key.1, &params).await {
                Ok(_) => {}
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "delete",
                        name: key.1.clone(),
                        source,
                    });
                }
            }
        }
        outages.answered("Pod", key);
        if let Some(down_for) = unreachable_for {
            self.decide(
                DecisionAction::Skip,
                key,
                str_at(tenant_pod, "/metadata/uid"),
                host_name,
                released_reason("Pod", down_for, outages.bound()),
            );
            // The host does not answer: its copies are collected once it does (the
            // tenant Pod's deletion and the host's re-list both queue this key).
            return Ok(());
        }
        self.collect_nodes().await?;
        self.collect_dependencies().await
    }

    /// Deletes the host Pod of `key` (same grace period as the tenant Pod, UID
    /// precondition, only when it is ours), then, once it is gone, its tokens.
    async fn remove_host_pod(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_name: &str,
        host_pod: Option<&Value>,
    ) -> Result<HostCopy, SyncError> {
        // Only our copy of this very Pod is deleted.
        if let Some(host_pod) = host_pod.filter(|pod| self.is_our_copy(key, pod)) {
            if host_pod.pointer("/metadata/deletionTimestamp").is_some() {
                // Terminating on the host: its watch event brings us back. Asked
                // (a read) rather than trusted from the cache, so a host that
                // stopped answering meanwhile is noticed.
                let current = get_value(&self.host_api, &self.host_resource, host_name).await?;
                return Ok(match current {
                    Some(_) => HostCopy::Deleting,
                    None => {
                        self.delete_tokens(key).await?;
                        HostCopy::Gone
                    }
                });
            }
            let grace = tenant_pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .and_then(|g| u32::try_from(g).ok());
            let params = DeleteParams {
                grace_period_seconds: grace,
                ..exactly(str_at(host_pod, "/metadata/uid"))
            };
            let waited = self.write_budget().await;
            self.count_write("delete");
            match self.host_api.delete(host_name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "delete",
                        name: host_name.to_owned(),
                        source,
                    });
                }
            }
            let grace_text = grace.map_or_else(
                || "the default grace period".to_owned(),
                |g| format!("a grace period of {g}s"),
            );
            self.decide(
                DecisionAction::Delete,
                key,
                str_at(tenant_pod, "/metadata/uid"),
                host_name,
                format!(
                    "the tenant Pod is being deleted; host Pod deleted with {grace_text}{waited}"
                ),
            );
            return Ok(HostCopy::Deleting);
        }
        // No host Pod of ours any more: its tokens go, then the tenant Pod may go.
        self.delete_tokens(key).await?;
        Ok(HostCopy::Gone)
    }

    /// The host Pod the tenant Pod records is gone: the tenant Pod fails, it is not
    /// silently recreated.
    async fn mark_lost(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_name: &str,
    ) -> Result<(), SyncError> {
        let Some(status) = lost_pod_status(tenant_pod.get("status"), host_name) else {
            return Ok(());
        };
        self.replace_tenant_status(key, tenant_pod, status).await?;
        self.decide(
            DecisionAction::Skip,
            key,
            str_at(tenant_pod, "/metadata/uid"),
            host_name,
            format!("the host Pod is gone; the tenant Pod is marked Failed ({REASON_PHYSICAL_POD_LOST}) and not recreated"),
        );
        Ok(())
    }

    /// Status and mapping annotations back to the tenant Pod, each only when it
    /// changed, so the write it causes makes no further write.
    async fn report_back(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_pod: &Value,
    ) -> Result<(), SyncError> {
        let host_name = str_at(host_pod, "/metadata/name").unwrap_or_default();
        if let Some(annotations) = mapping_annotations(
            tenant_pod.pointer("/metadata/annotations"),
            &host_name,
            &self.ctx.target.host_namespace,
            str_at(host_pod, "/metadata/uid").as_deref(),
            &now(),
        ) {
            let patch = json!({"metadata": {"annotations": annotations}});
            self.tenant_pods(&key.0)
                .patch(&key.1, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(api_error("annotate", &key.1))?;
            // The patch's watch event brings the Pod back with its new version.
            return Ok(());
        }
        if self.bind_to_tenant_node(key, tenant_pod, host_pod).await? {
            return Ok(());
        }
        if let Some(status) = tenant_pod_status_update(
            tenant_pod.get("status"),
            host_pod.get("status"),
            self.ctx.pods.nodes.host_ip(),
        ) {
            self.replace_tenant_status(key, tenant_pod, status).await?;
        }
        Ok(())
    }

    /// `PUT pods/status` with the observed resourceVersion.
    async fn replace_tenant_status(
        &self,
        key: &Key,
        tenant_pod: &Value,
        status: Value,
    ) -> Result<(), SyncError> {
        put_status(&self.tenant_pods(&key.0), tenant_pod, status).await
    }

    /// Removes every dependency copy made for Pods that no tenant Pod uses any more.
    async fn collect_dependencies(&self) -> Result<(), SyncError> {
        let path = self.pod_path()?;
        let pods: Vec<Value> = self
            .tenant_store
            .state()
            .iter()
            .filter_map(|p| typed_value(p, &self.tenant_resource).ok())
            .collect();
        let mut needed = needed_dependencies(&pods);
        // TLS Secrets of tenant Ingresses are copied the same way.
        self.add_ingress_secrets(&mut needed).await?;
        // A needed claim's volume needs its CSI Secrets, which no Pod names. Read
        // from the tenant, so a Pod sync still copying them is never raced.
        self.add_volume_secrets(&mut needed).await?;
        // Claims first: a volume copy deleted with its claim releases its CSI
        // Secrets in this same pass.
        for kind in [
            DependencyKind::PersistentVolumeClaim,
            DependencyKind::ConfigMap,
            DependencyKind::Secret,
        ] {
            let kind_synced = path.synced_kinds.contains(&kind.group_kind());
            if kind_synced {
                continue;
            }
            let held_by_volumes = if kind == DependencyKind::Secret {
                self.secrets_held_by_volumes().await?
            } else {
                BTreeSet::new()
            };
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.ctx.host.clone(),
                &self.ctx.target.host_namespace,
                &core_resource(kind.as_str()),
            );
            let selector = host_selector(&self.ctx.target.tenant, &kind.group_kind());
            let copies = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(api_error("list", kind.as_str()))?;
            for copy in copies {
                let copy = to_value(&copy)?;
                let (name, labels, annotations) = tenantplane_core::plan::meta_of(&copy);
                let Some(identity) = source_in(
                    name,
                    &labels,
                    &annotations,
                    &self.ctx.target.tenant,
                    &kind.group_kind(),
                ) else {
                    continue;
                };
                let key = DependencyKey {
                    kind,
                    namespace: identity.virtual_namespace.clone(),
                    name: identity.name.clone(),
                };
                // Already deleted, waiting for the host's finalizers (pvc-protection).
                if copy.pointer("/metadata/deletionTimestamp").is_some()
                    || !is_collectable(&key, &copy, &needed, kind_synced)
                    || held_by_volumes.contains(name)
                {
                    continue;
                }
                let host_name = name.to_owned();
                let params = exactly(str_at(&copy, "/metadata/uid"));
                let waited = self.write_budget().await;
                self.count_write("delete");
                match delete_exact(&api, &host_name, &params).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "delete",
                            name: host_name,
                            source,
                        });
                    }
                }
                if kind == DependencyKind::PersistentVolumeClaim
                    && let Some(volume) = str_at(&copy, "/spec/volumeName")
                {
                    super::storage::delete_volume_copy(self, &volume).await?;
                }
                self.ctx.decisions.send(
                    DecisionAction::Delete,
                    "v1",
                    kind.as_str(),
                    TenantObjectRef { namespace: identity.virtual_namespace, name: identity.name, uid: identity.uid },
                    HostTarget { namespace: self.ctx.target.host_namespace.clone(), name: host_name },
                    format!("no synced Pod uses it any more and {kind} is not synced for its own sake{waited}"),
                );
            }
        }
        Ok(())
    }

    /// Adds the TLS Secrets tenant Ingresses name, when Ingresses are synced. Read
    /// from the tenant, so an Ingress sync still copying them is never raced.
    async fn add_ingress_secrets(
        &self,
        needed: &mut BTreeSet<DependencyKey>,
    ) -> Result<(), SyncError> {
        if !self.ctx.pods.synced_kinds.iter().any(is_ingress) {
            return Ok(());
        }
        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk("networking.k8s.io", "v1", "Ingress"));
        let ingresses = Api::<DynamicObject>::all_with(self.ctx.tenant.clone(), &resource)
            .list(&ListParams::default())
            .await
            .map_err(api_error("list", "Ingress"))?
            .into_iter()
            .map(|i| to_value(&i))
            .collect::<Result<Vec<_>, _>>()?;
        needed.extend(needed_by_ingresses(&ingresses));
        Ok(())
    }

    /// Adds the CSI Secrets of the volumes bound to the needed claims.
    async fn add_volume_secrets(
        &self,
        needed: &mut BTreeSet<DependencyKey>,
    ) -> Result<(), SyncError> {
        let claims: Vec<DependencyKey> = needed
            .iter()
            .filter(|k| k.kind == DependencyKind::PersistentVolumeClaim)
            .cloned()
            .collect();
        let pvc_resource = core_resource("PersistentVolumeClaim");
        let pv_resource = core_resource("PersistentVolume");
        let tenant_pvs: Api<DynamicObject> = Api::all_with(self.ctx.tenant.clone(), &pv_resource);
        for claim in claims {
            let tenant_pvcs: Api<DynamicObject> =
                Api::namespaced_with(self.ctx.tenant.clone(), &claim.namespace, &pvc_resource);
            let Some(pvc) = get_value(&tenant_pvcs, &pvc_resource, &claim.name).await? else {
                continue;
            };
            let Some(volume) = str_at(&pvc, "/spec/volumeName").filter(|v| !v.is_empty()) else {
                continue;
            };
            let Some(pv) = get_value(&tenant_pvs, &pv_resource, &volume).await? else {
                continue;
            };
            needed.extend(volume_secrets(&pv).into_iter().map(|s| DependencyKey {
                kind: DependencyKind::Secret,
                namespace: s.namespace,
                name: s.name,
            }));
        }
        Ok(())
    }

    /// Host names of the Secrets this tenant's live host PV copies use.
    async fn secrets_held_by_volumes(&self) -> Result<BTreeSet<String>, SyncError> {
        let pv_resource = core_resource("PersistentVolume");
        let host_pvs: Api<DynamicObject> = Api::all_with(self.ctx.host.clone(), &pv_resource);
        let selector = host_selector(
            &self.ctx.target.tenant,
            &GroupKind::new("", "PersistentVolume"),
        );
        let copies = host_pvs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error("list", "PersistentVolume"))?
            .into_iter()
            .map(|pv| to_value(&pv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(secrets_held_by_volumes(&self.ctx.target, &copies))
    }

    async fn ensure_claim(
        &self,
        pod: &Key,
        namespace: &str,
        name: &str,
        field: &str,
    ) -> Result<DependencyState, SyncError> {
        super::storage::ensure_claim(self, pod, namespace, name, field).await
    }
}

pub(super) fn str_at(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(super) fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// RFC 3339 in UTC, seconds precision.
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
