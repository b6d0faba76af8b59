use kube::runtime::utils::Backoff;

use super::*;

#[test]
fn watch_retries_start_fast_cap_low_reset_and_differ_between_watches() {
    let mut backoff = watch_backoff();
    let delays: Vec<Duration> = backoff.by_ref().take(8).collect();
    // 200 ms, 400 ms, ... capped at 3 s, each plus a jitter below its own size.
    assert!(delays[0] >= Duration::from_millis(200), "{delays:?}");
    assert!(delays[0] < Duration::from_millis(400), "{delays:?}");
    assert!(
        delays.iter().all(|d| *d < Duration::from_secs(6)),
        "{delays:?}"
    );
    assert!(delays[7] >= Duration::from_secs(3), "{delays:?}");
    backoff.reset();
    assert!(
        backoff
            .next()
            .is_some_and(|d| d < Duration::from_millis(400))
    );
    // Two watches retrying after the same outage do not wait alike.
    let other: Vec<Duration> = watch_backoff().take(8).collect();
    assert_ne!(delays, other);
}
