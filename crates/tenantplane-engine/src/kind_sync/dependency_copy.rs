//! Host copies of the tenant objects a Pod (or an Ingress) uses: ConfigMaps and
//! Secrets here, a claim through [`super::storage`]. A copy made only because
//! something uses it gets the dependency finalizer on its tenant object first.
//! Both sides are read from the dependency caches where the Pod path has them.

use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::{ApplyPlan, plan_apply};
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::dependents::desired_copy;
use tenantplane_core::write_outcome::WriteOutcome;

use super::dependency_cache::{Cached, DependencyCaches};
use super::fields::{core_resource, get_value, str_at};
use super::{Key, KindSyncer, SyncError, post_params};

/// Whether a dependency is on the host, or why the Pod must wait.
pub(super) enum DependencyState {
    Ready,
    Waiting(String),
}

/// The host's answer to writing a dependency copy: `None` when written, the host's
/// message when it refused the copy ([`WriteOutcome::Refused`]: the Pod waits, with
/// this reason); a conflict or any other failure is an error, retried.
pub(super) fn refusal<T>(
    answer: Result<T, kube::Error>,
    verb: &'static str,
    host_name: &str,
) -> Result<Option<String>, SyncError> {
    match answer {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if WriteOutcome::of_status(status.code).is_refused() => {
            Ok(Some(status.message))
        }
        Err(source) => Err(SyncError::Api {
            verb,
            name: host_name.to_owned(),
            source,
        }),
    }
}

impl KindSyncer {
    /// Copies tenant object `namespace/name` of core `kind` to the host, reading
    /// both sides from `caches` when given (the Pod path; the Ingress path reads
    /// from the API servers), marked as a
    /// Pod dependency unless its kind is synced for its own sake; a claim is bound
    /// to its volume copy.
    pub(super) async fn ensure_copy(
        &self,
        caches: Option<&DependencyCaches>,
        pod: &Key,
        dependency: DependencyKind,
        namespace: &str,
        name: &str,
        field: &str,
    ) -> Result<DependencyState, SyncError> {
        // Also used by the Ingress path (its TLS Secrets), which has no Pod path.
        let synced_kinds = &self.ctx.pods.synced_kinds;
        let kind = dependency.as_str();
        let resource = core_resource(kind);
        let group_kind = dependency.group_kind();
        let host_namespace = &self.ctx.target.host_namespace;
        let tenant_api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.tenant.clone(), namespace, &resource);
        let host_api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.host.clone(), host_namespace, &resource);
        // The host name follows from the tenant identity alone, so the host copy is
        // looked up at the same time as the tenant object.
        let predicted = host_name(&SourceName {
            name,
            virtual_namespace: namespace,
            tenant: &self.ctx.target.tenant,
        })
        .name;
        let cached_tenant =
            caches.map_or(Cached::Unknown, |c| c.tenant(dependency, namespace, name));
        let cached_host = caches.map_or(Cached::Unknown, |c| {
            c.host(dependency, host_namespace, &predicted)
        });
        let (tenant_value, observed) = futures::try_join!(
            read_through(cached_tenant, &tenant_api, &resource, name),
            read_through(cached_host, &host_api, &resource, &predicted),
        )?;
        let Some(tenant_value) = tenant_value else {
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
        let (placement, desired) =
            match desired_copy(&self.ctx.target, dependency, &tenant_value, kind_synced) {
                Ok(ok) => ok,
                Err(why) => return Ok(DependencyState::Waiting(why)),
            };
        let host_name = placement.host_name.name.clone();
        let mut observed = if host_name == predicted {
            observed
        } else {
            get_value(&host_api, &resource, &host_name).await?
        };
        let uid = str_at(&tenant_value, "/metadata/uid");
        let source = placement.source_identity(&self.ctx.target.tenant, uid.as_deref());
        // The kind of this syncer: a Pod, or an Ingress (its TLS Secrets).
        let user = self.group_kind.kind.as_str();
        let why = format!("used by {user} {}/{} ({field})", pod.0, pod.1);
        // A copy planned from the cache may meet a newer host object (409): it is
        // read from the host and planned once more.
        let mut may_reread = caches.is_some();
        loop {
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
            if may_reread
                && let Err(kube::Error::Api(status)) = &result
                && status.code == 409
            {
                may_reread = false;
                observed = get_value(&host_api, &resource, &host_name).await?;
                continue;
            }
            // A Conflict is an error: someone else wrote it meanwhile (another Pod's
            // worker), and the next look decides again.
            if let Some(refused) = refusal(result, "write", &host_name)? {
                return Ok(DependencyState::Waiting(format!(
                    "the host API server refused its copy: {refused}"
                )));
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
                    namespace: host_namespace.clone(),
                    name: host_name,
                },
                format!("{why}{waited}"),
            );
            return Ok(DependencyState::Ready);
        }
    }
}

/// What a cache knows of an object, or else the API server's answer.
async fn read_through(
    cached: Cached,
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
) -> Result<Option<Value>, SyncError> {
    match cached {
        Cached::Found(value) => Ok(Some(value)),
        Cached::Absent => Ok(None),
        Cached::Unknown => get_value(api, resource, name).await,
    }
}
