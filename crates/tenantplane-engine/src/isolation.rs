//! Applies a TenantCluster's isolation boundary (what
//! `tenantplane_core::isolation::compile_for` says) to its host namespace.
//!
//! Idempotent and write-frugal: every object is read first and written only when the
//! live copy does not hold the compiled one (`tenantplane_core::compare::holds`), so a
//! reconcile of an unchanged profile makes no writes at all. Objects the profile no
//! longer asks for are deleted, but only when they carry tenantplane's isolation
//! labels for this tenant: an object someone else put under one of our names is
//! reported as a conflict and never overwritten or deleted.
//!
//! The namespace is not tenantplane's (it holds the TenantCluster itself): only its
//! `pod-security.kubernetes.io/*` labels are merged onto it, and it gets no owner
//! reference. Every other object is owned by the TenantCluster (controller: true), so
//! deleting the TenantCluster lets the garbage collector remove its boundary.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tenantplane_api::{IsolationProfile, PodSecurityLevel, TenantCluster};
use tenantplane_core::isolation::{
    IsolationError, compile_for, limit_range_name, network_policy_name, resource_quota_name,
};
use tenantplane_core::metadata::{
    COMPONENT_ISOLATION, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};

use crate::converge::{ConvergeError, ObjectAction, converge};
use crate::decisions::MANAGER;

const POD_SECURITY_PREFIX: &str = "pod-security.kubernetes.io/";

/// Why the boundary could not be applied; each is retried by the controller.
#[derive(Debug, thiserror::Error)]
pub enum IsolationApplyError {
    #[error("the IsolationProfile does not compile for this TenantCluster: {0}")]
    Compile(#[from] IsolationError),
    #[error("the TenantCluster has no {0}")]
    MissingMetadata(&'static str),
    #[error("namespace {0} does not exist")]
    NamespaceMissing(String),
    #[error("{verb} {kind} {namespace}/{name}: {source}")]
    Host {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        // Boxed: kube's error is large, and this is on every fallible path.
        #[source]
        source: Box<kube::Error>,
    },
    #[error("serializing {kind}: {source}")]
    Serialize {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl IsolationApplyError {
    /// The host's error when it did not answer (see `unanswered`): not a verdict
    /// on the boundary, so the caller retries rather than blocking the tenant.
    pub fn into_unanswered(self) -> Result<kube::Error, Self> {
        match self {
            Self::Host { source, .. } if crate::unanswered::did_not_answer(&source) => Ok(*source),
            other => Err(other),
        }
    }
}

/// One object of the boundary and what the apply did to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectResult {
    pub kind: &'static str,
    pub name: String,
    pub action: ObjectAction,
}

/// The result of one apply: for the `IsolationApplied` condition and the logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsolationOutcome {
    /// Host writes made (creates, updates, deletes, the namespace label patch).
    pub writes: usize,
    /// Every object of the boundary, namespace first.
    pub objects: Vec<ObjectResult>,
    /// The Pod Security level now on the namespace.
    pub pod_security: String,
}

impl IsolationOutcome {
    /// Objects that belong to someone else and block part of the boundary.
    pub fn conflicts(&self) -> impl Iterator<Item = &ObjectResult> {
        self.objects
            .iter()
            .filter(|o| o.action == ObjectAction::Conflict)
    }

    /// Whether the whole boundary is in place (no conflicts).
    pub fn is_applied(&self) -> bool {
        self.conflicts().next().is_none()
    }

    /// The `IsolationApplied` condition's reason.
    pub fn reason(&self) -> &'static str {
        if self.is_applied() {
            "Applied"
        } else {
            "ForeignObject"
        }
    }

    /// A one-line human summary for the `IsolationApplied` condition's message.
    /// It names only objects and levels, never their content, so it is stable while
    /// nothing changes (the condition is not rewritten on every reconcile).
    pub fn summary(&self) -> String {
        let conflicts: Vec<String> = self
            .conflicts()
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect();
        if !conflicts.is_empty() {
            return format!(
                "{} exist(s) but are not tenantplane's isolation objects for this tenant \
                 (labels {LABEL_MANAGED_BY}={MANAGED_BY_VALUE}, {LABEL_TENANT}, \
                 {LABEL_COMPONENT}={COMPONENT_ISOLATION}); tenantplane never overwrites them: \
                 rename or delete them",
                conflicts.join(", ")
            );
        }
        let present: Vec<String> = self
            .objects
            .iter()
            .filter(|o| o.kind != "Namespace" && o.action != ObjectAction::Absent)
            .filter(|o| o.action != ObjectAction::Deleted)
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect();
        let objects = if present.is_empty() {
            "no isolation objects".to_owned()
        } else {
            present.join(", ")
        };
        format!("Pod Security {}; {objects}", self.pod_security)
    }
}

impl fmt::Display for IsolationOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let actions: Vec<String> = self
            .objects
            .iter()
            .map(|o| format!("{} {} {}", o.kind, o.name, o.action.as_str()))
            .collect();
        write!(f, "{} write(s): {}", self.writes, actions.join(", "))
    }
}

