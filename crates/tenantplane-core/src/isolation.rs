//! The IsolationProfile compiler: the host objects that hold one tenant inside its
//! host namespace. Pure: the engine applies what this returns, and `tenantplane
//! render isolation` prints it, so a preview and the enforced boundary are the same.
//!
//! What a profile compiles to:
//! - `defaultDenyNetworkPolicy`: NetworkPolicy `tenantplane-isolation`, denying all
//!   ingress and egress of every pod in the namespace except traffic among the
//!   namespace's pods, to and from the tenant's own control plane, and what the
//!   TenantCluster's `networking.egressPolicy` opens (DNS, or everything).
//! - `resources` on the TenantCluster: ResourceQuota `tenantplane-quota`.
//! - `requireResourceRequests`: LimitRange `tenantplane-limits` with per-container
//!   defaults, so pods that set nothing are still admitted under the quota.
//! - `podSecurity`: Pod Security Admission labels on the namespace (enforce, audit
//!   and warn at the same level).
//!
//! `runtimeClassName` and `apiFairness` are applied by the sync engine per pod and
//! per write; they have no host object of their own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tenantplane_api::{EgressPolicy, IsolationProfileSpec, ResourceLimits, TenantCluster};

use crate::metadata::{
    COMPONENT_CONTROL_PLANE, COMPONENT_ISOLATION, LABEL_COMPONENT, LABEL_CONTROL_PLANE_OF,
    LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};
use crate::name_rules::{NameError, validate_namespace_name, validate_tenant_name};
use crate::quantity::{QuantityError, approximate_value, validate_non_negative};

// Named per tenant, so TenantClusters sharing a host namespace never collide. They
// share the namespace's quota and limits (a ResourceQuota cannot select Pods by
// label), but each TenantCluster's policy selects and admits only its own Pods (see
// [`PodScope`]).

/// The NetworkPolicy of `tenant`: `tenantplane-isolation-<tenant>`.
pub fn network_policy_name(tenant: &str) -> String {
    format!("tenantplane-isolation-{tenant}")
}

/// The ResourceQuota of `tenant`: `tenantplane-quota-<tenant>`.
pub fn resource_quota_name(tenant: &str) -> String {
    format!("tenantplane-quota-{tenant}")
}

/// The LimitRange of `tenant`: `tenantplane-limits-<tenant>`.
pub fn limit_range_name(tenant: &str) -> String {
    format!("tenantplane-limits-{tenant}")
}

/// Pod Security Admission namespace label keys; each also gets a `-version` label.
pub const POD_SECURITY_MODES: [&str; 3] = [
    "pod-security.kubernetes.io/enforce",
    "pod-security.kubernetes.io/audit",
    "pod-security.kubernetes.io/warn",
];
/// Always the server's own latest policy, so an upgrade never silently keeps an old one.
pub const POD_SECURITY_VERSION: &str = "latest";

/// Per-container defaults of the LimitRange (each lowered to the quota's cap when
/// the cap is smaller, so a pod that sets nothing still fits).
pub const DEFAULT_CPU_REQUEST: &str = "100m";
pub const DEFAULT_CPU_LIMIT: &str = "1";
pub const DEFAULT_MEMORY_REQUEST: &str = "128Mi";
pub const DEFAULT_MEMORY_LIMIT: &str = "512Mi";

/// Cluster DNS, as kubeadm, k3s and most distributions label it. The namespace label
/// is set by Kubernetes 1.21 and later; older hosts must label kube-system themselves.
const DNS_NAMESPACE_LABEL: (&str, &str) = ("kubernetes.io/metadata.name", "kube-system");
const DNS_POD_LABEL: (&str, &str) = ("k8s-app", "kube-dns");
const DNS_PORT: i32 = 53;

/// Which Pods of the host namespace a boundary holds and lets talk to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodScope {
    /// Every Pod of the namespace: a namespace tenant (`Tenant`) owns it whole.
    Namespace,
    /// Only the TenantCluster's own Pods (`tenantplane.io/tenant=<name>`, a label
    /// only tenantplane writes): several TenantClusters may share a host namespace,
    /// and NetworkPolicies add up, so one's policy never admits another's Pods.
    TenantCluster,
}

/// Everything the compiler reads.
#[derive(Clone, Copy, Debug)]
pub struct IsolationInput<'a> {
    /// Whose Pods the NetworkPolicy selects and admits.
    pub pods: PodScope,
    /// The TenantCluster's name.
    pub tenant: &'a str,
    /// The namespace the tenant's workloads are synced into.
    pub host_namespace: &'a str,
    pub profile: &'a IsolationProfileSpec,
    /// The TenantCluster's `resources`.
    pub resources: Option<&'a ResourceLimits>,
    /// The TenantCluster's `networking.egressPolicy`.
    pub egress: EgressPolicy,
}

