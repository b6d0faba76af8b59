//! tenantplane's per-tenant DNS server. It watches one TenantCluster's host
//! Services, Endpoints and Pods, keeps its records in memory
//! ([`tenantplane_core::dns::TenantIndex`]), answers names under the cluster
//! domain itself and forwards everything else to an upstream resolver.

mod forward;
mod server;
mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

pub use forward::upstream_from_resolv_conf;
pub use server::{Listeners, TenantDnsHandler, serve};
pub use watch::{WatchError, feed_index};

use tenantplane_core::dns::{DnsTenant, TenantIndex};

/// The index shared by the watches (writers) and the request handler (readers).
pub type SharedIndex = Arc<RwLock<TenantIndex>>;

/// A fresh, empty index for `tenant`.
pub fn shared_index(tenant: DnsTenant) -> SharedIndex {
    Arc::new(RwLock::new(TenantIndex::new(tenant)))
}

/// How one server answers.
#[derive(Clone, Debug)]
pub struct DnsSettings {
    /// Normalised cluster domain, such as `cluster.local`.
    pub cluster_domain: String,
    /// Where names outside the cluster domain go.
    pub upstream: SocketAddr,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the DNS server failed: {0}")]
    Serve(String),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("no upstream resolver: {0}")]
    Upstream(String),
}