/// Applies the boundary `profile` compiles to for `tc`, in `tc`'s namespace.
pub async fn apply_isolation(
    host: &Client,
    tc: &TenantCluster,
    profile: &IsolationProfile,
) -> Result<IsolationOutcome, IsolationApplyError> {
    apply_isolation_among(host, tc, profile, None).await
}

/// [`apply_isolation`], given the Pod Security levels of the other live
/// TenantClusters of the namespace when the caller knows them (the controller,
/// from its caches): `None` lists them from the host.
pub async fn apply_isolation_among(
    host: &Client,
    tc: &TenantCluster,
    profile: &IsolationProfile,
    peers: Option<&[PodSecurityLevel]>,
) -> Result<IsolationOutcome, IsolationApplyError> {
    let compiled = compile_for(tc, &profile.spec)?;
    let namespace = tc
        .namespace()
        .ok_or(IsolationApplyError::MissingMetadata("namespace"))?;
    let tenant = tc.name_any();
    let owner = tc
        .controller_owner_ref(&())
        .ok_or(IsolationApplyError::MissingMetadata("uid"))?;
    let owned = |mut meta: kube::api::ObjectMeta| {
        meta.owner_references = Some(vec![owner.clone()]);
        meta
    };
    let ours = IsolationLabels { tenant: &tenant };

    let mut objects = Vec::with_capacity(4);
    let desired_labels = compiled
        .namespace
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    let own = profile.spec.effective_controls().pod_security;
    let level = match peers {
        Some(peers) => strictest(own, peers.iter().copied()),
        None => namespace_pod_security(host, &namespace, &tenant, own).await?,
    };
    let desired_labels: BTreeMap<String, String> = desired_labels
        .into_iter()
        .map(|(key, value)| {
            if key.starts_with(POD_SECURITY_PREFIX) && !key.ends_with("-version") {
                (key, level.as_str().to_owned())
            } else {
                (key, value)
            }
        })
        .collect();
    objects.push(ObjectResult {
        kind: "Namespace",
        name: namespace.clone(),
        action: merge_pod_security_labels(host, &namespace, &desired_labels).await?,
    });

    let np_api: Api<NetworkPolicy> = Api::namespaced(host.clone(), &namespace);
    let np = compiled.network_policy.map(|mut np| {
        np.metadata = owned(np.metadata);
        np
    });
    objects.push(
        converge_isolation(
            &np_api,
            "NetworkPolicy",
            &network_policy_name(&tenant),
            np.as_ref(),
            &ours,
            &[],
        )
        .await?,
    );

    let quota_api: Api<ResourceQuota> = Api::namespaced(host.clone(), &namespace);
    let quota = compiled.resource_quota.map(|mut q| {
        q.metadata = owned(q.metadata);
        q
    });
    // `holds` ignores extra map keys; a cap the tenant no longer has (memory removed
    // from `resources`) must not linger in `spec.hard`, so that map is compared exactly.
    objects.push(
        converge_isolation(
            &quota_api,
            "ResourceQuota",
            &resource_quota_name(&tenant),
            quota.as_ref(),
            &ours,
            &["/spec/hard"],
        )
        .await?,
    );

    let limits_api: Api<LimitRange> = Api::namespaced(host.clone(), &namespace);
    let limits = compiled.limit_range.map(|mut l| {
        l.metadata = owned(l.metadata);
        l
    });
    objects.push(
        converge_isolation(
            &limits_api,
            "LimitRange",
            &limit_range_name(&tenant),
            limits.as_ref(),
            &ours,
            &[],
        )
        .await?,
    );

    let writes = objects.iter().filter(|o| o.action.is_write()).count();
    let pod_security = desired_labels
        .get("pod-security.kubernetes.io/enforce")
        .cloned()
        .unwrap_or_default();
    let outcome = IsolationOutcome {
        writes,
        objects,
        pod_security,
    };
    tracing::debug!(tenant = %tenant, namespace = %namespace, %outcome, "isolation applied");
    Ok(outcome)
}

/// The labels that make an object tenantplane's isolation object for one tenant.
struct IsolationLabels<'a> {
    tenant: &'a str,
}

