//! `tenantplane-bench pods`: N Pods, each using 2 ConfigMaps and 1 Secret, synced
//! tenant -> host (every dependency copied before its Pod), against a plain client
//! writing the same objects to the same host API server, dependencies first.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::metadata::host_selector;
use tokio::sync::mpsc;

use super::controller::{ControllerMode, RunningController};
use super::{
    BASELINE_NS, HOST_NS, Servers, TENANT, TENANT_NS, create_tenant_cluster, describe_cpu,
    describe_writes, dynamic, install_tenantplane_objects, procfs, progress, rate, secs,
    start_servers,
};

#[derive(clap::Args, Clone)]
pub struct PodArgs {
    /// Pods to create; each uses 2 ConfigMaps and 1 Secret of its own.
    #[arg(long, default_value_t = 500)]
    pods: usize,
    /// Requests in flight for the baseline client, and the engine's writers per kind.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    #[command(flatten)]
    mode: ControllerMode,
}

/// The 4 objects of Pod `i` in `namespace`: 2 ConfigMaps, a Secret, then the Pod.
fn objects(namespace: &str, i: usize) -> [Value; 4] {
    let cm = |n: usize| format!("pod-{i:04}-cm-{n}");
    let secret = format!("pod-{i:04}-secret");
    [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm(0), "namespace": namespace}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm(1), "namespace": namespace}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace}, "stringData": {"password": "bench"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("pod-{i:04}"), "namespace": namespace},
               "spec": {"containers": [{"name": "app", "image": "nginx",
                   "envFrom": [{"configMapRef": {"name": cm(0)}}, {"secretRef": {"name": secret}}]}],
                   "volumes": [{"name": "cfg", "configMap": {"name": cm(1)}}]}}),
    ]
}

