//! What a syncer remembers of each bidirectional object between two-way passes:
//! the versions of its last pass with nothing to write (so an unchanged object is
//! not planned again), and whether the end of a conflict was reported to the
//! SyncDecision's conflict history.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tenantplane_api::{ConflictPolicy, ConflictRecord, ConflictResolution, HostTarget};
use tenantplane_core::three_way::{
    ConflictedObject, SyncVersions, ThreeWayPlan, conflict_record, resolved_record,
};

use super::{Key, KindSyncer};
use crate::metrics::OutcomeLabels;

/// What a syncer remembers of each bidirectional object between passes.
#[derive(Debug, Default)]
pub(super) struct PassMemory(Mutex<HashMap<Key, Remembered>>);

#[derive(Debug, Default)]
struct Remembered {
    /// Both sides' versions at the last pass with nothing to write.
    quiet_at: Option<SyncVersions>,
    /// A pass without a conflict was reported since the last conflict (or since
    /// the start: a conflict left alone before a restart may have ended since).
    clean_reported: bool,
}

impl PassMemory {
    fn with<T>(&self, key: &Key, f: impl FnOnce(&mut Remembered) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(map.entry(key.clone()).or_default())
    }

    /// Neither side was written since the last pass with nothing to write.
    pub(super) fn quiet(&self, key: &Key, tenant: &Value, host: &Value) -> bool {
        self.with(key, |r| {
            r.quiet_at
                .as_ref()
                .is_some_and(|v| v.unchanged(tenant, host))
        })
    }

    pub(super) fn set_quiet(&self, key: &Key, versions: Option<SyncVersions>) {
        self.with(key, |r| r.quiet_at = versions);
    }

    fn clean_reported(&self, key: &Key) -> bool {
        self.with(key, |r| r.clean_reported)
    }

    fn set_clean_reported(&self, key: &Key, reported: bool) {
        self.with(key, |r| r.clean_reported = reported);
    }

    pub(super) fn forget(&self, key: &Key) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

impl KindSyncer {
    /// Sends a conflict left alone to the history now (the history drops
    /// unchanged repeats). A settled conflict, or the end of one left alone, is
    /// returned to be sent once the pass's writes are made.
    pub(super) fn report_conflict(
        &self,
        key: &Key,
        uid: Option<String>,
        host_name: &str,
        plan: &ThreeWayPlan,
        policy: ConflictPolicy,
    ) -> Option<(ConflictedObject, ConflictRecord)> {
        let object = ConflictedObject {
            api_version: self.api_version.clone(),
            kind: self.group_kind.kind.clone(),
            tenant: self.tenant_ref(key, uid),
            host: HostTarget {
                namespace: self.ctx.target.host_namespace.clone(),
                name: host_name.to_owned(),
            },
        };
        let now = Time(Timestamp::now());
        match conflict_record(plan, policy, now.clone()) {
            Some(record) => {
                self.passes.set_clean_reported(key, false);
                if record.resolution == ConflictResolution::LeftAlone {
                    self.ctx.decisions.send_conflict(object, record);
                    None
                } else {
                    Some((object, record))
                }
            }
            // The first clean pass since a conflict, or since the start: the
            // history ignores it unless it ends a conflict left alone.
            None if !self.passes.clean_reported(key) => {
                Some((object, resolved_record(plan, policy, now)))
            }
            None => None,
        }
    }

    pub(super) fn count_two_way_pass(&self, outcome: &'static str) {
        self.ctx
            .metrics
            .two_way_passes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Sends what [`Self::report_conflict`] deferred, after the writes succeeded.
    pub(super) fn report_settled(
        &self,
        key: &Key,
        object: ConflictedObject,
        record: ConflictRecord,
    ) {
        let clean = record.resolution == ConflictResolution::Resolved;
        self.ctx.decisions.send_conflict(object, record);
        self.passes.set_clean_reported(key, clean);
    }
}
