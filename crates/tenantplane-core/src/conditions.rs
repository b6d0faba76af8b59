//! Status conditions keyed by type, keeping `lastTransitionTime` while a status holds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// One condition's new verdict.
#[derive(Clone, Copy, Debug)]
pub struct Verdict<'a> {
    pub type_: &'a str,
    pub ok: bool,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Sets `verdict` in `conditions`: replaces the condition of its type, moving
/// `lastTransitionTime` to `now` only when the status flips.
pub fn set(
    conditions: &mut Vec<Condition>,
    verdict: Verdict<'_>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if verdict.ok { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == verdict.type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = Time(now);
            }
            existing.status = status.into();
            existing.reason = verdict.reason.into();
            existing.message = verdict.message.into();
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: verdict.type_.into(),
            status: status.into(),
            reason: verdict.reason.into(),
            message: verdict.message.into(),
            last_transition_time: Time(now),
            observed_generation: generation,
        }),
    }
}

/// Conditions keyed by type while a status is decided: every verdict set is
/// stamped with one `now` and the status's generation.
#[derive(Clone, Debug)]
pub struct ConditionSet {
    conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
}

impl ConditionSet {
    pub fn new(existing: &[Condition], generation: Option<i64>, now: Timestamp) -> Self {
        Self {
            conditions: existing.to_vec(),
            generation,
            now,
        }
    }

    /// Sets the condition `type_` (see [`set`]).
    pub fn set(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        let verdict = Verdict {
            type_,
            ok,
            reason,
            message,
        };
        set(&mut self.conditions, verdict, self.generation, self.now);
    }

    /// Whether the condition `type_` is there with status True (`ok`) or False.
    pub fn is(&self, type_: &str, ok: bool) -> bool {
        let status = if ok { "True" } else { "False" };
        self.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == status)
    }

    /// The conditions sorted by type, so equal sets compare (and write) equal.
    pub fn into_vec(mut self) -> Vec<Condition> {
        self.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        self.conditions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(ok: bool, reason: &str) -> Verdict<'_> {
        Verdict {
            type_: "Ready",
            ok,
            reason,
            message: "m",
        }
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let t = |s| Timestamp::from_second(s).unwrap_or_default();
        let mut conditions = Vec::new();
        set(&mut conditions, verdict(true, "A"), Some(1), t(10));
        set(&mut conditions, verdict(true, "B"), Some(2), t(20));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(t(10)));
        assert_eq!(conditions[0].reason, "B");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set(&mut conditions, verdict(false, "C"), Some(2), t(30));
        assert_eq!(conditions[0].last_transition_time, Time(t(30)));
        assert_eq!(conditions[0].status, "False");
    }

    #[test]
    fn a_set_stamps_its_now_and_generation_and_sorts_by_type() {
        let t = |s| Timestamp::from_second(s).unwrap_or_default();
        let mut first = ConditionSet::new(&[], Some(4), t(10));
        first.set("Synced", false, "Syncing", "m");
        first.set("Ready", true, "R", "m");
        let earlier = first.into_vec();
        let types: Vec<&str> = earlier.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Synced"]);
        let mut second = ConditionSet::new(&earlier, Some(5), t(20));
        assert!(second.is("Synced", false));
        assert!(!second.is("Synced", true));
        assert!(!second.is("Missing", false));
        second.set("Synced", true, "Synced", "m");
        second.set("Ready", true, "R", "m");
        let later = second.into_vec();
        assert_eq!(later[0].last_transition_time, Time(t(10)));
        assert_eq!(later[1].last_transition_time, Time(t(20)));
        assert!(later.iter().all(|c| c.observed_generation == Some(5)));
    }
}