/// Creates the objects of every Pod, `workers` Pods at a time, each Pod's
/// dependencies before it.
async fn create_pods(client: &Client, namespace: &str, n: usize, workers: usize) -> Result<()> {
    futures::stream::iter((0..n).map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(workers.max(1), |i| {
            let client = client.clone();
            async move {
                for object in objects(namespace, i) {
                    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
                    let api = dynamic(&client, "v1", &kind, Some(namespace));
                    let body: DynamicObject = serde_json::from_value(object)?;
                    api.create(&PostParams::default(), &body)
                        .await
                        .with_context(|| format!("create {kind} of Pod {i}"))?;
                }
                Ok(())
            }
        })
        .await
}

/// Watches Pods in `namespace` (optionally by label); returns once listed.
async fn watch_pods(
    client: &Client,
    namespace: &str,
    labels: Option<String>,
) -> Result<(
    mpsc::UnboundedReceiver<(String, Instant)>,
    tokio::task::AbortHandle,
)> {
    let api = dynamic(client, "v1", "Pod", Some(namespace));
    let config = labels.map_or_else(watcher::Config::default, |l| {
        watcher::Config::default().labels(&l)
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    if tx
                        .send((p.metadata.name.unwrap_or_default(), Instant::now()))
                        .is_err()
                    {
                        return;
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(_) => {}
                Err(err) => progress(&format!("pod watch error (retrying): {err}")),
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), ready_rx)
        .await
        .context("the pod watch did not list within 30 s")?
        .context("the pod watch ended")?;
    Ok((rx, task.abort_handle()))
}

/// Waits until `n` distinct Pods were seen; returns when the last one was.
async fn all_seen(
    rx: &mut mpsc::UnboundedReceiver<(String, Instant)>,
    n: usize,
    start: Instant,
    deadline: Duration,
) -> Result<Instant> {
    let mut seen = HashSet::with_capacity(n);
    let mut last = start;
    while seen.len() < n {
        let remaining = deadline.saturating_sub(start.elapsed());
        let Ok(Some((name, at))) = tokio::time::timeout(remaining, rx.recv()).await else {
            bail!(
                "only {} of {n} Pods were seen on the host within {deadline:?}",
                seen.len()
            );
        };
        if seen.insert(name) {
            last = at;
        }
    }
    Ok(last)
}

pub async fn pod_benchmark(args: PodArgs) -> Result<()> {
    let n = args.pods;
    if n == 0 {
        bail!("--pods must be at least 1");
    }
    let workers = args.workers.max(1);
    args.mode.check()?;
    let load_at_start = super::procfs::load_average();
    let Servers {
        env: _env,
        host_server,
        tenant_server,
        host,
        tenant,
    } = start_servers(&[BASELINE_NS]).await?;
    install_tenantplane_objects(&host, &tenant_server, &[("v1", "Pod")]).await?;
    let controller = RunningController::start(&args.mode, &host_server, workers).await?;
    let mut watched = procfs::Watched::new(host_server.pid(), tenant_server.pid());
    if let Some(pid) = controller.pid() {
        watched.watch("controller process", pid);
    }
    let deadline = Duration::from_secs(300);

    progress(&format!(
        "baseline: a plain client creates {n} Pods with 2 ConfigMaps and 1 Secret each in {BASELINE_NS} ({workers} Pods in flight)"
    ));
    let (mut baseline_rx, baseline_watch) = watch_pods(&host, BASELINE_NS, None).await?;
    let before_baseline = host_server.request_counts().await?;
    let cpu_before_baseline = watched.cpu();
    let start = Instant::now();
    create_pods(&host_server.client().await?, BASELINE_NS, n, workers).await?;
    let baseline = all_seen(&mut baseline_rx, n, start, deadline)
        .await?
        .duration_since(start);
    let baseline_cpu = procfs::cpu_since(&cpu_before_baseline, &watched.cpu());
    baseline_watch.abort();
    let baseline_writes = host_server.request_counts().await?.since(&before_baseline);

    progress(&format!(
        "creating the {n} Pods and their dependencies in the tenant"
    ));
    create_pods(&tenant, TENANT_NS, n, workers).await?;
    let selector = host_selector(TENANT, &GroupKind::new("", "Pod"));
    let (mut host_rx, host_watch) = watch_pods(&host, HOST_NS, Some(selector)).await?;
    let before_sync = host_server.request_counts().await?;
    let tenant_before_sync = tenant_server.request_counts().await?;
    let cpu_before_sync = watched.cpu();
    progress("sync: creating TenantCluster dev; the clock runs until the host holds every Pod");
    let start = Instant::now();
    create_tenant_cluster(&host).await?;
    let sync = all_seen(&mut host_rx, n, start, deadline)
        .await?
        .duration_since(start);
    let sync_cpu = procfs::cpu_since(&cpu_before_sync, &watched.cpu());
    let tenant_writes_until_seen = tenant_server
        .request_counts()
        .await?
        .since(&tenant_before_sync);
    host_watch.abort();
    // Let the last dependency and status writes land before counting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sync_writes = host_server.request_counts().await?.since(&before_sync);
    controller.stop().await?;

    let ratio = sync.as_secs_f64() / baseline.as_secs_f64().max(f64::EPSILON);
    let objects = 4 * n;
    println!(
        "tenantplane pods benchmark (N={n} Pods, each with 2 ConfigMaps and 1 Secret; workers={workers})"
    );
    println!(
        "controller: {}; 1-min load average at start {load_at_start}",
        args.mode.describe()
    );
    println!(
        "baseline: plain client, {objects} creates (dependencies first): {:.2} s ({:.0} Pods/s)",
        secs(baseline),
        rate(n, baseline)
    );
    println!(
        "sync:     {n} Pods tenant->host with their dependencies: {:.2} s ({:.0} Pods/s)   ratio {ratio:.2}",
        secs(sync),
        rate(n, sync)
    );
    println!(
        "host writes, baseline: {}",
        describe_writes(&baseline_writes)
    );
    println!(
        "host writes, sync: {} ({:.3}/object)",
        describe_writes(&sync_writes),
        sync_writes.writes(None) as f64 / objects as f64
    );
    println!(
        "tenant writes, sync (until the host held every Pod): {}",
        describe_writes(&tenant_writes_until_seen)
    );
    println!("CPU, baseline: {}", describe_cpu(&baseline_cpu));
    println!("CPU, sync:     {}", describe_cpu(&sync_cpu));
    Ok(())
}
