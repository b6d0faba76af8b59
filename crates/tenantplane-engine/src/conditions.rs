//! Status conditions keyed by type, shared by the controllers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use tenantplane_core::conditions::{self, Verdict};

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
        let verdict = Verdict {
            type_: kind,
            ok,
            reason,
            message,
        };
        conditions::set(
            &mut self.conditions,
            verdict,
            self.generation,
            Timestamp::now(),
        );
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
