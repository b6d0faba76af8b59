//! Leader election on a real API server: never two leaders, and a standby takes over.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::shared_host;
use tenantplane_engine::leader::{LeaseConfig, run_as_leader};
use tenantplane_testenv::TestEnv;
use tokio_util::sync::CancellationToken;

/// Lease `lease` in `default`: a name per test, as two of them share a host.
fn fast(lease: &str, holder: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(300),
        renew_deadline: Duration::from_millis(1500),
        retry_every: Duration::from_millis(200),
        ..LeaseConfig::new("default", lease, holder)
    }
}

#[tokio::test]
async fn only_one_replica_leads_and_a_standby_takes_over() {
    let client = shared_host().client().await.unwrap();

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
            fast("takeover", holder),
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
            tenantplane_testenv::eventually(
                &format!("leader term {count}"),
                Duration::from_secs(20),
                || async { runs.lock().unwrap().get(count - 1).cloned() },
            )
            .await
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

/// A leader whose API server goes away stops its work within the renew deadline,
/// before its lease could expire for anyone else.
#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_before_its_lease_expires() {
    let env = TestEnv::start_shared().await.unwrap();
    let mut server = env.start_apiserver("host").await.unwrap();
    let client = server.client().await.unwrap();
    let config = fast("step-down", "replica-a");
    let (deadline, duration) = (config.renew_deadline, config.lease_duration);
    let started = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let stopped = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let shutdown = CancellationToken::new();
    let (s1, s2) = (Arc::clone(&started), Arc::clone(&stopped));
    let task = tokio::spawn(run_as_leader(
        client,
        config,
        shutdown.clone(),
        move |lost| {
            let (started, stopped) = (Arc::clone(&s1), Arc::clone(&s2));
            async move {
                *started.lock().unwrap() = Some(Instant::now());
                lost.cancelled().await;
                *stopped.lock().unwrap() = Some(Instant::now());
            }
        },
    ));
    let begin = Instant::now();
    while started.lock().unwrap().is_none() {
        assert!(begin.elapsed() < Duration::from_secs(20), "never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The last renewal before the outage happened at most one renewal period ago.
    let outage = Instant::now();
    server.stop();
    while stopped.lock().unwrap().is_none() {
        assert!(
            outage.elapsed() < Duration::from_secs(20),
            "the leader kept working without its lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let worked_on = stopped.lock().unwrap().unwrap() - outage;
    // Renewals fail fast with the server gone; the step-down comes at the deadline
    // (plus one renewal period and a request), always before the term runs out.
    assert!(
        worked_on < duration,
        "stepped down {worked_on:?} after the outage; the lease lasts {duration:?}, deadline {deadline:?}"
    );
    shutdown.cancel();
    task.await.unwrap();
}

/// The holder's renewTime is not compared with this replica's clock: a Lease whose
/// renewTime is an hour old (the holder's clock is behind, or it just died) is
/// taken over only after the candidate has seen it unchanged for a whole term.
#[tokio::test]
async fn a_lease_is_taken_over_after_a_term_of_local_time_whatever_its_renew_time_says() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use kube::Api;
    use kube::api::{ObjectMeta, PostParams};

    let client = shared_host().client().await.unwrap();
    let term_seconds = 3;
    let an_hour_ago = Timestamp::now()
        .checked_sub(SignedDuration::from_hours(1))
        .unwrap();
    Api::<Lease>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("skewed-clock".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("ghost".into()),
                    lease_duration_seconds: Some(term_seconds),
                    renew_time: Some(MicroTime(an_hour_ago)),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await
        .unwrap();
    let led = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let shutdown = CancellationToken::new();
    let begin = Instant::now();
    let mark = Arc::clone(&led);
    let task = tokio::spawn(run_as_leader(
        client,
        fast("skewed-clock", "replica-b"),
        shutdown.clone(),
        move |lost| {
            let mark = Arc::clone(&mark);
            async move {
                *mark.lock().unwrap() = Some(Instant::now());
                lost.cancelled().await;
            }
        },
    ));
    while led.lock().unwrap().is_none() {
        assert!(begin.elapsed() < Duration::from_secs(20), "never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waited = led.lock().unwrap().unwrap() - begin;
    assert!(
        waited >= Duration::from_secs(u64::try_from(term_seconds).unwrap()),
        "took over after {waited:?}, before a term of {term_seconds}s had passed on its own clock"
    );
    shutdown.cancel();
    task.await.unwrap();
}
