//! The conflict history a SyncDecision keeps per bidirectional object
//! (`status.conflicts`): the latest conflicts and how each was settled, apart from
//! the capped decision list so they are not evicted by unrelated decisions.
//!
//! The engine reports every pass with a conflict; a manual conflict is reported on
//! every requeue while it lasts, so an unchanged repeat is not recorded again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tenantplane_api::sync_policy::ConflictPolicy;
use tenantplane_api::{
    ConflictHistory, ConflictRecord, ConflictResolution, HostTarget, TenantObjectRef,
};

use super::{Resolution, ThreeWayPlan, summary};

/// Records kept per object, newest last.
pub const MAX_CONFLICT_RECORDS: usize = 10;
/// Objects kept; the one least recently in conflict is evicted first.
pub const MAX_CONFLICTED_OBJECTS: usize = 100;
/// A record's detail is cut to this many characters (the SyncDecision is one object).
pub const MAX_DETAIL_CHARS: usize = 500;

/// The bidirectional object a conflict is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictedObject {
    pub api_version: String,
    pub kind: String,
    pub tenant: TenantObjectRef,
    pub host: HostTarget,
}

impl ConflictedObject {
    fn owns(&self, history: &ConflictHistory) -> bool {
        history.api_version == self.api_version
            && history.kind == self.kind
            && history.host == self.host
    }
}

/// The record of a pass that met conflicts, `None` when it met none.
pub fn conflict_record(
    plan: &ThreeWayPlan,
    policy: ConflictPolicy,
    time: Time,
) -> Option<ConflictRecord> {
    if plan.conflicts.is_empty() {
        return None;
    }
    let resolution = if plan.unresolved().next().is_some() {
        ConflictResolution::LeftAlone
    } else {
        match plan.conflicts[0].resolution {
            Resolution::TenantWon => ConflictResolution::TenantWon,
            Resolution::HostWon => ConflictResolution::HostWon,
            Resolution::LeftAlone => ConflictResolution::LeftAlone,
        }
    };
    let detail: Vec<String> = summary(plan)
        .into_iter()
        .filter_map(|line| line.strip_prefix("conflict: ").map(str::to_owned))
        .collect();
    Some(ConflictRecord {
        time,
        fields: plan.conflicts.iter().map(|c| c.path.clone()).collect(),
        policy,
        resolution,
        detail: detail.join("; "),
    })
}

/// The record of a pass without conflicts: it ends a conflict left alone, if the
/// object has one ([`record_conflict`] ignores it otherwise). The fields are
/// those of the conflict it ends.
pub fn resolved_record(plan: &ThreeWayPlan, policy: ConflictPolicy, time: Time) -> ConflictRecord {
    let writes = summary(plan);
    let detail = if writes.is_empty() {
        "the tenant and the host agree again".to_owned()
    } else {
        format!(
            "the tenant and the host agree again after: {}",
            writes.join("; ")
        )
    };
    ConflictRecord {
        time,
        fields: Vec::new(),
        policy,
        resolution: ConflictResolution::Resolved,
        detail,
    }
}

/// Adds `record` to `object`'s history, moving the object to the end (most
/// recently in conflict). Returns whether anything changed: a repeat of the
/// object's last conflict left alone (same fields, values and policy) is not
/// added, nor is a `Resolved` record when no conflict was left alone.
pub fn record_conflict(
    histories: &mut Vec<ConflictHistory>,
    object: &ConflictedObject,
    mut record: ConflictRecord,
) -> bool {
    if record.detail.chars().count() > MAX_DETAIL_CHARS {
        record.detail = record.detail.chars().take(MAX_DETAIL_CHARS).collect();
    }
    let position = histories.iter().position(|h| object.owns(h));
    let last = position.and_then(|i| histories[i].records.last());
    let last_left_alone = last.filter(|r| r.resolution == ConflictResolution::LeftAlone);
    match record.resolution {
        ConflictResolution::Resolved => {
            let Some(ended) = last_left_alone else {
                return false;
            };
            if record.fields.is_empty() {
                record.fields = ended.fields.clone();
            }
        }
        ConflictResolution::LeftAlone => {
            if last_left_alone.is_some_and(|r| {
                r.fields == record.fields && r.detail == record.detail && r.policy == record.policy
            }) {
                return false;
            }
        }
        ConflictResolution::TenantWon | ConflictResolution::HostWon => {}
    }
    let mut history = match position {
        Some(i) => histories.remove(i),
        None => ConflictHistory {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            tenant: object.tenant.clone(),
            host: object.host.clone(),
            records: Vec::new(),
        },
    };
    // A tenant object recreated under the same name keeps the history; the ref is the latest.
    history.tenant = object.tenant.clone();
    history.records.push(record);
    let excess = history.records.len().saturating_sub(MAX_CONFLICT_RECORDS);
    history.records.drain(..excess);
    histories.push(history);
    let excess = histories.len().saturating_sub(MAX_CONFLICTED_OBJECTS);
    histories.drain(..excess);
    true
}

/// The history of the host object `kind` `name`, as `tenantplane why` shows it.
pub fn history_of<'a>(
    histories: &'a [ConflictHistory],
    kind: &str,
    name: &str,
) -> Option<&'a ConflictHistory> {
    histories
        .iter()
        .find(|h| h.kind == kind && h.host.name == name)
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
