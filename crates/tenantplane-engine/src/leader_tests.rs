//! The election against a scripted API server: what each attempt sends, and when
//! a leader steps down.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Attempt, LeaseConfig, LeaseObserver, run_as_leader, try_acquire};
use crate::mock_api::{MockApi, status};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/system/leases/tenantplane";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/system/leases";

fn config() -> LeaseConfig {
    LeaseConfig::new("system", "tenantplane", "me")
}

/// The Lease as the server holds it. `renewTime` is a long time ago: a candidate
/// never compares it with its own clock.
fn lease(holder: &str, resource_version: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "tenantplane", "namespace": "system", "resourceVersion": resource_version},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "leaseTransitions": 3,
            "acquireTime": "2000-01-01T00:00:00.000000Z",
            "renewTime": "2000-01-01T00:00:00.000000Z",
        },
    })
}

fn not_found() -> Value {
    status(404, "NotFound", "leases \"tenantplane\" not found")
}

fn held_by(attempt: Result<Attempt, kube::Error>) -> Option<String> {
    match attempt {
        Ok(Attempt::HeldByOther(holder)) => Some(holder),
        Ok(Attempt::Acquired) => None,
        Err(err) => panic!("attempt failed: {err}"),
    }
}

#[tokio::test]
async fn a_renewal_answered_409_counts_as_lost() {
    let mock = MockApi::new();
    mock.reply(200, lease("me", "5"))
        .reply(409, status(409, "Conflict", "the object has been modified"));
    let api: Api<Lease> = Api::namespaced(mock.client(), "system");
    let attempt = try_acquire(&api, &config(), &mut LeaseObserver::default()).await;
    assert_eq!(held_by(attempt).as_deref(), Some("(taken concurrently)"));
    assert_eq!(mock.calls(), [format!("GET {PATH}"), format!("PUT {PATH}")]);
    // The renewal carries the version read, so a concurrent writer makes it fail.
    let body = mock.sent()[1].body.clone().unwrap_or_default();
    assert_eq!(body["metadata"]["resourceVersion"], "5");
    assert_eq!(body["spec"]["holderIdentity"], "me");
    // Our own renewal is no transition, and keeps the time it was acquired.
    assert_eq!(body["spec"]["leaseTransitions"], 3);
    assert_eq!(body["spec"]["acquireTime"], "2000-01-01T00:00:00.000000Z");
    assert_ne!(body["spec"]["renewTime"], "2000-01-01T00:00:00.000000Z");
}

#[tokio::test]
async fn a_create_answered_409_counts_as_held_by_another() {
    let mock = MockApi::new();
    mock.reply(404, not_found()).reply(
        409,
        status(
            409,
            "AlreadyExists",
            "leases \"tenantplane\" already exists",
        ),
    );
    let api: Api<Lease> = Api::namespaced(mock.client(), "system");
    let attempt = try_acquire(&api, &config(), &mut LeaseObserver::default()).await;
    assert!(held_by(attempt).is_some());
    assert_eq!(
        mock.calls(),
        [format!("GET {PATH}"), format!("POST {COLLECTION}")]
    );
    let body = mock.sent()[1].body.clone().unwrap_or_default();
    assert_eq!(body["spec"]["holderIdentity"], "me");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
}

#[tokio::test(start_paused = true)]
async fn another_holders_lease_is_taken_only_after_a_term_unchanged_by_our_clock() {
    let mock = MockApi::new();
    for _ in 0..3 {
        mock.reply(200, lease("other", "9"));
    }
    mock.reply_with(|sent| (200, sent[3].body.clone().unwrap_or_default()));
    let api: Api<Lease> = Api::namespaced(mock.client(), "system");
    let mut observer = LeaseObserver::default();
    // Its renewTime is years old by our clock, but this version is new to us.
    let first = try_acquire(&api, &config(), &mut observer).await;
    assert_eq!(held_by(first).as_deref(), Some("other"));
    tokio::time::advance(Duration::from_secs(15) - Duration::from_millis(1)).await;
    let before_term = try_acquire(&api, &config(), &mut observer).await;
    assert_eq!(held_by(before_term).as_deref(), Some("other"));
    assert_eq!(mock.calls(), [format!("GET {PATH}"), format!("GET {PATH}")]);
    tokio::time::advance(Duration::from_millis(1)).await;
    let after_term = try_acquire(&api, &config(), &mut observer).await;
    assert_eq!(held_by(after_term), None);
    let calls = mock.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[3], format!("PUT {PATH}"));
    let body = mock.sent()[3].body.clone().unwrap_or_default();
    assert_eq!(body["metadata"]["resourceVersion"], "9");
    assert_eq!(body["spec"]["holderIdentity"], "me");
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    assert_ne!(body["spec"]["acquireTime"], "2000-01-01T00:00:00.000000Z");
}

