//! Sharded replicas as real processes: three `tenantplane controller --shards`
//! on one host API server divide thirty TenantClusters between them; each runs in
//! exactly one replica; a replica killed with SIGKILL has its TenantClusters taken
//! over; one that comes back takes its shards again; and no write is ever made
//! twice (the host API server's own counters: one create per host object, no 409).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::sharding::{preferred_holder, shard_of};
use tenantplane_testenv::{
    ApiServer, RequestCounts, create_from_json, eventually, free_port, http_get,
};

const REPLICAS: [&str; 3] = ["replica-a", "replica-b", "replica-c"];
const TENANT_CLUSTERS: usize = 30;
const SHARDS: u32 = 12;
const LEASE_SECS: u64 = 4;
const LEASE_NAMESPACE: &str = "tenantplane-system";
/// `--lease-name` (default `tenantplane-controller`) plus `-shard`.
const GROUP: &str = "tenantplane-controller-shard";
const DEADLINE: Duration = Duration::from_secs(90);

fn tenant_cluster(i: usize) -> (String, String) {
    (format!("team-{i}"), format!("tc-{i}"))
}

struct Replica {
    identity: &'static str,
    port: u16,
    child: Child,
    log: PathBuf,
}

impl Replica {
    fn spawn(host: &ApiServer, identity: &'static str, logs: &Path) -> Replica {
        let port = free_port().unwrap();
        let log = logs.join(format!("{identity}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
            .args([
                "controller",
                "--kubeconfig",
                host.kubeconfig_path().to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--identity",
                identity,
                "--shards",
                &SHARDS.to_string(),
                "--lease-duration-secs",
                &LEASE_SECS.to_string(),
                "--no-tenant-dns",
            ])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Replica {
            identity,
            port,
            child,
            log,
        }
    }

    /// The TenantClusters (`namespace/name`) whose engines run here, from its
    /// `/metrics`; `None` while it does not answer.
    async fn running(&self) -> Option<BTreeSet<String>> {
        let (_, text) = http_get(self.port, "/metrics").await?;
        Some(
            text.lines()
                .filter_map(|l| l.strip_prefix("tenantplane_engines_running{tenant=\""))
                .filter_map(|rest| rest.split_once("\"} "))
                .filter(|(_, value)| value.trim() == "1")
                .map(|(tenant, _)| tenant.to_owned())
                .collect(),
        )
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// Never outlives the test: a failed test shows each replica's last log lines.
impl Drop for Replica {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {} (last lines) ---\n{}",
                self.identity,
                self.log_tail()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host, thirty TenantClusters in namespaces of their own, all attached to
/// one tenant API server (so each tenant ConfigMap has thirty host copies).
async fn attach_all(host: &Client, tenant: &ApiServer) {
    let namespaces: Api<Namespace> = Api::all(host.clone());
    create_from_json(&namespaces, json!({"metadata": {"name": LEASE_NAMESPACE}}))
        .await
        .unwrap();
    let dynamic = |kind: &str, plural: &str| {
        Api::<kube::api::DynamicObject>::all_with(
            host.clone(),
            &kube::api::ApiResource {
                group: "tenantplane.io".into(),
                version: "v1alpha1".into(),
                api_version: "tenantplane.io/v1alpha1".into(),
                kind: kind.into(),
                plural: plural.into(),
            },
        )
    };
    create_from_json(
        &dynamic("IsolationProfile", "isolationprofiles"),
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
               "metadata": {"name": "restricted"}, "spec": {"level": "restricted"}}),
    )
    .await
    .unwrap();
    create_from_json(
        &dynamic("SyncPolicy", "syncpolicies"),
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
               "metadata": {"name": "configmaps"},
               "spec": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
    )
    .await
    .unwrap();
    let kubeconfig = tenant.kubeconfig_yaml("admin").unwrap();
    for i in 0..TENANT_CLUSTERS {
        let (namespace, name) = tenant_cluster(i);
        create_from_json(&namespaces, json!({"metadata": {"name": namespace}}))
            .await
            .unwrap();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("kubeconfig".into()),
                ..Default::default()
            },
            data: Some(
                [(
                    "kubeconfig".to_owned(),
                    ByteString(kubeconfig.clone().into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        Api::<Secret>::namespaced(host.clone(), &namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        create_from_json(
            &Api::<tenantplane_api::TenantCluster>::namespaced(host.clone(), &namespace),
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
                   "metadata": {"name": name, "namespace": namespace},
                   "spec": {"isolationProfileRef": {"name": "restricted"},
                            "syncPolicyRef": {"name": "configmaps"},
                            "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "kubeconfig"}}}}}),
        )
        .await.unwrap();
    }
}

async fn tenant_configmap(tenant: &Client, name: &str) {
    create_from_json(
        &Api::<ConfigMap>::namespaced(tenant.clone(), "default"),
        json!({"metadata": {"name": name}, "data": {"k": name}}),
    )
    .await
    .unwrap();
}

/// How many TenantClusters have their host copy of the tenant ConfigMap `name`.
async fn copies(host: &Client, name: &str) -> usize {
    let Ok(list) = Api::<ConfigMap>::all(host.clone())
        .list(&ListParams::default())
        .await
    else {
        return 0;
    };
    let present: BTreeSet<(String, String)> = list
        .items
        .iter()
        .map(|cm| (cm.namespace().unwrap_or_default(), cm.name_any()))
        .collect();
    (0..TENANT_CLUSTERS)
        .filter(|i| {
            let (namespace, tenant) = tenant_cluster(*i);
            let copy = host_name(&SourceName {
                name,
                virtual_namespace: "default",
                tenant: &tenant,
            })
            .name;
            present.contains(&(namespace, copy))
        })
        .count()
}

/// The holder of every shard Lease, once each is held by the replica that wins it
/// among `live`; otherwise what is off.
async fn settled(host: &Client, live: &[&str]) -> Result<BTreeMap<u32, String>, String> {
    let leases = Api::<Lease>::namespaced(host.clone(), LEASE_NAMESPACE)
        .list(&ListParams::default().labels(&format!("tenantplane.io/shard-group={GROUP}")))
        .await
        .map_err(|e| e.to_string())?;
    let mut holders = BTreeMap::new();
    for lease in &leases.items {
        if let Some(shard) = lease
            .labels()
            .get("tenantplane.io/shard")
            .and_then(|s| s.parse::<u32>().ok())
        {
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default();
            holders.insert(shard, holder);
        }
    }
    for shard in 0..SHARDS {
        let want = preferred_holder(shard, live.iter().copied()).unwrap();
        if holders.get(&shard).map(String::as_str) != Some(want) {
            return Err(format!(
                "shard {shard}: held by {:?}, wins {want}",
                holders.get(&shard)
            ));
        }
    }
    Ok(holders)
}

/// Each TenantCluster's engine runs in exactly the replica that holds its shard,
/// and in no other.
async fn engines_where_shards_are(
    replicas: &[&Replica],
    holders: &BTreeMap<u32, String>,
) -> Result<(), String> {
    let mut seen: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for replica in replicas {
        let running = replica
            .running()
            .await
            .ok_or_else(|| format!("{} does not answer", replica.identity))?;
        for tc in running {
            seen.entry(tc).or_default().push(replica.identity);
        }
    }
    for i in 0..TENANT_CLUSTERS {
        let (namespace, name) = tenant_cluster(i);
        let holder = holders
            .get(&shard_of(&namespace, &name, SHARDS))
            .map(String::as_str)
            .unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let runs_in = seen.remove(&key).unwrap_or_default();
        if runs_in != [holder] {
            return Err(format!(
                "{key} runs in {runs_in:?}, its shard is {holder}'s"
            ));
        }
    }
    if !seen.is_empty() {
        return Err(format!("engines of unknown TenantClusters: {seen:?}"));
    }
    Ok(())
}

/// One tenant ConfigMap reaches all thirty TenantClusters' hosts with exactly
/// thirty creates and no conflicting write: every TenantCluster was synced by
/// one replica only.
async fn one_create_per_copy(
    host_server: &ApiServer,
    host: &Client,
    tenant: &Client,
    name: &str,
) -> Duration {
    let before: RequestCounts = host_server.request_counts().await.unwrap();
    let start = Instant::now();
    tenant_configmap(tenant, name).await;
    eventually(
        &format!("a copy of {name} for every TenantCluster"),
        DEADLINE,
        || async {
            let n = copies(host, name).await;
            if n == TENANT_CLUSTERS { Ok(()) } else { Err(n) }
        },
    )
    .await;
    let took = start.elapsed();
    let writes = host_server.request_counts().await.unwrap().since(&before);
    assert_eq!(
        writes.requests("POST", "configmaps"),
        TENANT_CLUSTERS as u64,
        "one create per host copy: {writes:?}"
    );
    assert_eq!(writes.conflicts("configmaps"), 0, "{writes:?}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_divide_the_tenant_clusters_and_take_over_from_a_dead_one() {
    let host_server = crate::servers::host_with_crds().await;
    let host = host_server.client().await.unwrap();
    let tenant_server = crate::servers::tenant().await;
    let tenant = tenant_server.client().await.unwrap();
    attach_all(&host, &tenant_server).await;
    tenant_configmap(&tenant, "before").await;

    let start_counts = host_server.request_counts().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut replicas: Vec<Replica> = REPLICAS
        .iter()
        .map(|id| Replica::spawn(&host_server, id, logs.path()))
        .collect();
    // Divided: every shard with the replica that wins it, each replica with some.
    let holders = eventually("the shards divided among three replicas", DEADLINE, || {
        settled(&host, &REPLICAS)
    })
    .await;
    for id in REPLICAS {
        assert!(
            holders.values().any(|h| h == id),
            "{id} holds no shard: {holders:?}"
        );
    }
    eventually(
        "a copy of `before` for every TenantCluster",
        DEADLINE,
        || async {
            let n = copies(&host, "before").await;
            if n == TENANT_CLUSTERS { Ok(()) } else { Err(n) }
        },
    )
    .await;
    let all: Vec<&Replica> = replicas.iter().collect();
    eventually(
        "each engine in the replica holding its shard",
        DEADLINE,
        || engines_where_shards_are(&all, &holders),
    )
    .await;
    let counts = host_server
        .request_counts()
        .await
        .unwrap()
        .since(&start_counts);
    let managed = Api::<ConfigMap>::all(host.clone())
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=tenantplane"))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(
        counts.requests("POST", "configmaps"),
        managed as u64,
        "handing shards over while joining created each host copy once: {counts:?}"
    );
    assert_eq!(counts.conflicts("configmaps"), 0, "{counts:?}");
    let took = one_create_per_copy(&host_server, &host, &tenant, "steady").await;
    eprintln!("three replicas: one tenant ConfigMap on 30 hosts in {took:?}");

    // The replica holding most shards dies without a word.
    let victim = REPLICAS
        .iter()
        .enumerate()
        .max_by_key(|(_, id)| holders.values().filter(|h| h == id).count())
        .map(|(i, _)| i)
        .unwrap();
    replicas[victim].child.kill().unwrap();
    replicas[victim].child.wait().unwrap();
    let killed = Instant::now();
    let survivors: Vec<&str> = REPLICAS
        .iter()
        .copied()
        .filter(|id| *id != REPLICAS[victim])
        .collect();
    let took = one_create_per_copy(&host_server, &host, &tenant, "after-kill").await;
    eprintln!(
        "{} killed: its TenantClusters synced again {:?} after (lease {LEASE_SECS} s); the ConfigMap on 30 hosts in {took:?}",
        REPLICAS[victim],
        killed.elapsed()
    );
    let holders = eventually("the shards divided among the survivors", DEADLINE, || {
        settled(&host, &survivors)
    })
    .await;
    let alive: Vec<&Replica> = replicas
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, r)| r)
        .collect();
    eventually(
        "each engine in the surviving replica holding its shard",
        DEADLINE,
        || engines_where_shards_are(&alive, &holders),
    )
    .await;

    // It comes back under the same identity: its shards move back to it, handed
    // over (stopped, released) before it takes them.
    replicas[victim] = Replica::spawn(&host_server, REPLICAS[victim], logs.path());
    let holders = eventually(
        "the shards divided among three replicas again",
        DEADLINE,
        || settled(&host, &REPLICAS),
    )
    .await;
    let all: Vec<&Replica> = replicas.iter().collect();
    eventually(
        "each engine in the replica holding its shard again",
        DEADLINE,
        || engines_where_shards_are(&all, &holders),
    )
    .await;
    one_create_per_copy(&host_server, &host, &tenant, "after-join").await;

    // A clean stop gives every Lease up at once.
    for replica in &replicas {
        let status = Command::new("kill")
            .args(["-TERM", &replica.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    for replica in &mut replicas {
        eventually(
            &format!("{} to exit after SIGTERM", replica.identity),
            DEADLINE,
            || {
                let exited = replica.child.try_wait().unwrap();
                async move { exited }
            },
        )
        .await;
    }
    let leases = Api::<Lease>::namespaced(host.clone(), LEASE_NAMESPACE)
        .list(&ListParams::default().labels(&format!("tenantplane.io/shard-group={GROUP}")))
        .await
        .unwrap();
    for lease in &leases.items {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        assert!(
            lease.labels().contains_key("tenantplane.io/shard") && holder.is_none(),
            "{} still held by {holder:?} (or a replica Lease left behind)",
            lease.name_any()
        );
    }
}
