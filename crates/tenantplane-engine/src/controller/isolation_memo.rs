//! The boundary each TenantCluster last had applied, so that the reconciles an
//! engine still syncing asks for every two seconds do not read its four
//! isolation objects from the host each time (at 1,000 TenantClusters that was
//! a third of the host requests of a cold start).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tenantplane_core::tenant_cluster_status::{IsolationVerdict, SYNCED_REQUEUE};

/// How long an applied boundary is trusted without looking at the host again.
/// Shorter than the requeue of a synced TenantCluster, so every such requeue
/// still finds and restores a deleted or edited isolation object.
const ISOLATION_RECHECK: Duration = Duration::from_secs(25);
const _: () = assert!(ISOLATION_RECHECK.as_secs() < SYNCED_REQUEUE.as_secs());

/// One applied boundary: what it was compiled from (a digest of the
/// TenantCluster, its IsolationProfile and its namespace peers' levels) and when.
struct Applied {
    inputs: String,
    at: Instant,
    verdict: IsolationVerdict,
}

/// Keyed by (namespace, name). Only applied verdicts are kept: a boundary that
/// failed or met a foreign object is tried again on every reconcile.
#[derive(Default)]
pub(super) struct IsolationMemo {
    applied: std::sync::Mutex<HashMap<(String, String), Applied>>,
}

impl IsolationMemo {
    /// The verdict applied from exactly `inputs` less than [`ISOLATION_RECHECK`]
    /// before `now`, if there is one.
    pub(super) fn fresh(
        &self,
        key: &(String, String),
        inputs: &str,
        now: Instant,
    ) -> Option<IsolationVerdict> {
        let applied = self.lock();
        let entry = applied.get(key)?;
        (entry.inputs == inputs && now.saturating_duration_since(entry.at) < ISOLATION_RECHECK)
            .then(|| entry.verdict.clone())
    }

    /// Remembers `verdict` when it is applied; forgets the key otherwise.
    pub(super) fn record(
        &self,
        key: (String, String),
        inputs: String,
        verdict: &IsolationVerdict,
        now: Instant,
    ) {
        let mut applied = self.lock();
        if verdict.applied {
            applied.insert(
                key,
                Applied {
                    inputs,
                    at: now,
                    verdict: verdict.clone(),
                },
            );
        } else {
            applied.remove(&key);
        }
    }

    pub(super) fn forget(&self, key: &(String, String)) {
        self.lock().remove(key);
    }

    /// Forgets every key `which` selects: a shard given up to another replica,
    /// whose boundaries that replica may change before this one gets it back.
    pub(super) fn forget_where(&self, which: impl Fn(&(String, String)) -> bool) {
        self.lock().retain(|key, _| !which(key));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Applied>> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (String, String) {
        ("team-a".to_owned(), "tc".to_owned())
    }

    fn verdict(applied: bool) -> IsolationVerdict {
        IsolationVerdict {
            applied,
            reason: if applied { "Applied" } else { "Conflict" },
            message: "NetworkPolicy tenantplane-isolation-tc".to_owned(),
        }
    }

    #[test]
    fn an_applied_boundary_is_reused_from_the_same_inputs_until_the_recheck() {
        let memo = IsolationMemo::default();
        let start = Instant::now();
        memo.record(key(), "d1".to_owned(), &verdict(true), start);
        assert_eq!(memo.fresh(&key(), "d1", start), Some(verdict(true)));
        let just_before = start + ISOLATION_RECHECK - Duration::from_millis(1);
        assert_eq!(memo.fresh(&key(), "d1", just_before), Some(verdict(true)));
        assert_eq!(memo.fresh(&key(), "d1", start + ISOLATION_RECHECK), None);
    }

    #[test]
    fn changed_inputs_or_another_tenant_cluster_read_the_host_again() {
        let memo = IsolationMemo::default();
        let start = Instant::now();
        memo.record(key(), "d1".to_owned(), &verdict(true), start);
        assert_eq!(memo.fresh(&key(), "d2", start), None);
        let other = ("team-a".to_owned(), "tc2".to_owned());
        assert_eq!(memo.fresh(&other, "d1", start), None);
    }

    #[test]
    fn a_boundary_not_applied_is_never_reused_and_clears_an_applied_one() {
        let memo = IsolationMemo::default();
        let start = Instant::now();
        memo.record(key(), "d1".to_owned(), &verdict(false), start);
        assert_eq!(memo.fresh(&key(), "d1", start), None);
        memo.record(key(), "d1".to_owned(), &verdict(true), start);
        memo.record(key(), "d1".to_owned(), &verdict(false), start);
        assert_eq!(memo.fresh(&key(), "d1", start), None);
    }

    #[test]
    fn a_forgotten_tenant_cluster_reads_the_host_again() {
        let memo = IsolationMemo::default();
        let start = Instant::now();
        memo.record(key(), "d1".to_owned(), &verdict(true), start);
        memo.forget(&key());
        assert_eq!(memo.fresh(&key(), "d1", start), None);
    }

    #[test]
    fn a_shard_given_up_forgets_only_its_own_boundaries() {
        let memo = IsolationMemo::default();
        let start = Instant::now();
        let other = ("team-b".to_owned(), "tc".to_owned());
        memo.record(key(), "d1".to_owned(), &verdict(true), start);
        memo.record(other.clone(), "d1".to_owned(), &verdict(true), start);
        memo.forget_where(|(namespace, _)| namespace == "team-a");
        assert_eq!(memo.fresh(&key(), "d1", start), None);
        assert_eq!(memo.fresh(&other, "d1", start), Some(verdict(true)));
    }
}
