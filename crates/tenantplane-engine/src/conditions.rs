//! Status conditions keyed by type, shared by the controllers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Conditions keyed by type, keeping `lastTransitionTime` while a status holds.
pub struct ConditionSet {
    conditions: Vec<Condition>,
    generation: Option<i64>,
}

impl ConditionSet {
    pub fn new(existing: &[Condition], generation: Option<i64>) -> Self {
        Self {
            conditions: existing.to_vec(),
            generation,
        }
    }

    pub fn set(&mut self, kind: &str, ok: bool, reason: &str, message: &str) {
        let status = if ok { "True" } else { "False" };
        let now = Time(Timestamp::now());
        match self.conditions.iter_mut().find(|c| c.type_ == kind) {
            Some(existing) => {
                if existing.status != status {
                    existing.last_transition_time = now;
                }
                existing.status = status.into();
                existing.reason = reason.into();
                existing.message = message.into();
                existing.observed_generation = self.generation;
            }
            None => self.conditions.push(Condition {
                type_: kind.into(),
                status: status.into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: now,
                observed_generation: self.generation,
            }),
        }
    }

    pub fn is(&self, kind: &str, ok: bool) -> bool {
        let status = if ok { "True" } else { "False" };
        self.conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == status)
    }

    pub fn into_vec(mut self) -> Vec<Condition> {
        self.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        self.conditions
    }
}
