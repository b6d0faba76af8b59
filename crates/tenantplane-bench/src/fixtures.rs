//! What every benchmark shares: the servers, object builders, watches and the
//! figures' formatting.

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::{ByteString, Metadata};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::metadata::host_selector;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::stamp_desired_hash;
use tenantplane_core::transform::{TenantTarget, to_host};
use tenantplane_engine::decisions::MANAGER;
use tenantplane_testenv::{ApiServer, ApiServerOptions, RequestCounts, TestEnv, WRITE_VERBS};
use tokio::sync::mpsc;

use crate::*;

/// etcd, the host and tenant API servers and their clients.
pub(crate) struct Servers {
    pub(crate) env: TestEnv,
    pub(crate) host_server: ApiServer,
    pub(crate) tenant_server: ApiServer,
    pub(crate) host: Client,
    pub(crate) tenant: Client,
}

/// Starts the servers, installs tenantplane's CRDs on the host, and creates the
/// host namespace, `host_namespaces` and the tenant namespace.
pub(crate) async fn start_servers(host_namespaces: &[&str]) -> Result<Servers> {
    progress("starting etcd and the host and tenant API servers");
    let env = TestEnv::start().await.context(
        "start etcd (run scripts/test-apiserver.sh, or set KUBEBUILDER_ASSETS to a directory \
         holding etcd and kube-apiserver)",
    )?;
    let host_server = env
        .start_apiserver_with(ApiServerOptions::stock("host"))
        .await?;
    let tenant_server = env
        .start_apiserver_with(ApiServerOptions::stock("tenant"))
        .await?;
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

pub(crate) fn progress(message: &str) {
    eprintln!("[bench] {message}");
}

/// One ConfigMap of the benchmark: the same payload on every side.
pub(crate) fn configmap(name: &str, payload: &str) -> ConfigMap {
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
pub(crate) async fn create_all(
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

pub(crate) async fn create_namespace(client: &Client, name: &str) -> Result<()> {
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

pub(crate) fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Creates an object given as JSON (apiVersion, kind, metadata.namespace).
pub(crate) async fn create_json(client: &Client, object: Value) -> Result<()> {
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
pub(crate) async fn create_unthrottled_profile(host: &Client, name: &str) -> Result<()> {
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
pub(crate) async fn install_tenantplane_objects(
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

pub(crate) async fn create_tenant_cluster(host: &Client) -> Result<()> {
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
pub(crate) async fn wait_synced(host: &Client, deadline: Duration) -> Result<()> {
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
pub(crate) struct Seen {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) rev: Option<String>,
    pub(crate) at: Instant,
}

/// Watches the tenant's host ConfigMaps; returns once the initial list is done.
pub(crate) async fn watch_host_copies(
    host: &Client,
) -> Result<(mpsc::UnboundedReceiver<Seen>, tokio::task::AbortHandle)> {
    let group_kind = GroupKind::from_api_version("v1", "ConfigMap")?;
    watch_configmaps(
        host,
        Some(HOST_NS),
        Some(host_selector(TENANT, &group_kind)),
    )
    .await
}

/// Times creating `names` in `namespace` the way the sync is timed: from the first
/// create until the benchmark's host watch has seen every object, so both sides
/// pay for the same observing watch.
pub(crate) async fn timed_baseline(
    client: &Client,
    namespace: &str,
    names: &[String],
    payload: &str,
    workers: usize,
) -> Result<Duration> {
    let objects = host_copies(namespace, names, payload)?;
    let (mut seen_rx, watch) = watch_configmaps(client, Some(namespace), None).await?;
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
pub(crate) fn host_copies(
    namespace: &str,
    names: &[String],
    payload: &str,
) -> Result<Vec<DynamicObject>> {
    host_copies_of(TENANT, namespace, names, payload)
}

/// [`host_copies`] for the tenant named `tenant`.
pub(crate) fn host_copies_of(
    tenant: &str,
    namespace: &str,
    names: &[String],
    payload: &str,
) -> Result<Vec<DynamicObject>> {
    let target = TenantTarget::new(tenant, namespace).context("the baseline's target")?;
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

/// Watches ConfigMaps in `namespace` (every namespace for `None`; optionally by
/// label); returns once the initial list is done.
pub(crate) async fn watch_configmaps(
    host: &Client,
    namespace: Option<&str>,
    labels: Option<String>,
) -> Result<(mpsc::UnboundedReceiver<Seen>, tokio::task::AbortHandle)> {
    let api: Api<ConfigMap> = match namespace {
        Some(namespace) => Api::namespaced(host.clone(), namespace),
        None => Api::all(host.clone()),
    };
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
                    let namespace = cm.metadata().namespace.clone().unwrap_or_default();
                    if tx
                        .send(Seen {
                            namespace,
                            name,
                            rev,
                            at,
                        })
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

pub(crate) fn predicted_host_name(name: &str) -> String {
    host_name(&SourceName {
        name,
        virtual_namespace: TENANT_NS,
        tenant: TENANT,
    })
    .name
}

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// "POST configmaps 2000, POST events 31, ..." for the writes in `counts`.
pub(crate) fn describe_writes(counts: &RequestCounts) -> String {
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

pub(crate) fn describe_cpu(cpu: &[(&'static str, Duration)]) -> String {
    cpu.iter()
        .map(|(role, t)| format!("{role} {:.2} s", secs(*t)))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn mark(missed: bool) -> &'static str {
    if missed { "   MISSED" } else { "" }
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