#[tokio::test(start_paused = true)]
async fn a_renewed_lease_of_another_holder_is_never_taken() {
    let mock = MockApi::new();
    let api: Api<Lease> = Api::namespaced(mock.client(), "system");
    let mut observer = LeaseObserver::default();
    // The holder renews (a new version) every 10 s: 40 s pass, no term of 15 s
    // without a change.
    for version in ["1", "2", "3", "4", "5"] {
        mock.reply(200, lease("other", version));
        let attempt = try_acquire(&api, &config(), &mut observer).await;
        assert_eq!(held_by(attempt).as_deref(), Some("other"));
        tokio::time::advance(Duration::from_secs(10)).await;
    }
    assert!(mock.calls().iter().all(|c| c.starts_with("GET ")));
    assert_eq!(mock.calls().len(), 5);
}

/// What the leader's work saw: when it started and when it was told to stop.
#[derive(Debug, PartialEq)]
enum Seen {
    Started(Duration),
    Lost(Duration),
}

/// Runs the election with work that reports when it starts and loses the lease.
fn elect(
    mock: &MockApi,
    shutdown: &CancellationToken,
) -> (tokio::task::JoinHandle<()>, mpsc::UnboundedReceiver<Seen>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    let election = tokio::spawn(run_as_leader(
        mock.client(),
        config(),
        shutdown.clone(),
        move |lost: CancellationToken| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Seen::Started(start.elapsed()));
                lost.cancelled().await;
                let _ = tx.send(Seen::Lost(start.elapsed()));
            }
        },
    ));
    (election, rx)
}

#[tokio::test(start_paused = true)]
async fn a_leader_steps_down_when_the_renewal_finds_another_holder() {
    let mock = MockApi::new();
    mock.reply(404, not_found())
        .reply_with(|sent| (201, sent[1].body.clone().unwrap_or_default()))
        // At the first renewal, someone else holds it (our term ran out elsewhere).
        .reply(200, lease("other", "20"));
    let shutdown = CancellationToken::new();
    let (election, mut seen) = elect(&mock, &shutdown);
    assert_eq!(seen.recv().await, Some(Seen::Started(Duration::ZERO)));
    // Stopped at the renewal (every 5 s), without writing.
    assert_eq!(seen.recv().await, Some(Seen::Lost(Duration::from_secs(5))));
    let calls = mock.calls();
    assert_eq!(
        calls[..3],
        [
            format!("GET {PATH}"),
            format!("POST {COLLECTION}"),
            format!("GET {PATH}")
        ]
    );
    shutdown.cancel();
    let _ = election.await;
    // Never wrote the Lease after seeing it held by another.
    assert!(mock.calls()[2..].iter().all(|c| c.starts_with("GET ")));
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
    let mock = MockApi::new();
    mock.reply(404, not_found())
        .reply_with(|sent| (201, sent[1].body.clone().unwrap_or_default()))
        .unreachable()
        .unreachable();
    let shutdown = CancellationToken::new();
    let (election, mut seen) = elect(&mock, &shutdown);
    assert_eq!(seen.recv().await, Some(Seen::Started(Duration::ZERO)));
    // One failed renewal (at 5 s) is retried; at 10 s, the deadline, work stops:
    // before the 15 s term after which another replica may take the lease.
    let config = config();
    assert_eq!(seen.recv().await, Some(Seen::Lost(config.renew_deadline)));
    assert!(config.renew_deadline < config.lease_duration);
    assert_eq!(
        mock.calls()[..4],
        [
            format!("GET {PATH}"),
            format!("POST {COLLECTION}"),
            format!("GET {PATH}"),
            format!("GET {PATH}")
        ]
    );
    shutdown.cancel();
    let _ = election.await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_renews_keeps_leading_and_releases_on_shutdown() {
    let mock = MockApi::new();
    mock.reply(404, not_found())
        .reply_with(|sent| (201, sent[1].body.clone().unwrap_or_default()));
    for version in ["2", "3"] {
        mock.reply(200, lease("me", version)).reply_with(|sent| {
            (
                200,
                sent.last().and_then(|s| s.body.clone()).unwrap_or_default(),
            )
        });
    }
    // The release on shutdown: read, then give up the holder.
    mock.reply(200, lease("me", "4")).reply_with(|sent| {
        (
            200,
            sent.last().and_then(|s| s.body.clone()).unwrap_or_default(),
        )
    });
    let shutdown = CancellationToken::new();
    let (election, mut seen) = elect(&mock, &shutdown);
    assert_eq!(seen.recv().await, Some(Seen::Started(Duration::ZERO)));
    // Two renewals (5 s, 10 s), then shut down before the third.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(mock.calls().len(), 6, "{:?}", mock.calls());
    shutdown.cancel();
    assert_eq!(seen.recv().await, Some(Seen::Lost(Duration::from_secs(12))));
    let _ = election.await;
    let sent = mock.sent();
    assert_eq!(sent.len(), 8, "{:?}", mock.calls());
    assert_eq!(sent[7].method, http::Method::PUT);
    let body = sent[7].body.clone().unwrap_or_default();
    assert_eq!(body["metadata"]["resourceVersion"], "4");
    assert!(
        body["spec"]
            .get("holderIdentity")
            .is_none_or(Value::is_null)
    );
    assert_eq!(mock.unanswered(), 0);
}
