//! `tenantplane-bench`: measures tenantplane's sync engine against real etcd and
//! kube-apiserver processes, and compares it with a plain kube-rs client writing
//! the same objects to the same host API server in the same run.
//!
//! Not a test: it prints a report and fails only on errors, never on a missed
//! target (those are marked MISSED).

mod controller;
mod dns;
mod pods;
mod procfs;
mod scale;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::{ByteString, Metadata};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::metadata::host_selector;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::stamp_desired_hash;
use tenantplane_core::transform::{TenantTarget, to_host};
use tenantplane_engine::decisions::MANAGER;
use tenantplane_testenv::{ApiServer, RequestCounts, TestEnv, WRITE_VERBS};
use tokio::sync::mpsc;

use crate::controller::RunningController;

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

/// etcd, the host and tenant API servers and their clients.
struct Servers {
    env: TestEnv,
    host_server: ApiServer,
    tenant_server: ApiServer,
    host: Client,
    tenant: Client,
}

/// Starts the servers, installs tenantplane's CRDs on the host, and creates the
/// host namespace, `host_namespaces` and the tenant namespace.
async fn start_servers(host_namespaces: &[&str]) -> Result<Servers> {
    progress("starting etcd and the host and tenant API servers");
    let env = TestEnv::start().await.context(
        "start etcd (run scripts/test-apiserver.sh, or set KUBEBUILDER_ASSETS to a directory \
         holding etcd and kube-apiserver)",
    )?;
    let host_server = env.start_apiserver("host").await?;
    let tenant_server = env.start_apiserver("tenant").await?;
    let host = host_server.client().await?;
    let tenant = tenant_server.client().await?;
    host_server.install_crds(tenantplane_api::crds()).await?;
    create_namespace(&host, HOST_NS).await?;
    for ns in host_namespaces {
        create_namespace(&host, ns).await?;
    }
    create_namespace(&tenant, TENANT_NS).await?;
    Ok(Servers {
        env,
        host_server,
        tenant_server,
        host,
        tenant,
    })
}

fn progress(message: &str) {
    eprintln!("[bench] {message}");
}

/// One ConfigMap of the benchmark: the same payload on every side.
fn configmap(name: &str, payload: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            [
                ("payload".to_owned(), payload.to_owned()),
                ("rev".to_owned(), "0".to_owned()),
            ]
            .into(),
        ),
        ..ConfigMap::default()
    }
}

/// Creates every named ConfigMap with `workers` requests in flight; returns the time.
async fn create_all(
    api: &Api<ConfigMap>,
    names: &[String],
    payload: &str,
    workers: usize,
) -> Result<Duration> {
    let start = Instant::now();
    futures::stream::iter(names.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(workers.max(1), |name| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &configmap(name, payload))
                    .await
                    .with_context(|| format!("create ConfigMap {name}"))?;
                Ok(())
            }
        })
        .await?;
    Ok(start.elapsed())
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("create namespace {name}"))?;
    Ok(())
}

fn dynamic(client: &Client, api_version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Creates an object given as JSON (apiVersion, kind, metadata.namespace).
async fn create_json(client: &Client, object: Value) -> Result<()> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let ns = object["metadata"]["namespace"].as_str().map(str::to_owned);
    let api = dynamic(client, &api_version, &kind, ns.as_deref());
    let body: DynamicObject = serde_json::from_value(object)?;
    api.create(&PostParams::default(), &body)
        .await
        .with_context(|| format!("create {kind}"))?;
    Ok(())
}

/// IsolationProfile `name`: level baseline, with a write budget that never makes a
/// writer wait (see [`FAIRNESS_QPS`]).
async fn create_unthrottled_profile(host: &Client, name: &str) -> Result<()> {
    create_json(
        host,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
               "metadata": {"name": name},
               "spec": {"level": "baseline",
                        "controls": {"apiFairness": {"qps": FAIRNESS_QPS, "burst": FAIRNESS_BURST}}}}),
    )
    .await
}

