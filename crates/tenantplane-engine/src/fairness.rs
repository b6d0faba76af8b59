//! `IsolationProfile.controls.apiFairness`: a token bucket on one tenant's host writes.

use std::sync::Mutex;
use std::time::Duration;

// tokio's clock, so tests can run it paused.
use tokio::time::Instant;

use tenantplane_api::ApiFairness;
use tenantplane_core::token_bucket::TokenBucket;

pub struct WriteBudget {
    bucket: Mutex<TokenBucket>,
}

impl WriteBudget {
    pub fn new(fairness: ApiFairness) -> Self {
        Self {
            bucket: Mutex::new(TokenBucket::full(
                f64::from(fairness.qps),
                f64::from(fairness.burst),
                now(),
            )),
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        self.bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn qps(&self) -> f64 {
        self.bucket().per_second()
    }

    /// Takes a token if one is there now; `false` when the budget is spent.
    pub fn try_acquire(&self) -> bool {
        self.bucket().take(now()).is_ok()
    }

    /// Takes a token, waiting for one if the budget is spent. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let start = Instant::now();
        loop {
            // The guard is dropped before the sleep.
            let taken = self.bucket().take(now());
            match taken {
                Ok(()) => return start.elapsed(),
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }
}

/// tokio's clock as a std instant, so paused tests drive the bucket too.
fn now() -> std::time::Instant {
    Instant::now().into_std()
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
