//! The pure half of the per-tenant DNS server: which record a name asks for, the
//! tenant's records indexed from its host objects, and the answer to a question.
//! The server (`tenantplane-dns`) feeds the index from watches and speaks DNS.

mod answer;
mod index;
mod name;
mod objects;
#[cfg(test)]
mod tests;

pub use answer::{Answer, QueryType, Record, answer};
pub use index::{
    DnsTenant, Endpoint, EndpointAddress, PodEntry, ServiceEntry, ServicePort, ServiceShape,
    TenantIndex, dashed,
};
pub use name::{QueryName, normalize, parse};
pub use objects::{
    COMPONENT_DNS, CONTAINER_PORT, DnsObjects, DnsServerSpec, dns_labels, dns_object_name,
    dns_objects, is_dns_object_of,
};

/// The TTL of every answer, in seconds: short, since the index follows watches and
/// Pods come and go (CoreDNS's kubernetes plugin also defaults to 5).
pub const TTL_SECONDS: u32 = 5;

/// The default cluster domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
