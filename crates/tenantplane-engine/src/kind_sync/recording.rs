//! Decisions, Skips recorded once, latency and write counters, and the write
//! budget: what a sync records about itself.

use super::*;

impl KindSyncer {
    pub(super) fn tenant_ref(&self, key: &Key, uid: Option<String>) -> TenantObjectRef {
        TenantObjectRef {
            namespace: key.0.clone(),
            name: key.1.clone(),
            uid,
        }
    }

    pub(super) fn decide(
        &self,
        action: DecisionAction,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        reason: String,
    ) {
        self.ctx.decisions.send(
            action,
            &self.api_version,
            &self.group_kind.kind,
            self.tenant_ref(key, uid),
            HostTarget {
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name.to_owned(),
            },
            reason,
        );
    }

    /// Whether a Skip with this reason was not yet recorded for `host_name`.
    pub(super) fn skip_is_new(&self, host_name: &str, reason: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        refused
            .get(host_name)
            .is_none_or(|refusal| !refusal.reason.ends_with(reason))
    }

    /// Records a Skip once per (host name, desired hash, reason).
    pub(super) fn skip_once(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
    ) {
        self.skip_recorded(key, uid, host_name, desired_hash, reason, false);
    }

    /// [`Self::skip_once`] for a write the host API server itself refused (422,
    /// 403): it is not sent again until the desired state changes.
    pub(super) fn skip_until_changed(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
    ) {
        self.skip_recorded(key, uid, host_name, desired_hash, reason, true);
    }

    pub(super) fn skip_recorded(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        desired_hash: &str,
        reason: String,
        refused_by_host: bool,
    ) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = Refusal {
            hash: desired_hash.to_owned(),
            reason: reason.clone(),
            refused_by_host,
        };
        if refused.get(host_name) == Some(&entry) {
            return;
        }
        refused.insert(host_name.to_owned(), entry);
        drop(refused);
        self.decide(DecisionAction::Skip, key, uid, host_name, reason);
    }

    pub(super) fn observe_latency(&self, key: &Key) {
        if let Some(seen) = self
            .seen_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
        {
            self.ctx
                .metrics
                .sync_latency
                .observe(seen.elapsed().as_secs_f64());
        }
    }

    pub(super) async fn write_budget(&self) -> String {
        let waited = self.ctx.budget.acquire().await;
        if waited > Duration::from_millis(5) {
            format!(
                "; waited {} ms for the tenant's apiFairness budget ({} writes/s)",
                waited.as_millis(),
                self.ctx.budget.qps()
            )
        } else {
            String::new()
        }
    }

    pub(super) fn count_write(&self, verb: &'static str) {
        self.ctx
            .metrics
            .host_writes
            .get_or_create(&VerbLabels { verb })
            .inc();
    }
}
