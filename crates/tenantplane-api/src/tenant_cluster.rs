//! `TenantCluster`: one virtual tenant with its own API server.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{LocalRef, SecretKeyRef};

/// A virtual tenant: its own API server, whose objects tenantplane syncs into this
/// TenantCluster's namespace on the host.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "TenantCluster",
    namespaced,
    shortname = "tc",
    category = "tenantplane",
    status = "TenantClusterStatus",
    doc = "A virtual tenant with its own API server, synced into this namespace on the host.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.kubernetesVersion"
    ),
    printcolumn(
        name = "Profile",
        type_ = "string",
        json_path = ".spec.isolationProfileRef.name"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".status.endpoint",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TenantClusterSpec {
    /// How the tenant shares the host. Only `shared` is implemented; `dedicated` and
    /// `private` are accepted, reconciled as `shared`, and reported through the
    /// `ModeSupported` condition.
    #[serde(default)]
    pub mode: ClusterMode,
    /// Kubernetes version of the tenant control plane, as `v1.MINOR`.
    #[serde(default = "default_kubernetes_version")]
    #[schemars(regex(pattern = r"^v1\.[0-9]+(\.[0-9]+)?$"))]
    pub kubernetes_version: String,
    /// The cluster-scoped IsolationProfile that bounds this tenant on the host.
    pub isolation_profile_ref: LocalRef,
    /// The cluster-scoped SyncPolicy that says which kinds are synced, and how.
    pub sync_policy_ref: LocalRef,
    /// The tenant's API server: provisioned by tenantplane, or an external one.
    #[serde(default)]
    pub control_plane: ControlPlane,
    #[serde(default)]
    pub networking: Networking,
    #[serde(default)]
    pub migration: Migration,
    /// Caps for the tenant's ResourceQuota on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceLimits>,
    /// What the tenant sees of the host nodes its Pods run on.
    #[serde(default)]
    pub nodes: Nodes,
}

/// The tenant's Nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Nodes {
    /// How host nodes appear in the tenant; `virtual` (the default) reveals least.
    #[serde(default)]
    pub mode: NodeMode,
    /// Show each tenant Node's CPU and memory capacity and allocatable at most at the
    /// TenantCluster's `resources`, so the tenant's schedulers and dashboards see
    /// what it may use rather than the host node's size. Off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cap_resources: bool,
}

/// How host nodes appear in the tenant. In every mode a tenant Node carries only
/// the allow-listed host labels (topology zone/region, arch, os), no host
/// annotations or taints, no host address, and scrubbed node info; it advertises
/// tenantplane's kubelet endpoint, never the host kubelet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NodeMode {
    /// One tenant Node per host node that runs this tenant's Pods, named
    /// `tenantplane-<hash>` (the host name is not revealed); removed when no
    /// tenant Pod runs there any more.
    #[default]
    Virtual,
    /// Like `virtual`, but the tenant Node has the host node's real name.
    Mirror,
    /// A virtual Node for every schedulable host node; the tenant binds its Pods
    /// itself (`spec.nodeName` or its own scheduler). Only Pods bound to one of
    /// these Nodes are synced, pinned to the matching host node; the others wait.
    Scheduled,
}

impl NodeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeMode::Virtual => "virtual",
            NodeMode::Mirror => "mirror",
            NodeMode::Scheduled => "scheduled",
        }
    }
}

fn default_kubernetes_version() -> String {
    "v1.31".to_owned()
}

/// How a tenant shares the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClusterMode {
    /// Tenant workloads run on shared host nodes in the tenant's namespace.
    #[default]
    Shared,
    /// Tenant workloads on nodes reserved for the tenant (not implemented yet).
    Dedicated,
    /// A fully private data plane (not implemented yet).
    Private,
}

impl ClusterMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Shared => "shared",
            ClusterMode::Dedicated => "dedicated",
            ClusterMode::Private => "private",
        }
    }
}

/// The Kubernetes distribution a provisioned control plane runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Distro {
    /// One k3s server (API server, controllers and SQLite in one process).
    #[default]
    K3s,
    /// Upstream kube-apiserver, kube-controller-manager and etcd, one container each
    /// in one Pod.
    K8s,
}

impl Distro {
    pub fn as_str(self) -> &'static str {
        match self {
            Distro::K3s => "k3s",
            Distro::K8s => "k8s",
        }
    }
}

