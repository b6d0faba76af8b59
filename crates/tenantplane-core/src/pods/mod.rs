//! Pods and everything they use, as pure functions: the references of a Pod, its
//! host Pod (references rewritten, pointed at the tenant's API server, tokens from
//! a host Secret, the IsolationProfile enforced), PVC/PV copies, what flows back to
//! the tenant, and which dependency copies are still needed.

pub mod controls;
pub mod dependents;
pub mod dns;
pub mod host_pod;
pub mod node;
pub mod refcount;
pub mod refs;
pub mod resource_metrics;
pub mod stats;
pub mod status;
pub mod step;
pub mod storage;
pub mod tokens;

pub use controls::{PodControls, PodRefusal, check_pod, check_service};
pub use dns::{PodDns, apply_pod_dns};
pub use host_pod::{
    HostPod, HostPodContext, HostPodError, TenantApiEndpoint, TokenProjection, to_host_pod,
};
pub use node::{KubeletEndpoint, NodeCaps, NodeView};
pub use refs::{Dependency, DependencyKind, PodReference, dependencies, pod_references};
