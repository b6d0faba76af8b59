//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why).
//! scripts/run-tests.sh runs every module but the real node's as one process, so the
//! pools of host and tenant API servers (`common`) serve the tests of every module:
//! run-tests: one process

mod common;
mod kubectl;
mod node_proxy;
mod real_node;
mod refusals;
