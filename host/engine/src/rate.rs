//! The one pace of sandbox creation on this host: every run and every
//! cluster built from one set of connections shares it, so a large run (or
//! a daemon running many) does not stampede a cluster's API server or the
//! local machine, and no create waits on two limiters.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota};

/// Spaces sandbox creations evenly, one at a time.
#[derive(Debug)]
pub struct CreatePace {
    limiter: DefaultDirectRateLimiter,
}

impl CreatePace {
    /// A pace of `per_second` creations per second.
    ///
    /// # Errors
    ///
    /// When the rate is not a positive number, or too high to space.
    pub fn new(per_second: f64) -> Result<Self, String> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return Err(format!("a create rate must be positive, not {per_second}"));
        }
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / per_second))
            .ok_or_else(|| format!("create rate {per_second} is too high"))?
            .allow_burst(NonZeroU32::MIN);
        Ok(CreatePace {
            limiter: DefaultDirectRateLimiter::direct(quota),
        })
    }

    /// Waits until `count` more creations are allowed.
    pub async fn admit(&self, count: u32) {
        for _ in 0..count {
            self.limiter.until_ready().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[tokio::test]
    async fn creations_are_spaced_by_the_period() {
        let pace = CreatePace::new(20.0).unwrap();
        let started = Instant::now();
        pace.admit(1).await;
        pace.admit(5).await;
        // 20 per second, one at a time: the sixth waits for five periods.
        assert!(
            started.elapsed() >= Duration::from_millis(240),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_rate_that_cannot_pace_is_refused() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(CreatePace::new(rate).is_err(), "{rate}");
        }
    }
}
