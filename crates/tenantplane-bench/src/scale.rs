//! `tenantplane-bench scale`: N TenantClusters, each in a namespace of its own and
//! all attached to one tenant API server holding M ConfigMaps, synced by one
//! `tenantplane controller` process (the release binary, run as a user runs it).
//! Against a plain client making the same N x M creates on the same host API
//! server in the same run. Prints the time to converge, the host watches the
//! controller opened (the host API server's `apiserver_longrunning_gauge`), its RSS
//! per TenantCluster, host writes per object, how long the decision records of
//! the convergence (Events, SyncDecisions) take to settle, and then the writes of
//! an idle period.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, PostParams};
use serde_json::json;
use tenantplane_engine::decisions::MANAGER;
use tenantplane_testenv::RequestCounts;
use tokio::sync::mpsc;

use crate::controller::ControllerProcess;
use crate::{
    Seen, TENANT_NS, create_all, create_json, create_namespace, create_unthrottled_profile,
    describe_writes, host_copies_of, mib, progress, secs, start_servers, watch_configmaps,
};

#[derive(clap::Args, Clone)]
pub struct ScaleArgs {
    /// TenantClusters, each in its own host namespace.
    #[arg(long, default_value_t = 1000)]
    tenant_clusters: usize,
    /// ConfigMaps in the (shared) tenant API server: each TenantCluster syncs all.
    #[arg(long, default_value_t = 10)]
    objects: usize,
    /// Requests in flight for the baseline client, and the engine's writers per kind.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// The `tenantplane` binary to run (scripts/bench.sh builds the release one).
    #[arg(long, default_value = "target/release/tenantplane")]
    controller: PathBuf,
    /// Seconds of the idle period after convergence.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Give up converging after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
}

const SCALE_PREFIX: &str = "scale";
/// The baseline's namespaces: `scale-base-<i>` beside each TenantCluster's `scale-<i>`.
const BASELINE_PREFIX: &str = "scale-base";
/// The tenant ConfigMaps' payload, and so the copies'.
const PAYLOAD: &str = "x";
const MANAGED: &str = "app.kubernetes.io/managed-by=tenantplane";

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    crate::procfs::process_status_kib(&pid.to_string(), "VmRSS")
}

