//! The pure half of the per-tenant DNS server: which record a name asks for, the
//! tenant's records indexed from its host objects, and the answer to a question.
//! The server (`tenantplane-dns`) feeds the index from watches and speaks DNS.

mod answer;
mod index;
mod name;
#[cfg(test)]
mod tests;

pub use answer::{Answer, QueryType, Record, answer};
pub use index::{
    DnsTenant, Endpoint, EndpointAddress, PodEntry, ServiceEntry, ServicePort, ServiceShape,
    TenantIndex, dashed,
};
pub use name::{QueryName, normalize, parse};

/// The TTL of every answer, in seconds: short, since the index follows watches and
/// Pods come and go (CoreDNS's kubernetes plugin also defaults to 5).
pub const TTL_SECONDS: u32 = 5;

/// The default cluster domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
