//! Host copies of the tenant objects a Pod (or an Ingress) uses: ConfigMaps and
//! Secrets here, a claim through [`super::storage`]. A copy made only because
//! something uses it gets the dependency finalizer on its tenant object first.

use kube::Api;
use kube::api::DynamicObject;
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::{ApplyPlan, plan_apply, stamp_desired_hash};
use tenantplane_core::pods::DependencyKind;
use tenantplane_core::pods::refcount::ANNOTATION_POD_DEPENDENCY;
use tenantplane_core::transform::dependency_to_host;
use tenantplane_core::write_outcome::WriteOutcome;

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
        let host_api: Api<DynamicObject> = Api::namespaced_with(
            self.ctx.host.clone(),
            &self.ctx.target.host_namespace,
            &resource,
        );
        // The host name follows from the tenant identity alone, so the host copy is
        // read at the same time as the tenant object (one round trip, not two).
        let predicted = host_name(&SourceName {
            name,
            virtual_namespace: namespace,
            tenant: &self.ctx.target.tenant,
        })
        .name;
        let (tenant_value, observed) = futures::try_join!(
            get_value(&tenant_api, &resource, name),
            get_value(&host_api, &resource, &predicted),
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
        let host_name = placement.host_name.name.clone();
        let observed = if host_name == predicted {
            observed
        } else {
            get_value(&host_api, &resource, &host_name).await?
        };
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
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name,
            },
            format!("{why}{waited}"),
        );
        Ok(DependencyState::Ready)
    }
}
