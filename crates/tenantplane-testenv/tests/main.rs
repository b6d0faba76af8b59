//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why):
//! scripts/run-tests.sh runs one module per job.

mod pool;
mod real_node;
mod test_kubelet;
mod testenv;
