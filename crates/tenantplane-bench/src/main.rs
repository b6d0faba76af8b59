//! `tenantplane-bench`: measures tenantplane's sync engine against real etcd and
//! kube-apiserver processes, and compares it with a plain kube-rs client writing
//! the same objects to the same host API server in the same run.
//!
//! Not a test: it prints a report and fails only on errors, never on a missed
//! target (those are marked MISSED).

mod controller;
mod dns;
mod fixtures;
mod pods;
mod procfs;
mod scale;
mod sync;

use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub(crate) use crate::fixtures::*;
use crate::sync::sync_benchmark;

const HOST_NS: &str = "team-dev";
const BASELINE_NS: &str = "baseline";
const BASELINE_AFTER_NS: &str = "baseline-after";
const WARMUP_NS: &str = "warmup";
/// Untimed creates before the baseline, so neither side meets a cold API server.
const WARMUP_OBJECTS: usize = 200;
const TENANT_NS: &str = "bench";
const TENANT: &str = "dev";
/// The schema's maxima (qps <= 10000, burst <= 100000): far above what one API
/// server on two cores can take, so the budget never makes a writer wait.
const FAIRNESS_QPS: u32 = 10_000;
const FAIRNESS_BURST: u32 = 100_000;
const DRIFT_INTERVAL: &str = "10m";
/// After a phase, time for the recorder's last SyncDecision flush and folded-Event
/// summary (each once a second) and the TenantCluster's 2 s status requeue.
const SETTLE: Duration = Duration::from_secs(3);
const UPDATE_TIMEOUT: Duration = Duration::from_secs(30);

const TARGET_RATIO: f64 = 1.2;
const TARGET_P99_MS: f64 = 200.0;

#[derive(Parser)]
#[command(
    name = "tenantplane-bench",
    version,
    about = "Benchmarks of tenantplane's sync engine on real API servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// ConfigMaps tenant -> host, against a plain client on the same host API server.
    Sync(SyncArgs),
    /// Pods with 2 ConfigMaps and 1 Secret each, tenant -> host, against a plain client.
    Pods(pods::PodArgs),
    /// Queries per second and p99 of `tenantplane dns`, against a plain UDP responder.
    Dns(dns::DnsArgs),
    /// N TenantClusters x M ConfigMaps through one controller process, against a
    /// plain client's N x M creates.
    Scale(scale::ScaleArgs),
}

#[derive(clap::Args, Clone)]
struct SyncArgs {
    /// ConfigMaps to create (in the tenant, and in the baseline).
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Requests in flight for the baseline client, and the engine's writers per kind.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Single-object updates for the latency phase, one after another.
    #[arg(long, default_value_t = 200)]
    updates: usize,
    /// Bytes of payload per ConfigMap.
    #[arg(long, default_value_t = 256)]
    payload_bytes: usize,
    #[command(flatten)]
    mode: controller::ControllerMode,
}

#[tokio::main]
async fn main() -> Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The test servers refuse connections until they are ready; kube's
                // client logs each refused probe as an error.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(
                        "warn,kube_client::client::builder=off,kube_client::client=error",
                    )
                }),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let cli = Cli::parse();
    match cli.command {
        Command::Sync(args) => sync_benchmark(args).await,
        Command::Pods(args) => pods::pod_benchmark(args).await,
        Command::Dns(args) => dns::dns_benchmark(args).await,
        Command::Scale(args) => scale::scale_benchmark(args).await,
    }
}
