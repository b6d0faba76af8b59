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
}