impl IsolationLabels<'_> {
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
            && labels.get(LABEL_TENANT).map(String::as_str) == Some(self.tenant)
            && labels.get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_ISOLATION)
    }
}

/// How strict a Pod Security level is.
fn strictness(level: PodSecurityLevel) -> u8 {
    match level {
        PodSecurityLevel::Restricted => 3,
        PodSecurityLevel::Baseline => 2,
        PodSecurityLevel::Privileged => 1,
    }
}

/// The strictest of `own` and `others`.
pub fn strictest(
    own: PodSecurityLevel,
    others: impl IntoIterator<Item = PodSecurityLevel>,
) -> PodSecurityLevel {
    others.into_iter().fold(own, |level, theirs| {
        if strictness(theirs) > strictness(level) {
            theirs
        } else {
            level
        }
    })
}

/// The Pod Security level a namespace needs: the strictest among the profiles of
/// every TenantCluster living there (this one's `own` included), so TenantClusters
/// sharing a namespace never flip its labels back and forth, and a lone tenant that
/// loosens its profile does loosen its namespace. Ones being deleted do not count.
async fn namespace_pod_security(
    host: &Client,
    namespace: &str,
    tenant: &str,
    own: PodSecurityLevel,
) -> Result<PodSecurityLevel, IsolationApplyError> {
    let host_err = |verb, kind, source: kube::Error| IsolationApplyError::Host {
        verb,
        kind,
        namespace: namespace.to_owned(),
        name: String::new(),
        source: Box::new(source),
    };
    let others = Api::<TenantCluster>::namespaced(host.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| host_err("list", "TenantCluster", e))?;
    let profiles: Api<IsolationProfile> = Api::all(host.clone());
    let mut level = own;
    for other in others
        .items
        .iter()
        .filter(|t| t.name_any() != tenant && t.metadata.deletion_timestamp.is_none())
    {
        let Some(profile) = profiles
            .get_opt(&other.spec.isolation_profile_ref.name)
            .await
            .map_err(|e| host_err("get", "IsolationProfile", e))?
        else {
            continue;
        };
        let theirs = profile.spec.effective_controls().pod_security;
        if strictness(theirs) > strictness(level) {
            level = theirs;
        }
    }
    Ok(level)
}

/// Patches only the Pod Security labels of the namespace, and only when they differ.
async fn merge_pod_security_labels(
    host: &Client,
    namespace: &str,
    desired: &BTreeMap<String, String>,
) -> Result<ObjectAction, IsolationApplyError> {
    let api: Api<Namespace> = Api::all(host.clone());
    let host_err = |verb, source: kube::Error| IsolationApplyError::Host {
        verb,
        kind: "Namespace",
        namespace: String::new(),
        name: namespace.to_owned(),
        source: Box::new(source),
    };
    let live = api
        .get_opt(namespace)
        .await
        .map_err(|e| host_err("get", e))?
        .ok_or_else(|| IsolationApplyError::NamespaceMissing(namespace.to_owned()))?;
    let live_labels = live.labels();
    let patch: BTreeMap<&str, &str> = desired
        .iter()
        .filter(|(k, _)| k.starts_with(POD_SECURITY_PREFIX))
        .filter(|(k, v)| live_labels.get(*k) != Some(*v))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if patch.is_empty() {
        return Ok(ObjectAction::Unchanged);
    }
    // A merge patch of just these keys: every other label (and the namespace's
    // owners' own fields) stays exactly as it is.
    api.patch(
        namespace,
        &PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"metadata": {"labels": patch}})),
    )
    .await
    .map_err(|e| host_err("patch", e))?;
    Ok(ObjectAction::Updated)
}

impl ConvergeError {
    fn into_isolation(
        self,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> IsolationApplyError {
        match self {
            ConvergeError::Host { verb, source } => IsolationApplyError::Host {
                verb,
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source: Box::new(source),
            },
            ConvergeError::Serialize(source) => IsolationApplyError::Serialize { kind, source },
        }
    }
}

/// Brings one named isolation object to `desired` (or deletes ours when `None`),
/// mapping errors to this module's.
async fn converge_isolation<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    desired: Option<&K>,
    ours: &IsolationLabels<'_>,
    exact: &[&str],
) -> Result<ObjectResult, IsolationApplyError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let action = converge(api, name, desired, &|labels| ours.holds(labels), exact)
        .await
        .map_err(|e| e.into_isolation(kind, api.namespace().unwrap_or_default(), name))?;
    Ok(ObjectResult {
        kind,
        name: name.to_owned(),
        action,
    })
}

#[cfg(test)]
#[path = "isolation_tests.rs"]
mod tests;
