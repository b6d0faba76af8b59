//! Leader election on a real API server: never two leaders, and a standby takes over.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tenantplane_engine::leader::{LeaseConfig, run_as_leader};
use tenantplane_testenv::TestEnv;
use tokio_util::sync::CancellationToken;

fn fast(holder: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(300),
        renew_deadline: Duration::from_millis(1500),
        retry_every: Duration::from_millis(200),
        ..LeaseConfig::new("default", "tenantplane-controller", holder)
    }
}

#[tokio::test]
async fn only_one_replica_leads_and_a_standby_takes_over() {
    let env = TestEnv::start().await.unwrap();
    let server = env.start_apiserver("host").await.unwrap();
    let client = server.client().await.unwrap();

    let active = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let leader_runs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut replicas = Vec::new();
    for holder in ["replica-a", "replica-b"] {
        let shutdown = CancellationToken::new();
        let (active, most, runs) = (
            Arc::clone(&active),
            Arc::clone(&most_at_once),
            Arc::clone(&leader_runs),
        );
        let task = tokio::spawn(run_as_leader(
            client.clone(),
            fast(holder),
            shutdown.clone(),
            move |lost| {
                let (active, most, runs) =
                    (Arc::clone(&active), Arc::clone(&most), Arc::clone(&runs));
                async move {
                    runs.lock().unwrap().push(holder.to_owned());
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    lost.cancelled().await;
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            },
        ));
        replicas.push((holder, shutdown, task));
    }

    let wait_for_leader = |count: usize| {
        let runs = Arc::clone(&leader_runs);
        async move {
            let start = Instant::now();
            while runs.lock().unwrap().len() < count {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no leader after {count} terms"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            runs.lock().unwrap()[count - 1].clone()
        }
    };
    let first = wait_for_leader(1).await;
    // Several renewal periods with both replicas competing.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            active.load(Ordering::SeqCst),
            1,
            "exactly one leader at any time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        leader_runs.lock().unwrap().len(),
        1,
        "the leader kept its lease"
    );

    // The leader shuts down (and releases the lease): the standby takes over.
    let index = replicas.iter().position(|(h, ..)| *h == first).unwrap();
    let (_, shutdown, task) = replicas.remove(index);
    shutdown.cancel();
    task.await.unwrap();
    let second = wait_for_leader(2).await;
    assert_ne!(second, first);
    assert_eq!(
        most_at_once.load(Ordering::SeqCst),
        1,
        "two replicas never led at once"
    );
    for (_, shutdown, task) in replicas {
        shutdown.cancel();
        task.await.unwrap();
    }
}
