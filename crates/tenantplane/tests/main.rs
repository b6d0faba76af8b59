//! The CLI's and binary's integration tests, one binary (see the engine's tests/main.rs for why).
//! scripts/run-tests.sh runs every module but the real node's as one process, so the
//! pools of API servers in `servers` serve the tests of every module, not of one:
//! run-tests: one process

mod apiserver;
mod cli;
mod commands;
mod connect;
mod dns;
mod install;
mod kustomize;
mod namespace_webhook;
mod plugin;
mod provisioned;
mod real_node;
mod real_node_common;
mod samples;
mod servers;
mod shards;
mod status;
mod up_real_node;
mod webhook_metrics;
mod webhook_outage;
