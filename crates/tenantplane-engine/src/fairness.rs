//! `IsolationProfile.controls.apiFairness`: a token bucket on one tenant's host writes.

use std::sync::Mutex;
use std::time::Duration;

// tokio's clock, so tests can run it paused.
use tokio::time::Instant;

use tenantplane_api::ApiFairness;

pub struct WriteBudget {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl WriteBudget {
    pub fn new(fairness: ApiFairness) -> Self {
        let qps = f64::from(fairness.qps.max(1));
        let burst = f64::from(fairness.burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Takes a token if one is there now; `false` when the budget is spent.
    pub fn try_acquire(&self) -> bool {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, last) = *state;
        let now = Instant::now();
        let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        if refilled >= 1.0 {
            *state = (refilled - 1.0, now);
            true
        } else {
            *state = (refilled, now);
            false
        }
    }

    /// Takes a token, waiting for one if the budget is spent. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let start = Instant::now();
        loop {
            let wait = {
                let mut state = self
                    .state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let (tokens, last) = *state;
                let now = Instant::now();
                let refilled =
                    (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
                if refilled >= 1.0 {
                    *state = (refilled - 1.0, now);
                    None
                } else {
                    *state = (refilled, now);
                    Some(Duration::from_secs_f64((1.0 - refilled) / self.qps))
                }
            };
            match wait {
                None => return start.elapsed(),
                Some(wait) => tokio::time::sleep(wait).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn try_acquire_drops_beyond_the_burst_and_refills() {
        let budget = WriteBudget::new(ApiFairness { qps: 10, burst: 5 });
        for _ in 0..5 {
            assert!(budget.try_acquire());
        }
        assert!(!budget.try_acquire());
        tokio::time::advance(Duration::from_millis(110)).await;
        assert!(budget.try_acquire());
        assert!(!budget.try_acquire());
    }

    #[tokio::test(start_paused = true)]
    async fn the_burst_is_free_then_writes_are_paced() {
        let budget = WriteBudget::new(ApiFairness { qps: 10, burst: 5 });
        for _ in 0..5 {
            assert_eq!(budget.acquire().await, Duration::ZERO);
        }
        let start = tokio::time::Instant::now();
        for _ in 0..10 {
            budget.acquire().await;
        }
        let elapsed = start.elapsed();
        // Ten more writes at 10/s take about a second (paused clock: exact).
        assert!(
            elapsed >= Duration::from_millis(950) && elapsed <= Duration::from_millis(1100),
            "{elapsed:?}"
        );
    }
}
