//! One member namespace brought to its plan: metadata, then every planned object,
//! then the pruning of this tenant's objects the plan no longer lists.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tenantplane_core::tenant_plan::{
    MemberPlan, child_selector, is_tenant_child, namespace_metadata_patch, orphans,
};

use crate::converge::{ObjectAction, converge};
use crate::decisions::MANAGER;
use crate::deletion::{delete_exact, exactly};

/// What reconciling one member namespace found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberOutcome {
    pub namespace: String,
    /// Objects under one of our names that are not this tenant's: `Kind name`.
    pub foreign: Vec<String>,
    /// The first error, if the namespace could not be brought to its plan.
    pub error: Option<String>,
    /// Writes made (creates, updates, deletes, the metadata patch).
    pub writes: usize,
}

/// Brings `namespace` to `plan`. Never fails: what went wrong is in the outcome, so
/// one broken namespace does not keep the others from being reconciled.
pub async fn reconcile_member(
    host: &Client,
    tenant: &str,
    namespace: &Namespace,
    plan: MemberPlan,
) -> MemberOutcome {
    let name = namespace.name_any();
    let mut outcome = MemberOutcome {
        namespace: name.clone(),
        ..MemberOutcome::default()
    };
    if namespace.metadata.deletion_timestamp.is_some() {
        // Nothing can be created in a terminating namespace, and nothing needs to be.
        return outcome;
    }
    if let Err(err) = converge_member(host, tenant, namespace, plan, &mut outcome).await {
        tracing::warn!(%tenant, namespace = %name, error = %err, "member namespace not reconciled");
        outcome.error = Some(err);
    }
    outcome
}

async fn converge_member(
    host: &Client,
    tenant: &str,
    namespace: &Namespace,
    plan: MemberPlan,
    outcome: &mut MemberOutcome,
) -> Result<(), String> {
    let name = namespace.name_any();
    if let Some(patch) =
        namespace_metadata_patch(&plan.metadata, namespace.labels(), namespace.annotations())
    {
        let params = PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        };
        Api::<Namespace>::all(host.clone())
            .patch(&name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("patch namespace metadata: {e}"))?;
        outcome.writes += 1;
    }
    let objects = plan.objects;
    let kind = Kind {
        host,
        tenant,
        namespace: &name,
    };
    kind.converge("RoleBinding", &objects.role_bindings, &[], outcome)
        .await?;
    kind.converge("NetworkPolicy", &objects.network_policies, &[], outcome)
        .await?;
    kind.converge("LimitRange", &objects.limit_ranges, &[], outcome)
        .await?;
    // A cap removed from the spec must not linger in `spec.hard`.
    kind.converge(
        "ResourceQuota",
        &objects.resource_quotas,
        &["/spec/hard"],
        outcome,
    )
    .await
}

/// One kind in one member namespace.
struct Kind<'a> {
    host: &'a Client,
    tenant: &'a str,
    namespace: &'a str,
}

impl Kind<'_> {
    async fn converge<K>(
        &self,
        kind: &'static str,
        wanted: &BTreeMap<String, K>,
        exact: &[&str],
        outcome: &mut MemberOutcome,
    ) -> Result<(), String>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + Serialize
            + DeserializeOwned,
    {
        let api: Api<K> = Api::namespaced(self.host.clone(), self.namespace);
        let tenant = self.tenant;
        let ours = move |labels: &BTreeMap<String, String>| is_tenant_child(labels, tenant);
        for (name, object) in wanted {
            let action = converge(&api, name, Some(object), &ours, exact)
                .await
                .map_err(|e| format!("{kind} {name}: {e}"))?;
            match action {
                ObjectAction::Conflict => outcome.foreign.push(format!("{kind} {name}")),
                ObjectAction::Created | ObjectAction::Updated => outcome.writes += 1,
                _ => {}
            }
        }
        let live = api
            .list(&ListParams::default().labels(&child_selector(tenant)))
            .await
            .map_err(|e| format!("list {kind}: {e}"))?;
        let wanted: BTreeSet<String> = wanted.keys().cloned().collect();
        let stale = orphans(
            tenant,
            &wanted,
            live.items
                .iter()
                .map(|o| (o.meta().name.as_deref().unwrap_or_default(), o.labels())),
        );
        for object in live.items.iter().filter(|o| stale.contains(&o.name_any())) {
            if delete_checked(&api, object)
                .await
                .map_err(|e| format!("delete {kind}: {e}"))?
            {
                outcome.writes += 1;
            }
        }
        Ok(())
    }
}

/// Deletes exactly `object` (UID precondition: not one recreated since it was read).
/// `false` when it was already gone.
pub(crate) async fn delete_checked<K>(api: &Api<K>, object: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + fmt::Debug + DeserializeOwned,
{
    delete_exact(api, &object.name_any(), &exactly(object.meta().uid.clone())).await
}
