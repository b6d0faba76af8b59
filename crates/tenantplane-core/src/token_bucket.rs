//! A token bucket: a burst, then a steady rate. The clock is the caller's (tests
//! run it paused), so this holds no time source of its own.

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `per_second` (both at least 1).
    pub fn full(per_second: f64, burst: f64, now: Instant) -> Self {
        let burst = burst.max(1.0);
        Self {
            per_second: per_second.max(1.0),
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes a token, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(2.0, 3.0, start);
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        // Empty: the next token comes after 1/rate.
        assert_eq!(bucket.take(start), Err(Duration::from_millis(500)));
        assert!(bucket.take(start + Duration::from_millis(499)).is_err());
        assert_eq!(bucket.take(start + Duration::from_millis(500)), Ok(()));
        // A long pause refills only up to the burst.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn a_clock_going_back_takes_nothing_away() {
        let start = Instant::now() + Duration::from_secs(10);
        let mut bucket = TokenBucket::full(1.0, 1.0, start);
        assert_eq!(bucket.take(start), Ok(()));
        assert!(bucket.take(start - Duration::from_secs(5)).is_err());
        assert_eq!(bucket.take(start + Duration::from_secs(1)), Ok(()));
    }
}
