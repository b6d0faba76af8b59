//! The controller under benchmark: by default the `tenantplane controller`
//! process, the release binary run as a user runs it (its own process, its own
//! host client with the write cap, its logging); with `--in-process`, the engine
//! in the benchmark's own process, for comparison. Both are read the same way:
//! through the Prometheus text of their metrics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use prometheus_client::registry::Registry;
use tenantplane_engine::controller::{self, ControllerConfig};
use tenantplane_engine::metrics::Metrics;
use tenantplane_testenv::ApiServer;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::TENANT;

/// How the benchmark runs the controller.
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerMode {
    /// The `tenantplane` binary to run as the controller (scripts/bench.sh builds
    /// the release one).
    #[arg(long, default_value = "target/release/tenantplane")]
    pub controller: PathBuf,
    /// Run the engine inside the benchmark process instead of the binary (no
    /// process boundary, no host write cap, no logging): for comparison only.
    #[arg(long)]
    pub in_process: bool,
}

impl ControllerMode {
    /// Fails early, before any server starts, when the binary is missing.
    pub fn check(&self) -> Result<()> {
        if !self.in_process && !self.controller.exists() {
            bail!(
                "no controller binary at {} (scripts/bench.sh builds it; or pass --controller, or --in-process)",
                self.controller.display()
            );
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        if self.in_process {
            "in the benchmark process (--in-process)".into()
        } else {
            format!("the {} controller process", self.controller.display())
        }
    }
}

/// The `tenantplane controller` process; SIGTERM when stopped or dropped.
pub struct ControllerProcess {
    child: Option<Child>,
    metrics_port: u16,
    log: PathBuf,
}

impl ControllerProcess {
    /// Starts `binary controller` against `host` with `extra` arguments; its log
    /// goes to a file kept after the run (named in errors).
    pub fn start(binary: &Path, host: &ApiServer, workers: usize, extra: &[&str]) -> Result<Self> {
        let metrics_port = tenantplane_testenv::free_port()?;
        let log = std::env::temp_dir().join(format!(
            "tenantplane-bench-controller-{}-{metrics_port}.log",
            std::process::id()
        ));
        let child = Command::new(binary)
            .args([
                "controller",
                "--kubeconfig",
                &host.kubeconfig_path().display().to_string(),
                "--listen",
                &format!("127.0.0.1:{metrics_port}"),
                "--workers",
                &workers.to_string(),
                // No Pod runs here: host Pods keep the host's DNS.
                "--no-tenant-dns",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).with_context(|| log.display().to_string())?)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        Ok(Self {
            child: Some(child),
            metrics_port,
            log,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its `/metrics` text (an error while it does not answer).
    pub async fn metrics(&self) -> Result<String> {
        match tenantplane_testenv::http_get(self.metrics_port, "/metrics").await {
            Some((200, body)) => Ok(body),
            Some((code, _)) => bail!("/metrics answered {code}"),
            None => bail!("the controller does not answer on its metrics port"),
        }
    }

    /// SIGTERM, then waits for it to exit.
    pub fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .context("kill -TERM the controller")?;
        child.wait().context("wait for the controller")?;
        Ok(())
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

/// The controller of one benchmark phase, in either mode.
pub enum RunningController {
    Process(ControllerProcess),
    InProcess {
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
        registry: Arc<Registry>,
    },
}

impl RunningController {
    pub async fn start(mode: &ControllerMode, host: &ApiServer, workers: usize) -> Result<Self> {
        if !mode.in_process {
            let process = ControllerProcess::start(&mode.controller, host, workers, &[])?;
            return Ok(Self::Process(process));
        }
        // Its own client (and connection pool), as in a deployment.
        let client: Client = host.client().await?;
        // Nobody subscribes: decisions still go to Events and the SyncDecision.
        let (decisions, _) = broadcast::channel(1024);
        let shutdown = CancellationToken::new();
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let config = ControllerConfig {
            host: client,
            metrics,
            decisions,
            instance: "bench".into(),
            workers,
            host_unreachable_release:
                tenantplane_engine::kind_sync::DEFAULT_HOST_UNREACHABLE_RELEASE,
            service_cidr: tenantplane_engine::provision::DEFAULT_SERVICE_CIDR.into(),
            dns: None,
            kubelet_endpoint: None,
            tenant_webhook: None,
            shards: None,
            namespace: None,
        };
        let task = tokio::spawn(controller::run(config, shutdown.clone()));
        Ok(Self::InProcess {
            shutdown,
            task,
            registry: Arc::new(registry),
        })
    }

    /// The controller's own process, when it has one.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::Process(process) => process.pid(),
            Self::InProcess { .. } => None,
        }
    }

    /// Its metrics as Prometheus text.
    pub async fn metrics(&self) -> Result<String> {
        match self {
            Self::Process(process) => process.metrics().await,
            Self::InProcess { registry, .. } => {
                let mut text = String::new();
                prometheus_client::encoding::text::encode(&mut text, registry)
                    .context("encode the metrics")?;
                Ok(text)
            }
        }
    }

    /// The value of counter `name` (its `_total` sample) whose labels include
    /// `label="value"`; 0 when there is none yet.
    pub async fn counter(&self, name: &str, label: &str, value: &str) -> Result<u64> {
        Ok(counter_in(&self.metrics().await?, name, label, value))
    }

    /// Waits until the engine of `dev` completed `n` full passes.
    pub async fn wait_passes(&self, n: u64, deadline: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            // Not answering yet (a process starting) counts as no pass.
            let passes = self
                .counter("tenantplane_sync_passes", "tenant", TENANT)
                .await
                .unwrap_or(0);
            if passes >= n {
                return Ok(());
            }
            if start.elapsed() > deadline {
                let log = match self {
                    Self::Process(process) => format!("; see {}", process.log().display()),
                    Self::InProcess { .. } => String::new(),
                };
                bail!("the engine did not complete {n} full passes within {deadline:?}{log}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(self) -> Result<()> {
        match self {
            Self::Process(process) => process.stop(),
            Self::InProcess { shutdown, task, .. } => {
                shutdown.cancel();
                task.await.context("the controller task panicked")
            }
        }
    }
}

/// The sum of the samples of counter `name` (`name_total`) whose labels include
/// `label="value"`.
pub fn counter_in(text: &str, name: &str, label: &str, value: &str) -> u64 {
    let sample = format!("{name}_total{{");
    let wanted = format!("{label}=\"{value}\"");
    text.lines()
        .filter_map(|line| line.strip_prefix(&sample))
        .filter_map(|rest| rest.split_once('}'))
        .filter(|(labels, _)| labels.split(',').any(|l| l == wanted))
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .map(|v| v.max(0.0).round() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::counter_in;

    #[test]
    fn a_counter_is_read_by_one_of_its_labels() {
        let text = "# HELP tenantplane_sync_passes Full passes\n\
                    tenantplane_sync_passes_total{tenant=\"dev\",kind=\"ConfigMap\"} 3\n\
                    tenantplane_sync_passes_total{tenant=\"dev\",kind=\"Secret\"} 2\n\
                    tenantplane_sync_passes_total{tenant=\"other\"} 9\n\
                    tenantplane_sync_passes_created{tenant=\"dev\"} 1.7e9\n\
                    tenantplane_host_writes_total{verb=\"create\"} 2000\n";
        assert_eq!(
            counter_in(text, "tenantplane_sync_passes", "tenant", "dev"),
            5
        );
        assert_eq!(
            counter_in(text, "tenantplane_host_writes", "verb", "create"),
            2000
        );
        assert_eq!(
            counter_in(text, "tenantplane_host_writes", "verb", "update"),
            0
        );
        assert_eq!(counter_in(text, "tenantplane_sync", "tenant", "dev"), 0);
    }
}
