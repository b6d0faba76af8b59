//! How long the host API server has failed to answer for one tenant object that
//! is being deleted. Past a bound its finalizer is released anyway, so a tenant
//! object is never stuck forever behind a host that is down: the host copy is
//! then removed by garbage collection once the host answers again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

// tokio's clock, so tests can run it paused.
use tokio::time::Instant;

use super::{Key, SyncError};

/// The kind a tracked key belongs to (a Pod and a ConfigMap may share a key).
type OutageKey = (&'static str, Key);

/// Per tenant object being finalized: since when the host has not answered.
pub(super) struct HostOutages {
    bound: Duration,
    since: Mutex<HashMap<OutageKey, Instant>>,
}

impl HostOutages {
    pub(super) fn new(bound: Duration) -> Self {
        Self {
            bound,
            since: Mutex::new(HashMap::new()),
        }
    }

    /// Records that the host did not answer for `kind` `key`. Returns for how long
    /// it has not answered once that exceeds the bound (release the object then).
    pub(super) fn failed(&self, kind: &'static str, key: &Key) -> Option<Duration> {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        let first = *since
            .entry((kind, key.clone()))
            .or_insert_with(Instant::now);
        let down_for = first.elapsed();
        (down_for >= self.bound).then_some(down_for)
    }

    /// The host answered for `kind` `key` (or the object was released): forget it.
    pub(super) fn answered(&self, kind: &'static str, key: &Key) {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(kind, key.clone()));
    }

    pub(super) fn bound(&self) -> Duration {
        self.bound
    }
}

/// Whether an error means the API server did not answer (connection refused,
/// timeout, TLS, 5xx) rather than answered "no" (4xx): only then does waiting
/// for it count towards the bound.
pub(super) fn is_unreachable(err: &SyncError) -> bool {
    match err {
        SyncError::Api { source, .. } => crate::unanswered::did_not_answer(source),
        SyncError::Decode(_) => false,
    }
}

/// The Skip reason recorded when an object is released without its host copy.
pub(super) fn released_reason(what: &str, down_for: Duration, bound: Duration) -> String {
    format!(
        "the host API server has not answered for {}s (bound {}s): the finalizer is removed \
         without deleting the host {what}, which garbage collection removes once the host answers",
        down_for.as_secs(),
        bound.as_secs()
    )
}
