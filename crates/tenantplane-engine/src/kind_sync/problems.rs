//! Objects with a problem a TenantCluster condition reports (a Service refused its
//! host address, a two-way conflict left for a person): one message per object;
//! the condition shows the first and counts the rest.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::Key;
use crate::status_alarm::StatusAlarm;

#[derive(Debug)]
pub struct ObjectProblems<K> {
    /// What the objects are, in "(and 3 more Services)".
    noun: &'static str,
    problems: Mutex<BTreeMap<K, String>>,
    /// Raised when an object gains or loses the problem (the condition changes).
    alarm: StatusAlarm,
}

/// Tenant Services whose host address their API server refuses (it serves another
/// service CIDR), for the TenantCluster's `ServiceCIDR` condition.
pub type ServiceCidrMismatches = ObjectProblems<Key>;

/// Bidirectional objects (by kind and key) with conflicts left for a person
/// (`manual`), for the TenantCluster's `Conflicted` condition.
pub type ConflictedObjects = ObjectProblems<(String, Key)>;

impl<K: Ord> ObjectProblems<K> {
    pub fn new(noun: &'static str) -> Self {
        Self::with_alarm(noun, StatusAlarm::default())
    }

    pub fn with_alarm(noun: &'static str, alarm: StatusAlarm) -> Self {
        Self {
            noun,
            problems: Mutex::new(BTreeMap::new()),
            alarm,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<K, String>> {
        self.problems.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The condition message, when some object has the problem.
    pub fn message(&self) -> Option<String> {
        let problems = self.lock();
        let first = problems.values().next()?;
        let more = problems.len() - 1;
        Some(if more == 0 {
            first.clone()
        } else {
            format!("{first} (and {more} more {})", self.noun)
        })
    }

    pub(super) fn set(&self, key: K, message: String) {
        let previous = self.lock().insert(key, message.clone());
        if previous.as_ref() != Some(&message) {
            self.alarm.raise();
        }
    }

    pub(super) fn clear(&self, key: &K) {
        let removed = self.lock().remove(key);
        if removed.is_some() {
            self.alarm.raise();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_alarm_rings_when_an_object_gains_changes_or_loses_its_problem() {
        let rung = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&rung);
        let problems = ConflictedObjects::with_alarm(
            "objects",
            StatusAlarm::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        );
        let key = ("Gadget".to_owned(), ("default".to_owned(), "g1".to_owned()));
        problems.set(key.clone(), "spec.size conflicts".into());
        assert_eq!(rung.load(Ordering::SeqCst), 1, "gained");
        problems.set(key.clone(), "spec.size conflicts".into());
        assert_eq!(rung.load(Ordering::SeqCst), 1, "the same problem again");
        problems.set(key.clone(), "spec.colour conflicts".into());
        assert_eq!(rung.load(Ordering::SeqCst), 2, "changed");
        problems.clear(&key);
        assert_eq!(rung.load(Ordering::SeqCst), 3, "lost");
        problems.clear(&key);
        assert_eq!(rung.load(Ordering::SeqCst), 3, "nothing to lose");
    }

    #[test]
    fn the_first_problem_is_shown_and_the_rest_counted() {
        let problems = ServiceCidrMismatches::new("Services");
        assert_eq!(problems.message(), None);
        let key = |n: &str| ("default".to_owned(), n.to_owned());
        problems.set(key("b"), "b is refused".into());
        assert_eq!(problems.message().as_deref(), Some("b is refused"));
        problems.set(key("a"), "a is refused".into());
        assert_eq!(
            problems.message().as_deref(),
            Some("a is refused (and 1 more Services)")
        );
        problems.clear(&key("a"));
        problems.clear(&key("b"));
        assert_eq!(problems.message(), None);
    }
}
