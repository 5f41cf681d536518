//! Retrying what is safe to repeat (registry GETs, a whole layer's fetch
//! and unpack) when it failed in a way that may pass: exponential backoff
//! with jitter, lengthened to a registry's `Retry-After`, bounded in count
//! and in each pause.

use std::future::Future;
use std::time::Duration;

use backon::BackoffBuilder as _;

use crate::error::Error;

/// The longest pause a `Retry-After` can impose; a registry asking for
/// more gets a failure instead of a hung pull.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How many times to try again and how long to pause.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts after the first (0: never retry).
    pub retries: usize,
    /// The first pause; it doubles, with jitter, up to `max_delay`.
    pub min_delay: Duration,
    /// The longest pause of the backoff (a `Retry-After` may ask for up
    /// to 60 s).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 4,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// Runs `attempt` until it succeeds, fails for good, or the retries
    /// are spent; `on_retry` hears of each failure that will be retried.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        mut attempt: F,
        mut on_retry: impl FnMut(&Error, Duration),
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut pauses = backon::ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.retries)
            .with_jitter()
            .build();
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_transient() => {
                    let Some(pause) = pauses.next() else {
                        return Err(error);
                    };
                    let pause = match error.retry_after() {
                        Some(asked) if asked > MAX_RETRY_AFTER => return Err(error),
                        Some(asked) => asked.max(pause),
                        None => pause,
                    };
                    on_retry(&error, pause);
                    tokio::time::sleep(pause).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn busy(retry_after: Option<Duration>) -> Error {
        Error::Http {
            reference: "r".to_string(),
            registry: "h".to_string(),
            what: "manifest".to_string(),
            status: 503,
            detail: String::new(),
            retry_after,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_up_to_the_bound_honouring_retry_after() {
        let policy = RetryPolicy {
            retries: 2,
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(20),
        };
        let calls = AtomicUsize::new(0);
        let mut pauses = Vec::new();
        let result: Result<(), Error> = policy
            .run(
                || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Err(busy(Some(Duration::from_secs(3)))) }
                },
                |_, pause| pauses.push(pause),
            )
            .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(pauses, [Duration::from_secs(3), Duration::from_secs(3)]);

        let calls = AtomicUsize::new(0);
        let result: Result<(), Error> = policy
            .run(
                || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        Err(Error::NotPulled {
                            reference: "r".to_string(),
                        })
                    }
                },
                |_, _| {},
            )
            .await;
        assert!(result.is_err());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a lasting failure is not retried"
        );

        let result: Result<(), Error> = policy
            .run(
                || async { Err(busy(Some(Duration::from_secs(3600)))) },
                |_, _| {},
            )
            .await;
        assert!(result.is_err(), "an hour's Retry-After fails at once");
    }
}
