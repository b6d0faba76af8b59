//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why).
//! scripts/run-tests.sh runs its modules as one process, so the API servers
//! `policy_rules` hands on from test to test serve all of its tests, and one etcd
//! serves every module:
//! run-tests: one process

mod apiserver;
mod namespaces;
mod policy_rules;
mod pools;
mod tenancy_rules;
