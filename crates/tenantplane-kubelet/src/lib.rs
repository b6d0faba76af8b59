//! tenantplane's kubelet endpoint (issue 11): the kubelet API (`containerLogs`,
//! `exec`, `attach`, `portForward`, `run`, `stats/summary`, `metrics/resource`) served to tenant API
//! servers for their tenant Nodes, each call translated to the host Pod through the
//! HOST API server (`pods/log`, `pods/exec` (also for [`run`]), `pods/attach`,
//! `pods/portforward`; port-forward over SPDY/3.1, [`spdy`] and [`portforward`];
//! the node figures through `nodes/proxy`, filtered to the tenant's Pods, [`stats`])
//! with the controller's own client; never to a host kubelet directly.
//!
//! Callers are identified by the SHA-256 fingerprint of their TLS client
//! certificate ([`registry`], fed by [`feeder`]); a path is served only for a host
//! Pod that reverse-maps to a synced Pod of exactly that TenantCluster
//! ([`authz`]), otherwise 403 and a Skip decision through the engine's recorder of
//! that TenantCluster. This crate depends on the engine (for
//! [`tenantplane_engine::decisions::DecisionRoutes`]); the engine knows nothing
//! of it.

pub mod authz;
pub mod feeder;
pub mod portforward;
pub mod registry;
pub mod run;
pub mod server;
pub mod spdy;
pub mod stats;
pub mod stream;
pub mod tls;

pub use registry::{KubeletRegistry, SharedRegistry, TenantClusterKey};
pub use server::{KubeletState, router, serve};
pub use tls::{ServingCert, server_config, server_config_with};

/// The Secret key holding the client certificate a tenant API server presents.
pub const CLIENT_CERT_KEY: &str = "tls.crt";

/// The Secret tenantplane issues for a provisioned control plane's kubelet client.
pub fn provisioned_client_secret(tenant_cluster: &str) -> String {
    format!("{tenant_cluster}-kubelet-client")
}
