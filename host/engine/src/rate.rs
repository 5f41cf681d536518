//! A host-wide limit on how fast sandboxes are created, so a large run does
//! not stampede a cluster's API server or the local machine.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Spaces creations evenly at `per_second`.
#[derive(Debug)]
pub(crate) struct CreateRate {
    interval: Duration,
    next_free: Mutex<Instant>,
}

impl CreateRate {
    /// A limiter allowing `per_second` creations per second (must be > 0).
    pub(crate) fn new(per_second: f64) -> Self {
        CreateRate {
            interval: Duration::from_secs_f64(1.0 / per_second),
            next_free: Mutex::new(Instant::now()),
        }
    }

    /// Waits until `count` more creations are allowed, reserving them.
    pub(crate) async fn acquire(&self, count: u32) {
        let start = {
            let mut next_free = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*next_free).max(Instant::now());
            *next_free = start + self.interval * count;
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reservations_are_spaced_by_the_interval() {
        let rate = CreateRate::new(10.0);
        let begin = Instant::now();
        rate.acquire(1).await;
        assert_eq!(begin.elapsed(), Duration::ZERO);
        rate.acquire(5).await;
        assert_eq!(begin.elapsed(), Duration::from_millis(100));
        rate.acquire(1).await;
        assert_eq!(begin.elapsed(), Duration::from_millis(600));
    }
}