/// The tenantplane objects of the benchmark, except the TenantCluster.
async fn install_tenantplane_objects(
    host: &Client,
    tenant_server: &ApiServer,
    kinds: &[(&str, &str)],
) -> Result<()> {
    let resources: Vec<Value> = kinds
        .iter()
        .map(|(api_version, kind)| json!({"apiVersion": api_version, "kind": kind, "direction": "toHost"}))
        .collect();
    create_unthrottled_profile(host, "bench").await?;
    create_json(
        host,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
               "metadata": {"name": "bench"},
               "spec": {"driftDetection": {"enabled": true, "interval": DRIFT_INTERVAL},
                        "explain": {"recordDecisions": true, "retain": 100},
                        "resources": resources}}),
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(host.clone(), HOST_NS);
    let kubeconfig = tenant_server.kubeconfig_yaml("admin")?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("dev-kubeconfig".into()),
            ..ObjectMeta::default()
        },
        data: Some([("kubeconfig".to_owned(), ByteString(kubeconfig.into_bytes()))].into()),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .context("create the kubeconfig Secret")?;
    Ok(())
}

async fn create_tenant_cluster(host: &Client) -> Result<()> {
    create_json(
        host,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": TENANT, "namespace": HOST_NS},
               "spec": {"isolationProfileRef": {"name": "bench"}, "syncPolicyRef": {"name": "bench"},
                        "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "dev-kubeconfig"}}}}}),
    )
    .await
}

/// Waits until TenantCluster `dev` reports `Synced=True`.
async fn wait_synced(host: &Client, deadline: Duration) -> Result<()> {
    let api = dynamic(
        host,
        "tenantplane.io/v1alpha1",
        "TenantCluster",
        Some(HOST_NS),
    );
    let start = Instant::now();
    loop {
        let tc = api.get(TENANT).await.context("read TenantCluster dev")?;
        let synced = tc.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Synced" && c["status"] == "True")
            });
        if synced {
            return Ok(());
        }
        if start.elapsed() > deadline {
            bail!("TenantCluster dev was not Synced within {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A host ConfigMap of the tenant as seen by the benchmark's watch: its name, its
/// `rev` value and when the event arrived.
struct Seen {
    name: String,
    rev: Option<String>,
    at: Instant,
}

/// Watches the tenant's host ConfigMaps; returns once the initial list is done.
async fn watch_host_copies(
    host: &Client,
) -> Result<(mpsc::UnboundedReceiver<Seen>, tokio::task::AbortHandle)> {
    let group_kind = GroupKind::from_api_version("v1", "ConfigMap")?;
    watch_configmaps(host, HOST_NS, Some(host_selector(TENANT, &group_kind))).await
}

/// Times creating `names` in `namespace` the way the sync is timed: from the first
/// create until the benchmark's host watch has seen every object, so both sides
/// pay for the same observing watch.
async fn timed_baseline(
    client: &Client,
    namespace: &str,
    names: &[String],
    payload: &str,
    workers: usize,
) -> Result<Duration> {
    let objects = host_copies(namespace, names, payload)?;
    let (mut seen_rx, watch) = watch_configmaps(client, namespace, None).await?;
    let start = Instant::now();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<ConfigMap>(&()),
    );
    futures::stream::iter(objects.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(workers.max(1), |object| {
            let api = api.clone();
            async move {
                // The engine's field manager too, so managedFields match.
                let params = PostParams {
                    field_manager: Some(MANAGER.into()),
                    ..PostParams::default()
                };
                api.create(&params, object)
                    .await
                    .with_context(|| format!("create ConfigMap {:?}", object.metadata.name))?;
                Ok(())
            }
        })
        .await?;
    let deadline = Duration::from_secs(120);
    let mut seen: HashSet<String> = HashSet::with_capacity(names.len());
    let mut last = start;
    while seen.len() < names.len() {
        let remaining = deadline.saturating_sub(start.elapsed());
        let Ok(Some(copy)) = tokio::time::timeout(remaining, seen_rx.recv()).await else {
            bail!(
                "the baseline watch saw only {} of {} objects",
                seen.len(),
                names.len()
            );
        };
        if seen.insert(copy.name) {
            last = copy.at;
        }
    }
    watch.abort();
    Ok(last.duration_since(start))
}

/// The baseline's objects: exactly what the engine writes for the tenant's
/// ConfigMaps (same transform, same reverse-mapping labels and annotations, same
/// desired-state hash), placed in `namespace`, so both sides make the same writes.
fn host_copies(namespace: &str, names: &[String], payload: &str) -> Result<Vec<DynamicObject>> {
    let target = TenantTarget::new(TENANT, namespace).context("the baseline's target")?;
    let group_kind = GroupKind::new("", "ConfigMap");
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut tenant_object = serde_json::to_value(configmap(name, payload))?;
            tenant_object["apiVersion"] = json!("v1");
            tenant_object["kind"] = json!("ConfigMap");
            tenant_object["metadata"]["namespace"] = json!(TENANT_NS);
            // A UID of the length the API server gives.
            tenant_object["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
            let (_, mut desired) = to_host(&target, &group_kind, Scope::Namespaced, &tenant_object)
                .with_context(|| format!("transform {name}"))?;
            stamp_desired_hash(&mut desired);
            Ok(serde_json::from_value(desired)?)
        })
        .collect()
}

/// Watches ConfigMaps in `namespace` (optionally by label); returns once the
/// initial list is done.
async fn watch_configmaps(
    host: &Client,
    namespace: &str,
    labels: Option<String>,
) -> Result<(mpsc::UnboundedReceiver<Seen>, tokio::task::AbortHandle)> {
    let api: Api<ConfigMap> = Api::namespaced(host.clone(), namespace);
    let config = match &labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let at = Instant::now();
            match event {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                    let rev = cm.data.as_ref().and_then(|d| d.get("rev").cloned());
                    let name = cm.metadata().name.clone().unwrap_or_default();
                    if tx.send(Seen { name, rev, at }).is_err() {
                        return;
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::Delete(_)) => {}
                Err(err) => progress(&format!("host watch error (retrying): {err}")),
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), ready_rx)
        .await
        .context("the host watch did not list within 30 s")?
        .context("the host watch ended")?;
    Ok((rx, task.abort_handle()))
}

fn predicted_host_name(name: &str) -> String {
    host_name(&SourceName {
        name,
        virtual_namespace: TENANT_NS,
        tenant: TENANT,
    })
    .name
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// "POST configmaps 2000, POST events 31, ..." for the writes in `counts`.
fn describe_writes(counts: &RequestCounts) -> String {
    let writes: Vec<String> = counts
        .by_verb_resource
        .iter()
        .filter(|((verb, _), n)| WRITE_VERBS.contains(&verb.as_str()) && **n > 0)
        .map(|((verb, resource), n)| format!("{verb} {resource} {n}"))
        .collect();
    if writes.is_empty() {
        "none".into()
    } else {
        writes.join(", ")
    }
}

fn describe_cpu(cpu: &[(&'static str, Duration)]) -> String {
    cpu.iter()
        .map(|(role, t)| format!("{role} {:.2} s", secs(*t)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mark(missed: bool) -> &'static str {
    if missed { "   MISSED" } else { "" }
}

async fn sync_benchmark(args: SyncArgs) -> Result<()> {
    let n = args.objects;
    if n == 0 {
        bail!("--objects must be at least 1");
    }
    let workers = args.workers.max(1);
    args.mode.check()?;
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let load_at_start = procfs::load_average();
    let names: Vec<String> = (0..n).map(|i| format!("cm-{i:05}")).collect();
    let payload: String = "tenantplane-benchmark-payload-"
        .chars()
        .cycle()
        .take(args.payload_bytes)
        .collect();

    // 1. The control plane and tenantplane's objects.
    let Servers {
        env,
        host_server,
        tenant_server,
        host,
        tenant,
    } = start_servers(&[BASELINE_NS, BASELINE_AFTER_NS, WARMUP_NS]).await?;
    install_tenantplane_objects(&host, &tenant_server, &[("v1", "ConfigMap")]).await?;
    let mut watched = procfs::Watched::new(host_server.pid(), tenant_server.pid());
    progress(&format!(
        "starting the controller: {} ({workers} writers per kind)",
        args.mode.describe()
    ));
    let controller = RunningController::start(&args.mode, &host_server, workers).await?;
    if let Some(pid) = controller.pid() {
        watched.watch("controller process", pid);
    }

    // 2. Baseline: a plain client, same host API server, same objects and concurrency.
    progress(&format!(
        "baseline: a plain kube-rs client creates {n} ConfigMaps in host namespace {BASELINE_NS} ({workers} in flight)"
    ));
    let warmup = &names[..WARMUP_OBJECTS.min(n)];
    create_all(
        &Api::namespaced(host.clone(), WARMUP_NS),
        warmup,
        &payload,
        workers,
    )
    .await?;
    let cpu_before_baseline = watched.cpu();
    let baseline = timed_baseline(
        &host_server.client().await?,
        BASELINE_NS,
        &names,
        &payload,
        workers,
    )
    .await?;
    let baseline_cpu = procfs::cpu_since(&cpu_before_baseline, &watched.cpu());

    // 3. Sync: the tenant's objects exist before the TenantCluster does.
    progress(&format!(
        "creating {n} ConfigMaps in tenant namespace {TENANT_NS} (not timed against the host)"
    ));
    let tenant_create = create_all(
        &Api::namespaced(tenant.clone(), TENANT_NS),
        &names,
        &payload,
        workers,
    )
    .await?;
    let (mut host_copies, host_watch) = watch_host_copies(&host).await?;
    let peak_before_kib = procfs::status_kib("VmHWM")?;
    procfs::reset_peak_rss()?;
    let rss_before_kib = procfs::status_kib("VmRSS")?;
    let counts_before_sync = host_server.request_counts().await?;
    let cpu_before_sync = watched.cpu();

    progress("sync: creating TenantCluster dev; the clock runs until the host holds all copies");
    let start = Instant::now();
    create_tenant_cluster(&host).await?;
    let deadline = Duration::from_secs(120).max(Duration::from_millis(50 * n as u64));
    let mut seen: HashSet<String> = HashSet::with_capacity(n);
    let mut first_copy = None;
    let mut last_copy = start;
    while seen.len() < n {
        let remaining = deadline.saturating_sub(start.elapsed());
        let Ok(Some(copy)) = tokio::time::timeout(remaining, host_copies.recv()).await else {
            bail!(
                "only {} of {n} host copies appeared within {deadline:?}",
                seen.len()
            );
        };
        if seen.insert(copy.name) {
            first_copy.get_or_insert(copy.at);
            last_copy = copy.at;
        }
    }
    let sync = last_copy.duration_since(start);
    let first_copy = first_copy.unwrap_or(last_copy).duration_since(start);
    let cpu_sync = procfs::cpu_since(&cpu_before_sync, &watched.cpu());
    controller
        .wait_passes(1, Duration::from_secs(60))
        .await
        .context("first pass")?;
    wait_synced(&host, Duration::from_secs(60)).await?;
    tokio::time::sleep(SETTLE).await;
    let sync_writes = host_server
        .request_counts()
        .await?
        .since(&counts_before_sync);
    let engine_creates = controller
        .counter("tenantplane_host_writes", "verb", "create")
        .await?;
    let create_decisions = controller
        .counter("tenantplane_decisions", "action", "Create")
        .await?;

    // 4. Latency of single updates, observed through the host watch.
    progress(&format!(
        "latency: {} single-object updates in the tenant, one after another",
        args.updates
    ));
    while host_copies.try_recv().is_ok() {}
    let counts_before_updates = host_server.request_counts().await?;
    let tenant_cms: Api<ConfigMap> = Api::namespaced(tenant.clone(), TENANT_NS);
    let mut latencies = Vec::with_capacity(args.updates);
    for i in 0..args.updates {
        let name = &names[i % n];
        let host_name = predicted_host_name(name);
        let rev = format!("u{i}");
        let sent = Instant::now();
        tenant_cms
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"rev": rev}})),
            )
            .await
            .with_context(|| format!("update tenant ConfigMap {name}"))?;
        loop {
            let remaining = UPDATE_TIMEOUT.saturating_sub(sent.elapsed());
            let Ok(Some(copy)) = tokio::time::timeout(remaining, host_copies.recv()).await else {
                bail!("update {i} of {name} did not reach the host within {UPDATE_TIMEOUT:?}");
            };
            if copy.name == host_name && copy.rev.as_deref() == Some(rev.as_str()) {
                latencies.push(copy.at.duration_since(sent));
                break;
            }
        }
    }
    latencies.sort();
    tokio::time::sleep(SETTLE).await;
    let update_writes = host_server
        .request_counts()
        .await?
        .since(&counts_before_updates);

    // The controller process's own memory, over its whole life so far.
    let process_memory = match controller.pid() {
        Some(pid) => Some((
            procfs::process_status_kib(&pid.to_string(), "VmHWM")?,
            procfs::process_status_kib(&pid.to_string(), "VmRSS")?,
        )),
        None => None,
    };

    // 5. No-op resync: a new controller finds everything in place.
    progress("no-op resync: restarting the controller");
    controller.stop().await?;
    let counts_before_restart = host_server.request_counts().await?;
    let restart_start = Instant::now();
    let controller = RunningController::start(&args.mode, &host_server, workers).await?;
    controller
        .wait_passes(1, Duration::from_secs(120))
        .await
        .context("first pass after the restart")?;
    let restart_pass = restart_start.elapsed();
    tokio::time::sleep(SETTLE).await;
    let restart_window = restart_start.elapsed();
    let restart_writes = host_server
        .request_counts()
        .await?
        .since(&counts_before_restart);
    let mut restart_engine_writes = 0;
    for verb in ["create", "update", "delete"] {
        restart_engine_writes += controller
            .counter("tenantplane_host_writes", "verb", verb)
            .await?;
    }
    controller.stop().await?;

    // 6. Memory.
    let peak_kib = procfs::status_kib("VmHWM")?;
    let rss_after_kib = procfs::status_kib("VmRSS")?;

    // The baseline once more: the machine is shared, so its load may have changed
    // while the engine ran; the ratio uses the mean of both.
    progress(&format!(
        "baseline again, into host namespace {BASELINE_AFTER_NS}"
    ));
    let cpu_before_baseline_after = watched.cpu();
    let baseline_after = timed_baseline(
        &host_server.client().await?,
        BASELINE_AFTER_NS,
        &names,
        &payload,
        workers,
    )
    .await?;
    let baseline_after_cpu = procfs::cpu_since(&cpu_before_baseline_after, &watched.cpu());
    let baseline_mean = (baseline + baseline_after) / 2;

    // 7. The report.
    let ratio = secs(sync) / secs(baseline_mean).max(1e-9);
    // CPU of all four processes: steadier than wall time on a shared machine.
    let total = |cpu: &[(&str, Duration)]| cpu.iter().map(|(_, t)| secs(*t)).sum::<f64>();
    let baseline_cpu_mean = (total(&baseline_cpu) + total(&baseline_after_cpu)) / 2.0;
    let cpu_ratio = total(&cpu_sync) / baseline_cpu_mean.max(1e-9);
    let p50 = percentile(&latencies, 50.0);
    let p99 = percentile(&latencies, 99.0);
    let max = latencies.last().copied().unwrap_or_default();
    let no_op_writes = restart_writes.writes(None);
    let sync_total_writes = sync_writes.writes(None);

    let mut out = String::new();
    writeln!(out)?;
    writeln!(out, "== setup")?;
    writeln!(
        out,
        "etcd + host and tenant kube-apiserver (from KUBEBUILDER_ASSETS or scripts/test-apiserver.sh's cache), \
         {cores} cores, 1-min load average at start {load_at_start}"
    )?;
    writeln!(
        out,
        "IsolationProfile bench: apiFairness qps {FAIRNESS_QPS}, burst {FAIRNESS_BURST} (the schema's maxima: \
         fairness is set out of the way, no write waits for the budget)"
    )?;
    writeln!(
        out,
        "SyncPolicy bench: ConfigMap toHost only, drift interval {DRIFT_INTERVAL} (timed phases are event-driven), \
         recordDecisions on (retain 100)"
    )?;
    writeln!(
        out,
        "ConfigMaps: {n}, each data {{payload: {} bytes, rev}}; controller: {}, {workers} writers per kind",
        args.payload_bytes,
        args.mode.describe()
    )?;
    writeln!(out)?;
    writeln!(out, "== baseline")?;
    writeln!(
        out,
        "a plain kube-rs client (its own connection pool) creates {n} ConfigMaps, {workers} in flight, after \
         {} untimed warm-up creates (namespace {WARMUP_NS}); the same writes as the engine's: each object is \
         the engine's host copy of the tenant's ConfigMap (same transform, labels, annotations and field \
         manager); timed like the sync, from the first create until a host watch of the namespace has seen \
         every object; all are left in place",
        warmup.len()
    )?;
    writeln!(
        out,
        "before the sync, into host namespace {BASELINE_NS}: {:.2} s ({:.0} obj/s)",
        secs(baseline),
        rate(n, baseline)
    )?;
    writeln!(
        out,
        "after the no-op resync, into host namespace {BASELINE_AFTER_NS}: {:.2} s ({:.0} obj/s)",
        secs(baseline_after),
        rate(n, baseline_after)
    )?;
    writeln!(
        out,
        "mean {:.2} s ({:.0} obj/s): the ratio's denominator",
        secs(baseline_mean),
        rate(n, baseline_mean)
    )?;
    writeln!(
        out,
        "CPU during the first baseline: {}",
        describe_cpu(&baseline_cpu)
    )?;
    writeln!(
        out,
        "CPU during the second baseline: {}",
        describe_cpu(&baseline_after_cpu)
    )?;
    writeln!(
        out,
        "(for reference, the same {n} creates on the tenant API server: {:.2} s)",
        secs(tenant_create)
    )?;
    writeln!(out)?;
    writeln!(out, "== sync")?;
    writeln!(
        out,
        "the {n} tenant ConfigMaps existed before the TenantCluster; clock from sending the TenantCluster create \
         until the benchmark's host watch has seen all {n} copies"
    )?;
    writeln!(
        out,
        "total {:.2} s ({:.0} obj/s); first copy after {:.0} ms (reconcile, discovery, listing both sides); \
         then {:.0} obj/s",
        secs(sync),
        rate(n, sync),
        ms(first_copy),
        rate(n.saturating_sub(1), sync.saturating_sub(first_copy))
    )?;
    writeln!(out, "CPU during sync: {}", describe_cpu(&cpu_sync))?;
    writeln!(
        out,
        "CPU of etcd + both API servers + this process: sync {:.2} s vs baseline mean {:.2} s: ratio {cpu_ratio:.2}",
        total(&cpu_sync),
        baseline_cpu_mean
    )?;
    writeln!(
        out,
        "engine: {engine_creates} host creates, {create_decisions} Create decisions"
    )?;
    writeln!(
        out,
        "host writes from TenantCluster create until the first pass, Synced=True and {} s of settling: {} \
         ({:.3} writes/object; POST tenantclusters is the benchmark's own create)",
        SETTLE.as_secs(),
        describe_writes(&sync_writes),
        sync_total_writes as f64 / n as f64
    )?;
    writeln!(out)?;
    writeln!(out, "== latency")?;
    writeln!(
        out,
        "{} updates (merge patch of data.rev on the tenant), each timed from sending it until the host watch \
         shows the new value",
        latencies.len()
    )?;
    writeln!(
        out,
        "p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms, min {:.1} ms",
        ms(p50),
        ms(percentile(&latencies, 90.0)),
        ms(p99),
        ms(max),
        ms(latencies.first().copied().unwrap_or_default())
    )?;
    writeln!(
        out,
        "host writes during the updates (+{} s settling): {}",
        SETTLE.as_secs(),
        describe_writes(&update_writes)
    )?;
    writeln!(out)?;
    writeln!(out, "== no-op resync")?;
    writeln!(
        out,
        "controller stopped and started again (new Metrics); its first full pass over {n} objects took {:.2} s",
        secs(restart_pass)
    )?;
    writeln!(
        out,
        "host writes from the restart until {} s after that pass ({:.2} s): {} (engine's own count: {restart_engine_writes})",
        SETTLE.as_secs(),
        secs(restart_window),
        describe_writes(&restart_writes)
    )?;
    writeln!(out)?;
    writeln!(out, "== memory")?;
    if let Some((hwm, rss)) = process_memory {
        writeln!(
            out,
            "controller process: VmHWM {:.1} MiB over its life (start, sync of {n}, latency); VmRSS {:.1} MiB \
             before it was stopped",
            mib(hwm),
            mib(rss)
        )?;
    }
    writeln!(
        out,
        "benchmark process: VmRSS when the TenantCluster was created {:.1} MiB (setup, baseline and tenant creates done; \
         VmHWM reset there through /proc/self/clear_refs)",
        mib(rss_before_kib)
    )?;
    writeln!(
        out,
        "VmHWM over sync + latency + restart: {:.1} MiB (+{:.1} MiB); VmRSS at the end {:.1} MiB; \
         VmHWM before the reset {:.1} MiB",
        mib(peak_kib),
        mib(peak_kib.saturating_sub(rss_before_kib)),
        mib(rss_after_kib),
        mib(peak_before_kib)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "tenantplane sync benchmark (N={n}, workers={workers}, {cores} cores)"
    )?;
    writeln!(
        out,
        "baseline: plain client, {n} creates: {:.2} s ({:.0} obj/s)   (mean of {:.2} s before, {:.2} s after)",
        secs(baseline_mean),
        rate(n, baseline_mean),
        secs(baseline),
        secs(baseline_after)
    )?;
    writeln!(
        out,
        "sync:     {n} ConfigMaps tenant->host: {:.2} s ({:.0} obj/s)   ratio {ratio:.2} (target <= {TARGET_RATIO}){}",
        secs(sync),
        rate(n, sync),
        mark(ratio > TARGET_RATIO)
    )?;
    writeln!(
        out,
        "          CPU (etcd, API servers, controller) sync/baseline {cpu_ratio:.2}"
    )?;
    writeln!(
        out,
        "updates:  p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms (target p99 < {TARGET_P99_MS:.0} ms){}",
        ms(p50),
        ms(p99),
        ms(max),
        mark(ms(p99) >= TARGET_P99_MS)
    )?;
    writeln!(
        out,
        "no-op resync after restart: {no_op_writes} host writes (target 0){}",
        mark(no_op_writes > 0)
    )?;
    writeln!(
        out,
        "host writes during sync: {} ({:.3}/object)",
        describe_writes(&sync_writes),
        sync_total_writes as f64 / n as f64
    )?;
    match process_memory {
        Some((hwm, _)) => writeln!(
            out,
            "peak RSS: {:.1} MiB VmHWM of the controller process (start, sync, latency)",
            mib(hwm)
        )?,
        None => writeln!(
            out,
            "peak RSS: {:.1} MiB VmHWM of the benchmark process during the controller phases, {:.1} MiB above its \
             RSS before them (includes the benchmark's clients and host watch)",
            mib(peak_kib),
            mib(peak_kib.saturating_sub(rss_before_kib))
        )?,
    }
    print!("{out}");
    host_watch.abort();
    drop(host_copies);
    drop(env);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn writes_are_listed_by_verb_and_resource() {
        let counts = tenantplane_testenv::parse_request_counts(
            "apiserver_request_total{resource=\"configmaps\",subresource=\"\",verb=\"POST\"} 3\n\
             apiserver_request_total{resource=\"configmaps\",subresource=\"\",verb=\"GET\"} 9\n",
        );
        assert_eq!(describe_writes(&counts), "POST configmaps 3");
        assert_eq!(describe_writes(&RequestCounts::default()), "none");
    }
}
