//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why):
//! scripts/run-tests.sh runs one module per job.

mod apiserver;
mod namespaces;
mod policy_rules;
mod pools;
mod tenancy_rules;