/// Open WATCH requests, from `apiserver_longrunning_gauge`.
fn watches(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_longrunning_gauge{") && l.contains("verb=\"WATCH\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .map(|v| v.max(0.0).round() as u64)
        .sum()
}

/// Every request in `counts` (reads and watches too), divided by `n`, largest
/// first: "GET namespaces 2.00, ..." with the total first.
fn describe_requests(counts: &RequestCounts, n: usize) -> String {
    let mut all: Vec<(&(String, String), &u64)> = counts.by_verb_resource.iter().collect();
    all.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let total: u64 = all.iter().map(|(_, c)| **c).sum();
    let per = |c: u64| c as f64 / n.max(1) as f64;
    let items: Vec<String> = all
        .iter()
        .map(|((verb, resource), c)| format!("{verb} {resource} {:.2}", per(**c)))
        .collect();
    format!("{:.2} in all: {}", per(total), items.join(", "))
}

/// How long no host write must be seen for the controller to count as settled.
const QUIET_FOR: Duration = Duration::from_secs(5);

/// Polls the host API server's write counters until none moved for [`QUIET_FOR`]
/// (or `deadline` passed). Returns the counters then, and when writes last
/// stopped (measured from `start`'s reading), `None` if they never did.
async fn settle(
    server: &tenantplane_testenv::ApiServer,
    start: &RequestCounts,
    deadline: Duration,
) -> Result<(RequestCounts, Option<Duration>)> {
    let began = Instant::now();
    let mut last = start.clone();
    let mut last_write = Duration::ZERO;
    loop {
        // A poll interval: each reading is compared with the one before.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.request_counts().await?;
        if now.since(&last).writes(None) > 0 {
            last_write = began.elapsed();
            last = now.clone();
        } else if began.elapsed().saturating_sub(last_write) >= QUIET_FOR {
            return Ok((now, Some(last_write)));
        }
        if began.elapsed() > deadline {
            return Ok((now, None));
        }
    }
}

/// When an observing watch saw the first and the last of the objects it waited for.
struct SeenSpan {
    first: Instant,
    last: Instant,
}

/// Reads the watch until `want` distinct objects matching `counted` have been seen
/// (reporting progress every 10 s), or fails after `deadline` from `started`.
async fn until_seen(
    seen_rx: &mut mpsc::UnboundedReceiver<Seen>,
    counted: impl Fn(&Seen) -> bool,
    want: usize,
    started: Instant,
    deadline: Duration,
) -> Result<SeenSpan> {
    let mut keys: HashSet<(String, String)> = HashSet::with_capacity(want);
    let mut span: Option<SeenSpan> = None;
    let mut last_report = Instant::now();
    while keys.len() < want {
        let remaining = deadline.saturating_sub(started.elapsed());
        let next = tokio::time::timeout(remaining.min(Duration::from_secs(10)), seen_rx.recv());
        match next.await {
            Ok(Some(copy)) => {
                if counted(&copy) && keys.insert((copy.namespace, copy.name)) {
                    let at = copy.at;
                    span = Some(match span {
                        Some(SeenSpan { first, .. }) => SeenSpan { first, last: at },
                        None => SeenSpan {
                            first: at,
                            last: at,
                        },
                    });
                }
            }
            Ok(None) => bail!("the observing watch ended after {} of {want}", keys.len()),
            Err(_) if started.elapsed() >= deadline => {
                bail!(
                    "only {} of {want} host copies after {deadline:?}",
                    keys.len()
                )
            }
            Err(_) => {}
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            progress(&format!(
                "{} of {want} host copies after {:.0} s",
                keys.len(),
                secs(started.elapsed())
            ));
            last_report = Instant::now();
        }
    }
    span.context("nothing to wait for")
}

/// Times a plain client making exactly the engine's writes (`copies`, built by the
/// engine's transform), from the first create until a host watch has seen every
/// one, as the sync is timed.
async fn timed_same_writes(
    host: &kube::Client,
    copies: &[DynamicObject],
    workers: usize,
) -> Result<Duration> {
    let (mut seen_rx, observing) = watch_configmaps(host, None, Some(MANAGED.into())).await?;
    let resource = ApiResource::erase::<ConfigMap>(&());
    let started = Instant::now();
    futures::stream::iter(copies.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(workers.max(1), |copy| {
            let api: Api<DynamicObject> = Api::namespaced_with(
                host.clone(),
                copy.metadata.namespace.as_deref().unwrap_or_default(),
                &resource,
            );
            async move {
                // The engine's field manager too, so managedFields match.
                let params = PostParams {
                    field_manager: Some(MANAGER.into()),
                    ..PostParams::default()
                };
                api.create(&params, copy)
                    .await
                    .with_context(|| format!("create ConfigMap {:?}", copy.metadata.name))?;
                Ok(())
            }
        })
        .await?;
    let seen = until_seen(
        &mut seen_rx,
        |_| true,
        copies.len(),
        started,
        Duration::from_secs(600),
    )
    .await
    .context("the baseline")?;
    observing.abort();
    Ok(seen.last.duration_since(started))
}

pub async fn scale_benchmark(args: ScaleArgs) -> Result<()> {
    if !args.controller.exists() {
        bail!(
            "no controller binary at {} (scripts/bench.sh scale builds it; or pass --controller)",
            args.controller.display()
        );
    }
    let (n, m) = (args.tenant_clusters.max(1), args.objects.max(1));
    let servers = start_servers(&[]).await?;
    let (host, tenant) = (&servers.host, &servers.tenant);
    progress(&format!("creating {m} tenant ConfigMaps"));
    let names: Vec<String> = (0..m).map(|i| format!("cm-{i}")).collect();
    create_all(
        &Api::<ConfigMap>::namespaced(tenant.clone(), TENANT_NS),
        &names,
        PAYLOAD,
        args.workers,
    )
    .await?;

    progress(&format!(
        "creating {n} TenantClusters (namespace, Secret, TenantCluster each)"
    ));
    create_unthrottled_profile(host, "scale").await?;
    create_json(
        host,
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
               "metadata": {"name": "scale"},
               "spec": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
    )
    .await?;
    let kubeconfig = servers.tenant_server.kubeconfig_yaml("admin")?;
    let mut baseline_copies = Vec::with_capacity(n * m);
    let mut sync_namespaces = HashSet::with_capacity(n);
    for i in 0..n {
        let namespace = format!("{SCALE_PREFIX}-{i}");
        create_namespace(host, &namespace).await?;
        // The baseline's namespace for this TenantCluster's copies, so the plain
        // client pays the same per-namespace costs as the engine does.
        let baseline_namespace = format!("{BASELINE_PREFIX}-{i}");
        create_namespace(host, &baseline_namespace).await?;
        baseline_copies.extend(host_copies_of(
            &format!("tc-{i}"),
            &baseline_namespace,
            &names,
            PAYLOAD,
        )?);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("kubeconfig".into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    "kubeconfig".to_owned(),
                    ByteString(kubeconfig.clone().into_bytes()),
                )]
                .into(),
            ),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(host.clone(), &namespace)
            .create(&PostParams::default(), &secret)
            .await
            .with_context(|| format!("create the Secret in {namespace}"))?;
        create_json(
            host,
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
                   "metadata": {"name": format!("tc-{i}"), "namespace": namespace},
                   "spec": {"isolationProfileRef": {"name": "scale"}, "syncPolicyRef": {"name": "scale"},
                            "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "kubeconfig"}}}}}),
        )
        .await?;
        sync_namespaces.insert(namespace);
    }

    progress(&format!(
        "baseline: a plain client makes the engine's {} creates, in {n} namespaces",
        n * m
    ));
    let baseline = timed_same_writes(host, &baseline_copies, args.workers).await?;

    // The sync is observed the way the baseline was: one watch, opened before.
    let (mut seen_rx, observing) = watch_configmaps(host, None, Some(MANAGED.into())).await?;
    let watches_before = watches(&servers.host_server.metrics_text().await?);
    let counts_before = servers.host_server.request_counts().await?;
    let tenant_before = servers.tenant_server.request_counts().await?;
    let mut watched =
        crate::procfs::Watched::new(servers.host_server.pid(), servers.tenant_server.pid());
    let cpu_before = watched.cpu();
    let started = Instant::now();
    // Its log is kept after the run, to read what the controller did.
    let controller =
        ControllerProcess::start(&args.controller, &servers.host_server, args.workers, &[])?;
    let log = controller.log().to_path_buf();
    progress(&format!(
        "started {} (log: {})",
        args.controller.display(),
        log.display()
    ));
    let pid = controller
        .pid()
        .context("the controller process has no PID")?;
    watched.watch("controller process", pid);

    let want = n * m;
    let deadline = Duration::from_secs(args.timeout_secs);
    let seen = until_seen(
        &mut seen_rx,
        |copy| sync_namespaces.contains(&copy.namespace),
        want,
        started,
        deadline,
    )
    .await
    .with_context(|| format!("see {}", log.display()))?;
    observing.abort();
    let (first_copy, converged) = (
        seen.first.duration_since(started),
        seen.last.duration_since(started),
    );
    let rss = rss_kib(pid)?;
    let cpu = crate::procfs::cpu_since(&cpu_before, &watched.cpu());
    let tenant_requests = servers
        .tenant_server
        .request_counts()
        .await?
        .since(&tenant_before);
    let open = watches(&servers.host_server.metrics_text().await?).saturating_sub(watches_before);
    let counts = servers.host_server.request_counts().await?;
    let sync_writes = counts.since(&counts_before);
    let configmap_writes = sync_writes.writes(Some("configmaps"));

    // The decisions of the convergence (an Event per create, rate-limited, and the
    // SyncDecisions) are still being written: measured apart, until a quiet spell.
    progress(&format!(
        "waiting for the decision records to settle (no host write for {QUIET_FOR:?})"
    ));
    let settle_start = servers.host_server.request_counts().await?;
    let (settled, quiet) = settle(&servers.host_server, &settle_start, deadline).await?;
    let settling = settled.since(&settle_start);

    progress(&format!("idle for {} s", args.idle_secs));
    let idle_start = settled;
    // The idle period is what is measured, not a wait for something to happen.
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle: RequestCounts = servers
        .host_server
        .request_counts()
        .await?
        .since(&idle_start);
    let rss_after_idle = rss_kib(pid)?;
    drop(controller);

    let ratio = converged.as_secs_f64() / baseline.as_secs_f64().max(f64::EPSILON);
    let per_object = configmap_writes as f64 / want as f64;
    println!(
        "scale: {n} TenantClusters x {m} ConfigMaps (one controller process, load average {})",
        crate::procfs::load_average()
    );
    println!(
        "  converged in {:.1} s; a plain client's {want} creates took {:.1} s: ratio {ratio:.2} (target <= 2.00)",
        secs(converged),
        secs(baseline)
    );
    println!(
        "  first host copy after {:.1} s; CPU while converging: {}",
        secs(first_copy),
        crate::describe_cpu(&cpu)
    );
    println!(
        "  host requests while syncing, per TenantCluster: {}",
        describe_requests(&sync_writes, n)
    );
    println!(
        "  tenant requests while syncing, per TenantCluster: {}",
        describe_requests(&tenant_requests, n)
    );
    println!(
        "  host watches opened by the controller: {open} (target <= 2 per synced kind + a constant; {:.1} per TenantCluster)",
        open as f64 / n as f64
    );
    println!(
        "  controller RSS {:.1} MiB after converging, {:.1} MiB after idling: {:.2} MiB per TenantCluster (target <= 0.5)",
        mib(rss),
        mib(rss_after_idle),
        mib(rss) / n as f64
    );
    println!(
        "  host writes to ConfigMaps: {configmap_writes} for {want} objects = {per_object:.3} per object (target 1.000)"
    );
    println!(
        "  all host writes while syncing: {}",
        describe_writes(&sync_writes)
    );
    match quiet {
        Some(after) => println!(
            "  after converging, the decision records settled in {:.1} s (then {QUIET_FOR:?} without a host write): {}",
            secs(after),
            describe_writes(&settling)
        ),
        None => println!(
            "  after converging, host writes never stopped for {QUIET_FOR:?} within {deadline:?}: {}",
            describe_writes(&settling)
        ),
    }
    println!(
        "  host writes during {} idle seconds: {} (target 0): {}",
        args.idle_secs,
        idle.writes(None),
        describe_writes(&idle)
    );
    Ok(())
}
