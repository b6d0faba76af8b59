//! Shard membership on a real API server, without controllers: replicas divide the
//! shards by rendezvous hash, a shard's work is stopped before its Lease changes
//! hands, and replicas that disagree on the shard count hold nothing.
//! (`crates/tenantplane/tests/shards.rs` runs whole controller processes.)

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::pooled_host;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tenantplane_core::sharding::preferred_holder;
use tenantplane_engine::metrics::Metrics;
use tenantplane_engine::shards::{self, LABEL_SHARD, LABEL_SHARD_GROUP, ShardConfig, ShardGates};
use tenantplane_testenv::{PooledServer, TestEnv, eventually};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "tenantplane-system";
const GROUP: &str = "shards";
const DEADLINE: Duration = Duration::from_secs(30);

/// What the shard callbacks saw, in order: `+n` taken, `-n` stopped.
type Journal = Arc<Mutex<Vec<String>>>;

struct Member {
    gates: Arc<ShardGates>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    journal: Journal,
}

fn start(host: &Client, holder: &str, count: u32) -> Member {
    let config = ShardConfig {
        lease_duration: Duration::from_secs(3),
        ..ShardConfig::new(NAMESPACE, GROUP, holder, count)
    };
    let gates = Arc::new(ShardGates::new(count));
    let shutdown = CancellationToken::new();
    let journal: Journal = Arc::default();
    let (taken, stopped) = (Arc::clone(&journal), Arc::clone(&journal));
    let task = tokio::spawn(shards::run(
        host.clone(),
        config,
        Arc::clone(&gates),
        Arc::new(Metrics::unregistered()),
        shutdown.clone(),
        move |shard| taken.lock().unwrap().push(format!("+{shard}")),
        move |shard| {
            let stopped = Arc::clone(&stopped);
            async move { stopped.lock().unwrap().push(format!("-{shard}")) }
        },
    ));
    Member {
        gates,
        shutdown,
        task,
        journal,
    }
}

/// Shard → holder, from the Leases.
async fn holders(host: &Client) -> BTreeMap<u32, String> {
    Api::<Lease>::namespaced(host.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("{LABEL_SHARD_GROUP}={GROUP}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| {
            let shard = l.labels().get(LABEL_SHARD)?.parse().ok()?;
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((shard, holder))
        })
        .collect()
}

fn wanted(count: u32, live: &[&str]) -> BTreeMap<u32, String> {
    (0..count)
        .map(|s| {
            (
                s,
                preferred_holder(s, live.iter().copied())
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect()
}

/// A host handed on from test to test (see [`pooled_host`]).
async fn host() -> (TestEnv, PooledServer, Client) {
    let env = TestEnv::start_shared().await.unwrap();
    let server = pooled_host().await;
    let client = server.client().await.unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await
        .unwrap();
    (env, server, client)
}

#[tokio::test]
async fn a_joining_replica_gets_its_shards_only_after_their_work_stopped() {
    let (_env, _server, host) = host().await;
    let a = start(&host, "a", 8);
    eventually("a holds every shard", DEADLINE, || async {
        let held = holders(&host).await;
        (held == wanted(8, &["a"]) && a.gates.open_shards().len() == 8).then_some(())
    })
    .await;

    let b = start(&host, "b", 8);
    let divided = wanted(8, &["a", "b"]);
    let moved: BTreeSet<u32> = divided
        .iter()
        .filter(|(_, h)| *h == "b")
        .map(|(s, _)| *s)
        .collect();
    assert!(!moved.is_empty(), "b wins no shard of eight: {divided:?}");
    eventually("the shards divided between a and b", DEADLINE, || async {
        (holders(&host).await == divided
            && b.gates.open_shards() == moved
            && a.gates.open_shards().is_disjoint(&moved))
        .then_some(())
    })
    .await;
    // Every shard b took, a had stopped first (a's journal says so before b's
    // gate opened: b's gate is open, so a's stop ran).
    let a_log = a.journal.lock().unwrap().clone();
    for shard in &moved {
        assert!(a_log.contains(&format!("-{shard}")), "{shard}: {a_log:?}");
        assert!(
            b.journal.lock().unwrap().contains(&format!("+{shard}")),
            "{shard}"
        );
    }

    // A clean stop of b hands its shards back at once (no expiry wait).
    b.shutdown.cancel();
    b.task.await.unwrap();
    eventually("a holds every shard again", DEADLINE, || async {
        (holders(&host).await == wanted(8, &["a"]) && a.gates.open_shards().len() == 8)
            .then_some(())
    })
    .await;
    a.shutdown.cancel();
    a.task.await.unwrap();
    assert!(holders(&host).await.is_empty(), "a released its shards");
}

#[tokio::test]
async fn replicas_that_disagree_on_the_shard_count_hold_nothing() {
    let (_env, _server, host) = host().await;
    let a = start(&host, "a", 4);
    eventually("a holds every shard", DEADLINE, || async {
        (a.gates.open_shards().len() == 4).then_some(())
    })
    .await;
    let b = start(&host, "b", 6);
    eventually("neither holds a shard", DEADLINE, || async {
        (a.gates.open_shards().is_empty()
            && b.gates.open_shards().is_empty()
            && holders(&host).await.is_empty())
        .then_some(())
    })
    .await;
    // Once the odd one is gone, the other takes everything again.
    b.shutdown.cancel();
    b.task.await.unwrap();
    eventually("a holds every shard again", DEADLINE, || async {
        (a.gates.open_shards().len() == 4).then_some(())
    })
    .await;
    a.shutdown.cancel();
    a.task.await.unwrap();
}
