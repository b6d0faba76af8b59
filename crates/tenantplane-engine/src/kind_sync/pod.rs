//! The Pod path of a [`KindSyncer`]: a tenant Pod becomes a host Pod only with
//! everything it uses (ConfigMaps, Secrets, PVCs with their PV), under the
//! IsolationProfile; its host status flows back; its deletion waits for the host
//! Pod (finalizer); dependency copies no Pod uses any more are removed.
//!
//! It reuses the generic machinery of the kind: the same watches, queue, passes,
//! plan ([`plan_apply`]) and writes ([`KindSyncer::carry_out`]).
//!
//! The modules of the Pod path use each other one way only, so each can be read
//! (and changed) knowing only those before it: `fields`, `dependency_cache` and
//! `pod_path`, then `dependency_finalizer`, `dependency_copy`, `storage`,
//! `dependency_gc`, and this module last. Each function of the Pod path takes the
//! [`PodPath`] it works with: a syncer has one only for Pods, and the one place
//! that decides (the sync dispatch) hands it over, so no Pod step can run without
//! it.
//!
//! Stays over 500 lines: the last step of the Pod path (apply, status back,
//! deletion through the finalizer); the steps before it are already modules.

use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::DecisionAction;
use tenantplane_core::dns::dns_object_name;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::{plan_apply, stamp_desired_hash};
use tenantplane_core::pods::node::pin_to_host_node;
use tenantplane_core::pods::refcount::DependencyKey;
use tenantplane_core::pods::status::{
    FINALIZER, REASON_PHYSICAL_POD_LOST, lost_pod_status, mapping_annotations,
    tenant_pod_status_update,
};
use tenantplane_core::pods::step::{PodStep, pod_step};
use tenantplane_core::pods::{DependencyKind, HostPodError, PodDns, dependencies, to_host_pod};

use super::dependency_copy::DependencyState;
use super::dependency_finalizer::{
    release_dependency_finalizers, release_finalizers, remove_finalizer,
};
use super::fields::{
    api_error, core_resource, get_value, put_status, str_at, string_list, warn_tenant_object,
};
use super::outage::{is_unreachable, released_reason};
use super::pod_path::PodPath;
use super::{Key, KindSyncer, SyncError};
use crate::deletion::{delete_exact, exactly};
use crate::tenant_dns::dns_service_ip;

/// A host copy being deleted is looked at again this often even without a watch
/// event, so a host that stops answering meanwhile starts the unreachable bound.
const TERMINATING_RECHECK: Duration = Duration::from_secs(10);

/// How soon a Pod waiting for the tenant DNS Service's IP is tried again.
const DNS_RETRY: Duration = Duration::from_secs(2);

/// Where deleting the host copy of a tenant object stands.
enum HostCopy {
    /// Deleted or terminating: its watch event (or a recheck) brings us back.
    Deleting,
    /// Not on the host (any more): the tenant object may go.
    Gone,
}

/// Removes tenantplane's finalizer from every tenant Pod and every tenant Pod
/// dependency: the TenantCluster is going, its host copies are removed by the
/// controller, and nothing would ever release these objects otherwise. Returns
/// how many were released.
pub async fn release_pod_finalizers(tenant: &Client) -> Result<usize, kube::Error> {
    let pods = release_finalizers(tenant, &core_resource("Pod"), None).await?;
    Ok(pods + release_dependency_finalizers(tenant).await?)
}

