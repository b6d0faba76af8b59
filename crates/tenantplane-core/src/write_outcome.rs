//! What a failed host create or update means, from the host's HTTP status code.
//! Every write path classifies the answer here, so a refusal is recorded (not
//! resent) and a conflict re-planned the same way everywhere.

/// Why the host refused an object it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedAs {
    /// 422: validation (an invalid value, or a field that cannot change).
    Invalid,
    /// 403: authorization or admission (RBAC, quota, a policy webhook).
    Forbidden,
}

/// The meaning of a failed create or update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// 409: the name is taken (create) or the object changed since it was read
    /// (update): the cache lags, and a later look decides again.
    Conflict,
    /// The host refused the object itself: sending it again unchanged is refused
    /// again, so the refusal is recorded instead.
    Refused(RefusedAs),
    /// Anything else (server error, throttling, unreachable): an error, retried.
    Failed,
}

impl WriteOutcome {
    /// Classifies the HTTP status code of a failed write.
    pub fn of_status(code: u16) -> Self {
        match code {
            409 => Self::Conflict,
            422 => Self::Refused(RefusedAs::Invalid),
            403 => Self::Refused(RefusedAs::Forbidden),
            _ => Self::Failed,
        }
    }

    /// Whether the host refused the object (for either reason).
    pub fn is_refused(self) -> bool {
        matches!(self, Self::Refused(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_refusals_and_failures_are_told_apart() {
        assert_eq!(WriteOutcome::of_status(409), WriteOutcome::Conflict);
        assert_eq!(
            WriteOutcome::of_status(422),
            WriteOutcome::Refused(RefusedAs::Invalid)
        );
        assert_eq!(
            WriteOutcome::of_status(403),
            WriteOutcome::Refused(RefusedAs::Forbidden)
        );
        for code in [400, 401, 404, 410, 429, 500, 503, 504] {
            assert_eq!(
                WriteOutcome::of_status(code),
                WriteOutcome::Failed,
                "{code}"
            );
        }
    }

    #[test]
    fn only_refusals_are_refused() {
        assert!(WriteOutcome::of_status(422).is_refused());
        assert!(WriteOutcome::of_status(403).is_refused());
        assert!(!WriteOutcome::of_status(409).is_refused());
        assert!(!WriteOutcome::of_status(500).is_refused());
    }
}
