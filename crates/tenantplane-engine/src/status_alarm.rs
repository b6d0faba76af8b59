//! What an engine sees that changes its TenantCluster's status wakes the
//! TenantCluster's reconcile: a tenant watch that starts failing or answers again
//! (`TenantUnreachable`, `Ready`), an object gaining or losing a problem a condition
//! reports (`Conflicted`, `ServiceCIDR`). The status says so at once, not at the
//! next requeue (30 s for a synced TenantCluster).

use std::sync::Arc;

/// Wakes one TenantCluster's reconcile. The default wakes nothing (engines started
/// outside the controller, as in unit tests).
#[derive(Clone, Default)]
pub struct StatusAlarm {
    wake: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl StatusAlarm {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            wake: Some(Arc::new(wake)),
        }
    }

    /// Something the status reports changed: look at the TenantCluster now.
    pub fn raise(&self) {
        if let Some(wake) = &self.wake {
            wake();
        }
    }
}

impl std::fmt::Debug for StatusAlarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusAlarm")
            .field("wakes", &self.wake.is_some())
            .finish()
    }
}

/// Whether one watch stream is failing, raising the alarm on each change: the
/// first error after events, and the first event after errors. Bounded by the
/// watch's backoff, never once per event.
#[derive(Debug, Default)]
pub struct WatchHealth {
    failing: bool,
}

impl WatchHealth {
    /// Records an event (`ok`) or an error; whether health changed.
    pub fn observe(&mut self, ok: bool) -> bool {
        let changed = self.failing == ok;
        self.failing = !ok;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn health_changes_only_on_the_first_error_and_the_first_event_after_it() {
        let mut health = WatchHealth::default();
        let seen: Vec<bool> = [true, true, false, false, false, true, true, false]
            .into_iter()
            .map(|ok| health.observe(ok))
            .collect();
        assert_eq!(
            seen,
            [false, false, true, false, false, true, false, true],
            "events while healthy and errors while failing change nothing"
        );
    }

    #[test]
    fn an_alarm_wakes_what_it_was_given_and_the_default_wakes_nothing() {
        let woken = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&woken);
        let alarm = StatusAlarm::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        alarm.raise();
        alarm.clone().raise();
        assert_eq!(woken.load(Ordering::SeqCst), 2);
        StatusAlarm::default().raise();
        assert_eq!(woken.load(Ordering::SeqCst), 2);
    }
}
