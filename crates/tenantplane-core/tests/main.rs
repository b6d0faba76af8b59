//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why):
//! scripts/run-tests.sh runs one module per job.

mod pods;
mod policy_rules_properties;
mod pool_properties;
mod properties;
mod tenant_admission_properties;
mod tenant_plan;