/// Images of a provisioned control plane. Each one left out is the default for
/// `spec.kubernetesVersion`; one given replaces it as is (keep it at that version).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneImages {
    /// The k3s server (distro `k3s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k3s: Option<String>,
    /// kube-apiserver (distro `k8s`); the binary is found on the image's PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<String>,
    /// kube-controller-manager (distro `k8s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<String>,
    /// etcd (distro `k8s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<String>,
}

impl ControlPlaneImages {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// The tenant control plane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// Control-plane replicas (one k3s server with SQLite, or one etcd member, runs
    /// exactly one).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1))]
    pub replicas: i32,
    /// The distribution provisioned when `external` is absent.
    #[serde(default)]
    pub distro: Distro,
    /// Image overrides for the distribution's components.
    #[serde(default, skip_serializing_if = "ControlPlaneImages::is_empty")]
    pub images: ControlPlaneImages,
    #[serde(default)]
    pub datastore: Datastore,
    #[serde(default)]
    pub storage: Storage,
    #[serde(default)]
    pub expose: Expose,
    /// Extra subject alternative names for the API server's serving certificate.
    #[serde(default, rename = "extraSANs", skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub extra_sans: Vec<String>,
    /// Attach an API server that already runs instead of provisioning one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalControlPlane>,
}

impl Default for ControlPlane {
    fn default() -> Self {
        Self {
            replicas: default_replicas(),
            distro: Distro::default(),
            images: ControlPlaneImages::default(),
            datastore: Datastore::default(),
            storage: Storage::default(),
            expose: Expose::default(),
            extra_sans: Vec::new(),
            external: None,
        }
    }
}

fn default_replicas() -> i32 {
    1
}

/// The control plane's datastore.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Datastore {
    #[default]
    Sqlite,
}

/// The control plane's persistent volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// StorageClass of the control plane's PVC; empty means the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Size of the control plane's PVC.
    #[serde(default = "default_storage_size")]
    pub size: Quantity,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            storage_class_name: None,
            size: default_storage_size(),
        }
    }
}

fn default_storage_size() -> Quantity {
    Quantity("5Gi".to_owned())
}

/// How the tenant API server is reached from outside the host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Expose {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
}

/// A LoadBalancer Service in front of the tenant API server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    #[serde(default)]
    pub enabled: bool,
    /// Annotations for the LoadBalancer Service (cloud provider settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An API server tenantplane does not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalControlPlane {
    /// A Secret in this namespace holding a kubeconfig for the tenant API server.
    pub kubeconfig_secret_ref: SecretKeyRef,
    /// A Secret in this namespace whose `tls.crt` is the client certificate this
    /// tenant API server presents to tenantplane's kubelet endpoint (its
    /// `--kubelet-client-certificate`). Only the certificate is read. Without it
    /// the endpoint does not know this tenant and refuses its calls (`kubectl logs`
    /// and `exec` do not work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_client_certificate_secret_ref: Option<LocalRef>,
}

/// Network boundary settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    #[serde(default)]
    pub egress_policy: EgressPolicy,
}

/// What tenant pods may reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EgressPolicy {
    /// No egress at all, not even DNS.
    DenyAll,
    /// Egress to cluster DNS only.
    #[default]
    #[serde(rename = "allowDNS")]
    AllowDns,
    /// Egress unrestricted (ingress stays default-deny).
    AllowAll,
}

/// Mode migration settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Migration {
    /// Whether `mode` may change after creation.
    #[serde(default)]
    pub allow_mode_change: bool,
}

/// Caps on what the tenant may request on the host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLimits {
    /// CPU cap for the tenant's pods together, such as `8` or `8000m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory cap for the tenant's pods together, such as `16Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// Observed state of a TenantCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantClusterStatus {
    // `with`: a plain enum in the schema; `Option<Enum>` would add `null` to the
    // enum, which Kubernetes 1.20 cannot decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "TenantClusterPhase")]
    pub phase: Option<TenantClusterPhase>,
    /// In-cluster URL of the tenant API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Address of the LoadBalancer in front of the tenant API server, when exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_endpoint: Option<String>,
    /// The spec generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Every kind ever synced to the host for this tenant, so deleting the
    /// TenantCluster removes their host copies even after a kind left the SyncPolicy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synced_resources: Vec<SyncedResource>,
}

/// A kind with host copies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncedResource {
    pub api_version: String,
    pub kind: String,
}

/// Lifecycle phase of a TenantCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TenantClusterPhase {
    Pending,
    Provisioning,
    Ready,
    Degraded,
}