impl KindSyncer {
    fn tenant_pods(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.tenant.clone(), namespace, &self.tenant_resource)
    }

    /// Removes the tenant Nodes and dependency copies no Pod uses any more.
    pub(super) async fn collect_unused(&self, path: &PodPath) -> Result<(), SyncError> {
        self.collect_nodes(path).await?;
        self.collect_dependencies(path).await
    }

    /// Syncs one tenant Pod: the step [`pod_step`] decides, taken.
    pub(super) async fn sync_pod(&self, path: &PodPath, key: &Key) -> Result<(), SyncError> {
        let (tenant_pod, host_name, host_pod) = self.cached_pair(key)?;
        let step = pod_step(tenant_pod.as_ref(), host_pod.is_some());
        match (step, tenant_pod, host_pod) {
            (PodStep::Collect { .. }, _, host_pod) => {
                path.caches.dependents().remove_pod(key);
                if let Some(host_pod) = host_pod {
                    self.collect(key, &host_name, &host_pod).await?;
                }
                self.collect_dependencies(path).await
            }
            (PodStep::Finalize, Some(tenant_pod), host_pod) => {
                self.finalize_pod(path, key, &tenant_pod, &host_name, host_pod.as_ref())
                    .await
            }
            (PodStep::MarkLost, Some(tenant_pod), _) => {
                self.mark_lost(key, &tenant_pod, &host_name).await
            }
            (PodStep::Create, Some(tenant_pod), _) => {
                self.create_or_update_pod(path, key, &tenant_pod, None)
                    .await
            }
            (PodStep::UpdateAndReport, Some(tenant_pod), Some(host_pod)) => {
                self.create_or_update_pod(path, key, &tenant_pod, Some(&host_pod))
                    .await?;
                self.report_back(path, key, &tenant_pod, &host_pod).await
            }
            // Nothing, and pairs pod_step never makes (a step for a missing Pod).
            _ => Ok(()),
        }
    }

    /// The host Pod, after the tenant Pod's finalizer (from then on the tenant Pod
    /// cannot disappear before its host copy is gone).
    async fn create_or_update_pod(
        &self,
        path: &PodPath,
        key: &Key,
        tenant_pod: &Value,
        host_pod: Option<&Value>,
    ) -> Result<(), SyncError> {
        if host_pod.is_some() {
            // Already there: put back a finalizer someone removed (no write
            // otherwise). A new Pod gets it with its dependencies, in apply_pod.
            self.ensure_finalizer(key, tenant_pod).await?;
        }
        self.apply_pod(path, key, tenant_pod, host_pod.cloned())
            .await
    }

    /// Plans the host Pod, brings its dependencies, and writes it.
    async fn apply_pod(
        &self,
        path: &PodPath,
        key: &Key,
        tenant_pod: &Value,
        host_pod: Option<Value>,
    ) -> Result<(), SyncError> {
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
                    self.requeue_after(key, DNS_RETRY);
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
                        path,
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
        // The tenant Pod's finalizer and every dependency's copy do not depend on
        // each other: made at once, so a new Pod waits for the slowest of them
        // rather than for their sum. Both are settled before the host Pod.
        let needed = dependencies(&built.references);
        // Indexed before its dependencies are read: a change to one from now on
        // brings this Pod back (see dependency_cache).
        {
            let mut dependents = path.caches.dependents();
            dependents.set_pod(tenant_pod);
            dependents.set_waiting(key, None);
        }
        let copies = needed.iter().map(|(dependency, (_, field))| {
            self.ensure_dependency(path, key, dependency.kind, &key.0, &dependency.name, field)
        });
        let new_pod = host_pod.is_none();
        let finalizer = async {
            if new_pod {
                self.ensure_finalizer(key, tenant_pod).await
            } else {
                // An existing host Pod's: put back by create_or_update_pod.
                Ok(())
            }
        };
        let (finalizer, copies) = futures::join!(finalizer, futures::future::join_all(copies));
        finalizer?;
        let mut states = Vec::with_capacity(copies.len());
        for state in copies {
            states.push(state?);
        }
        for ((dependency, (required, field)), state) in needed.iter().zip(states) {
            if let DependencyState::Waiting(why) = state
                && *required
            {
                path.caches.dependents().set_waiting(
                    key,
                    Some(DependencyKey {
                        kind: dependency.kind,
                        namespace: key.0.clone(),
                        name: dependency.name.clone(),
                    }),
                );
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

    /// A Warning Event on the tenant Pod, where its owner looks.
    async fn warn_tenant_pod(
        &self,
        path: &PodPath,
        tenant_pod: &Value,
        reason: &str,
        note: String,
    ) {
        warn_tenant_object(&path.events, "v1", "Pod", tenant_pod, reason, note).await;
    }
}

impl KindSyncer {
    /// Makes sure the host copy of one dependency is there and current.
    async fn ensure_dependency(
        &self,
        path: &PodPath,
        pod: &Key,
        kind: DependencyKind,
        namespace: &str,
        name: &str,
        field: &str,
    ) -> Result<DependencyState, SyncError> {
        match kind {
            DependencyKind::ConfigMap | DependencyKind::Secret => {
                self.ensure_copy(Some(&path.caches), pod, kind, namespace, name, field)
                    .await
            }
            DependencyKind::PersistentVolumeClaim => {
                super::storage::ensure_claim(self, path, pod, namespace, name, field).await
            }
        }
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
        path: &PodPath,
        key: &Key,
        tenant_pod: &Value,
        host_name: &str,
        host_pod: Option<&Value>,
    ) -> Result<(), SyncError> {
        let finalizers = string_list(tenant_pod.pointer("/metadata/finalizers"));
        if !finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let outages = &path.outages;
        let unreachable_for = match self
            .remove_host_pod(key, tenant_pod, host_name, host_pod)
            .await
        {
            Ok(HostCopy::Deleting) => {
                outages.answered("Pod", key);
                self.requeue_after(key, TERMINATING_RECHECK);
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
        self.collect_nodes(path).await?;
        self.collect_dependencies(path).await
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
        path: &PodPath,
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
        if self
            .bind_to_tenant_node(path, key, tenant_pod, host_pod)
            .await?
        {
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
}

/// RFC 3339 in UTC, seconds precision.
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
