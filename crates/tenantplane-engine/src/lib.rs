//! tenantplane's engine: the sync engine of each TenantCluster and the controller
//! that runs them. Everything that decides *what* to write lives in the pure
//! `tenantplane-core`; this crate watches, queues, writes and reports.

pub mod controller;
pub mod converge;
pub mod decisions;
mod deletion;
pub mod engine;
pub mod fairness;
pub mod from_host;
pub mod host_watches;
pub mod isolation;
pub mod kind_sync;
pub mod leader;
pub mod metrics;
#[cfg(test)]
mod mock_api;
pub mod pools;
pub mod provision;
pub mod provisioner;
pub mod queue;
pub mod shards;
pub mod status_alarm;
pub mod store_ready;
pub mod tenancy;
pub mod tenant_client;
pub mod tenant_dns;
mod unanswered;
pub mod write_limit;
