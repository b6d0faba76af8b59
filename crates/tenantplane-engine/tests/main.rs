//! The engine's integration tests, one binary with one module per former test file.
//! Each test file was a binary of its own, linked against everything: merging the 17
//! cut rebuilding the tests after an engine change from 31-32 s to 20-21 s (two
//! cores). scripts/run-tests.sh runs every module but `real_node` (the node lane's)
//! as one process, so the shared host and the pools of host and tenant API servers
//! serve the tests of every module, not of one:
//! run-tests: one process

mod dns;
mod harness;
mod leader;
mod lifecycle;
mod nodes;
mod pods;
mod pools;
mod provision;
mod provisioner;
mod real_node;
mod revoke;
mod selectors;
mod services;
mod shards;
mod sync;
mod tenants;
mod two_way;
