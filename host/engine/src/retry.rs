//! Retrying what is safe to retry, within a budget per run.
//!
//! Only requests that are idempotent (templates, pool sizes, pool reads,
//! claims, renewals, releases) are retried, and only on errors that say the
//! request never took effect or may pass later ([`ErrorKind::is_retryable`]):
//! a connection that failed before sending, a conflict, throttling (after
//! the server's `Retry-After`), a backend that is unavailable for now.
//! Commands are never retried: one that may have started could run twice.
//! Every retry spends one unit of the run's budget and is counted by the
//! kind of error that caused it, for the report.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use sandfleet_core::{BackendError, ErrorKind};

/// The first pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Attempts of one request, the first included.
const MAX_ATTEMPTS: usize = 6;

/// A run's retries: what is left of its budget, and what was spent on what.
#[derive(Debug)]
pub(crate) struct Retries {
    left: AtomicU32,
    spent: Mutex<BTreeMap<&'static str, u64>>,
}

impl Retries {
    /// A budget of `budget` retries for the whole run.
    pub(crate) fn new(budget: u32) -> Self {
        Retries {
            left: AtomicU32::new(budget),
            spent: Mutex::new(BTreeMap::new()),
        }
    }

    /// Takes one retry from the budget; false when it is spent.
    fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }

    fn count(&self, kind: ErrorKind) {
        *self
            .spent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind.name())
            .or_default() += 1;
    }

    /// Retries spent so far, by the kind of error that caused them.
    pub(crate) fn spent(&self) -> BTreeMap<String, u64> {
        self.spent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(kind, count)| (kind.to_string(), *count))
            .collect()
    }

    /// Makes the idempotent request `request` until it succeeds, fails in a
    /// way retrying cannot help, runs out of attempts, or the budget is
    /// spent. A throttled request waits at least as long as the backend
    /// asked.
    pub(crate) async fn idempotent<T, Fut>(
        &self,
        what: &str,
        request: impl FnMut() -> Fut,
    ) -> Result<T, BackendError>
    where
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(FIRST_PAUSE)
            .with_max_delay(MAX_PAUSE)
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter();
        request
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|error: &BackendError| error.kind().is_retryable() && self.take())
            .adjust(
                |error: &BackendError, pause| match (error.retry_after(), pause) {
                    (Some(asked), Some(pause)) => Some(asked.max(pause)),
                    (Some(asked), None) => Some(asked),
                    (None, pause) => pause,
                },
            )
            .notify(|error: &BackendError, pause| {
                self.count(error.kind());
                tracing::info!(%error, ?pause, "retrying {what}");
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    use super::*;

    fn failing(kind: ErrorKind) -> BackendError {
        BackendError::new(kind, "c", "injected")
    }

    #[tokio::test]
    async fn retryable_errors_are_retried_and_counted() {
        let retries = Retries::new(10);
        let attempts = AtomicUsize::new(0);
        let result = retries
            .idempotent("claim", || async {
                match attempts.fetch_add(1, Ordering::Relaxed) {
                    0 => Err(failing(ErrorKind::Conflict)),
                    1 => Err(failing(ErrorKind::Transport { sent: false })),
                    _ => Ok(7),
                }
            })
            .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(attempts.load(Ordering::Relaxed), 3);
        let spent = retries.spent();
        assert_eq!((spent["conflict"], spent["transport_unsent"]), (1, 1));
    }

    #[tokio::test]
    async fn what_may_have_taken_effect_or_cannot_pass_is_not_retried() {
        for kind in [
            ErrorKind::Transport { sent: true },
            ErrorKind::Invalid,
            ErrorKind::NotFound,
            ErrorKind::SandboxLost,
        ] {
            let retries = Retries::new(10);
            let attempts = AtomicUsize::new(0);
            let result: Result<(), _> = retries
                .idempotent("warm", || async {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    Err(failing(kind))
                })
                .await;
            assert_eq!(result.unwrap_err().kind(), kind);
            assert_eq!(attempts.load(Ordering::Relaxed), 1, "{kind:?}");
        }
    }

    #[tokio::test]
    async fn throttling_waits_as_long_as_asked_and_the_budget_is_shared() {
        let retries = Retries::new(1);
        let started = Instant::now();
        let attempts = AtomicUsize::new(0);
        let throttled = || async {
            attempts.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(failing(ErrorKind::Throttled {
                retry_after: Some(Duration::from_millis(300)),
            }))
        };
        assert!(retries.idempotent("claim", throttled).await.is_err());
        // One retry, after the 300 ms the backend asked for; then the
        // budget is spent.
        assert_eq!(attempts.load(Ordering::Relaxed), 2);
        assert!(started.elapsed() >= Duration::from_millis(300));
        let again = AtomicUsize::new(0);
        let unavailable = || async {
            again.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(failing(ErrorKind::Unavailable))
        };
        assert!(retries.idempotent("warm", unavailable).await.is_err());
        assert_eq!(again.load(Ordering::Relaxed), 1);
    }
}
