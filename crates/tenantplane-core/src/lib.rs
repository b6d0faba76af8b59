//! tenantplane's pure core: everything that decides *what* a host object is, with
//! no I/O. The offline CLI and the running engine call the same functions, so a
//! prediction and the engine's action cannot drift apart.

pub mod compare;
pub mod conditions;
pub mod control_plane;
pub mod dns;
pub mod explain;
pub mod from_host;
pub mod from_host_admission;
pub mod hex;
pub mod host_events;
pub mod isolation;
pub mod kinds;
pub mod membership;
pub mod metadata;
pub mod name_rules;
pub mod naming;
pub mod plan;
pub mod pods;
pub mod policy_rules;
pub mod pool;
pub mod provenance;
pub mod provisioner;
pub mod quantity;
pub mod revocation;
pub mod selector;
pub mod selectors;
pub mod services;
pub mod sharding;
pub mod tenancy;
pub mod tenant_admission;
pub mod tenant_cluster_status;
pub mod tenant_plan;
pub mod three_way;
pub mod token_bucket;
pub mod transform;
pub mod validation;
pub mod versions;
pub mod write_outcome;
