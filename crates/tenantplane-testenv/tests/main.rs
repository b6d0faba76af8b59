//! This crate's integration tests, one binary (see tenantplane-engine's tests/main.rs for why).
//! scripts/run-tests.sh runs every module but the real node's as one process, so one
//! etcd serves them all and `test_kubelet`'s tests hand their host servers on:
//! run-tests: one process

mod pool;
mod real_node;
mod test_kubelet;
mod testenv;
