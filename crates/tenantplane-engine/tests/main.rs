//! The engine's integration tests, one binary: each module was its own test binary, and linking
//! 17 of them cost more than running them (scripts/run-tests.sh still runs one module per job).

mod harness;
mod dns;
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