/// The compiled boundary. `None` means the profile asks for no such object (the
/// engine deletes one it made earlier).
#[derive(Clone, Debug, PartialEq)]
pub struct IsolationObjects {
    /// The host namespace with only the Pod Security labels: an apply that adds them
    /// to the existing namespace. It carries no tenantplane labels, because the
    /// namespace is not tenantplane's (it holds the TenantCluster itself) and must
    /// never be selected for garbage collection as if it were.
    pub namespace: Namespace,
    pub network_policy: Option<NetworkPolicy>,
    pub resource_quota: Option<ResourceQuota>,
    pub limit_range: Option<LimitRange>,
}

impl IsolationObjects {
    /// Every object as JSON with `apiVersion` and `kind`, in apply order.
    pub fn to_manifests(&self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut out = vec![serde_json::to_value(&self.namespace)?];
        if let Some(np) = &self.network_policy {
            out.push(serde_json::to_value(np)?);
        }
        if let Some(quota) = &self.resource_quota {
            out.push(serde_json::to_value(quota)?);
        }
        if let Some(limits) = &self.limit_range {
            out.push(serde_json::to_value(limits)?);
        }
        Ok(out)
    }
}

/// Input the compiler refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IsolationError {
    #[error("invalid tenant name: {0}")]
    Tenant(#[source] NameError),
    #[error("invalid host namespace: {0}")]
    Namespace(#[source] NameError),
    #[error("invalid resources.{field}: {source}")]
    Quantity {
        field: &'static str,
        #[source]
        source: QuantityError,
    },
    #[error("the TenantCluster has no {0}")]
    MissingMetadata(&'static str),
}

/// Compiles the boundary of one TenantCluster under its (already resolved) profile.
pub fn compile_for(
    tenant_cluster: &TenantCluster,
    profile: &IsolationProfileSpec,
) -> Result<IsolationObjects, IsolationError> {
    let meta = &tenant_cluster.metadata;
    compile(&IsolationInput {
        pods: PodScope::TenantCluster,
        tenant: meta
            .name
            .as_deref()
            .ok_or(IsolationError::MissingMetadata("name"))?,
        host_namespace: meta
            .namespace
            .as_deref()
            .ok_or(IsolationError::MissingMetadata("namespace"))?,
        profile,
        resources: tenant_cluster.spec.resources.as_ref(),
        egress: tenant_cluster.spec.networking.egress_policy,
    })
}

/// Compiles the boundary. Deterministic: the same input gives equal objects.
pub fn compile(input: &IsolationInput<'_>) -> Result<IsolationObjects, IsolationError> {
    validate_tenant_name(input.tenant).map_err(IsolationError::Tenant)?;
    validate_namespace_name(input.host_namespace).map_err(IsolationError::Namespace)?;
    let caps = Caps::parse(input.resources)?;
    let controls = input.profile.effective_controls();

    let mut namespace_labels = BTreeMap::new();
    for mode in POD_SECURITY_MODES {
        namespace_labels.insert(mode.to_owned(), controls.pod_security.as_str().to_owned());
        namespace_labels.insert(format!("{mode}-version"), POD_SECURITY_VERSION.to_owned());
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(input.host_namespace.to_owned()),
            labels: Some(namespace_labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };

    Ok(IsolationObjects {
        namespace,
        network_policy: controls
            .default_deny_network_policy
            .then(|| network_policy(input)),
        resource_quota: resource_quota(input, &caps),
        limit_range: controls
            .require_resource_requests
            .then(|| limit_range(input, &caps)),
    })
}

/// The `resources` caps, checked.
struct Caps<'a> {
    cpu: Option<&'a str>,
    memory: Option<&'a str>,
}

impl<'a> Caps<'a> {
    fn parse(resources: Option<&'a ResourceLimits>) -> Result<Self, IsolationError> {
        let check = |field: &'static str, q: Option<&'a Quantity>| match q {
            Some(q) => validate_non_negative(&q.0)
                .map(|()| Some(q.0.as_str()))
                .map_err(|source| IsolationError::Quantity { field, source }),
            None => Ok(None),
        };
        Ok(Self {
            cpu: check("cpu", resources.and_then(|r| r.cpu.as_ref()))?,
            memory: check("memory", resources.and_then(|r| r.memory.as_ref()))?,
        })
    }
}

fn object_meta(name: &str, input: &IsolationInput<'_>) -> ObjectMeta {
    let labels = [
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE),
        (LABEL_TENANT, input.tenant),
        (LABEL_COMPONENT, COMPONENT_ISOLATION),
    ];
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(input.host_namespace.to_owned()),
        labels: Some(string_map(&labels)),
        ..ObjectMeta::default()
    }
}

fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(string_map(pairs)),
        match_expressions: None,
    }
}

fn network_policy(input: &IsolationInput<'_>) -> NetworkPolicy {
    // Every pod in the namespace. Pods are deliberately not exempted by a pod label
    // here: a synced workload's pod template could carry one. Tenantplane's own
    // control-plane pods run in their own namespace (`<host namespace>-cp`, outside
    // this policy) and are exempted below as peers, by labels under `tenantplane.io/`
    // only: tenant-supplied `tenantplane.io/*` labels are stripped by the sync
    // transform, and the namespace label needs a Namespace, which tenants cannot
    // sync (cluster-scoped), so tenants cannot forge the exemption.
    let own_pods = match input.pods {
        PodScope::Namespace => LabelSelector::default(),
        PodScope::TenantCluster => match_labels(&[(LABEL_TENANT, input.tenant)]),
    };
    let same_namespace = NetworkPolicyPeer {
        pod_selector: Some(own_pods.clone()),
        ..NetworkPolicyPeer::default()
    };
    let own_control_plane = NetworkPolicyPeer {
        namespace_selector: Some(match_labels(&[(
            LABEL_CONTROL_PLANE_OF,
            input.host_namespace,
        )])),
        pod_selector: Some(match_labels(&[
            (LABEL_COMPONENT, COMPONENT_CONTROL_PLANE),
            (LABEL_TENANT, input.tenant),
        ])),
        ip_block: None,
    };
    let peers = vec![same_namespace, own_control_plane];
    // Ingress from the control plane too: the tenant API server calls the tenant's
    // own webhooks and aggregated API servers, which run as tenant pods.
    let ingress = vec![NetworkPolicyIngressRule {
        from: Some(peers.clone()),
        ports: None,
    }];
    let mut egress = vec![NetworkPolicyEgressRule {
        to: Some(peers),
        ports: None,
    }];
    match input.egress {
        EgressPolicy::DenyAll => {}
        EgressPolicy::AllowDns => egress.push(NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(match_labels(&[DNS_NAMESPACE_LABEL])),
                pod_selector: Some(match_labels(&[DNS_POD_LABEL])),
                ip_block: None,
            }]),
            ports: Some(
                ["UDP", "TCP"]
                    .into_iter()
                    .map(|protocol| NetworkPolicyPort {
                        port: Some(IntOrString::Int(DNS_PORT)),
                        protocol: Some(protocol.to_owned()),
                        end_port: None,
                    })
                    .collect(),
            ),
        }),
        // A rule without peers or ports allows all egress; ingress stays denied.
        EgressPolicy::AllowAll => egress.push(NetworkPolicyEgressRule::default()),
    }
    NetworkPolicy {
        metadata: object_meta(&network_policy_name(input.tenant), input),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(own_pods),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(ingress),
            egress: Some(egress),
        }),
    }
}

fn resource_quota(input: &IsolationInput<'_>, caps: &Caps<'_>) -> Option<ResourceQuota> {
    let mut hard = BTreeMap::new();
    for (resource, cap) in [("cpu", caps.cpu), ("memory", caps.memory)] {
        if let Some(cap) = cap {
            for kind in ["requests", "limits"] {
                hard.insert(format!("{kind}.{resource}"), Quantity(cap.to_owned()));
            }
        }
    }
    // `resources: {}` caps nothing: no quota rather than an empty one.
    if hard.is_empty() {
        return None;
    }
    Some(ResourceQuota {
        metadata: object_meta(&resource_quota_name(input.tenant), input),
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    })
}

/// The smaller of a default and the tenant's cap: a default above the whole quota
/// would make every pod that relies on it unschedulable.
fn capped(default: &str, cap: Option<&str>) -> Quantity {
    let smaller = match cap.and_then(|c| Some((c, approximate_value(c)?))) {
        Some((cap, cap_value)) if approximate_value(default).is_some_and(|d| cap_value < d) => cap,
        _ => default,
    };
    Quantity(smaller.to_owned())
}

fn limit_range(input: &IsolationInput<'_>, caps: &Caps<'_>) -> LimitRange {
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), capped(cpu, caps.cpu)),
            ("memory".to_owned(), capped(memory, caps.memory)),
        ])
    };
    LimitRange {
        metadata: object_meta(&limit_range_name(input.tenant), input),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".to_owned(),
                default_request: Some(quantities(DEFAULT_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)),
                default: Some(quantities(DEFAULT_CPU_LIMIT, DEFAULT_MEMORY_LIMIT)),
                ..LimitRangeItem::default()
            }],
        }),
    }
}

#[cfg(test)]
#[path = "isolation_tests.rs"]
mod tests;
