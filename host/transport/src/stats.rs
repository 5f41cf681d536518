//! What a transport's calls did, for metrics and reports.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sandfleet_core::ErrorKind;

/// Counters of one transport.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    failures: Mutex<BTreeMap<&'static str, u64>>,
}

/// A snapshot of a transport's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent (attempts, retries included).
    pub requests: u64,
    /// Attempts made again.
    pub retries: u64,
    /// Failed attempts, by [`ErrorKind::name`].
    pub failures: BTreeMap<&'static str, u64>,
}

impl Counters {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failure(&self, kind: ErrorKind) {
        *self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind.name())
            .or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}
