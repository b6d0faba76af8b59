//! `tenantplane-bench sync`: ConfigMaps tenant -> host through the controller,
//! against a plain client's creates on the same host API server.

use crate::controller::RunningController;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::*;

pub(crate) async fn sync_benchmark(args: SyncArgs) -> Result<()> {
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
