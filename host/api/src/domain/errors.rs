//! The errors the daemon answered last: a bounded record of the latest
//! [`CAPACITY`] requests that ended in an error status, for operators (the
//! live page, `GET /v1/errors`). Each names the route's template, never
//! the URL (which may carry a query token or a file path), and the
//! message the client was given.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

/// How many errors are kept; older ones are dropped.
pub(crate) const CAPACITY: usize = 50;

/// One request that ended in an error.
#[derive(Debug, Clone)]
pub(crate) struct ErrorRecord {
    /// When it was answered.
    pub(crate) at: SystemTime,
    /// The request's method.
    pub(crate) method: String,
    /// The route's template (`/v1/leases/{id}/exec`), or `unmatched`.
    pub(crate) route: String,
    /// The status answered.
    pub(crate) status: u16,
    /// The error's kind, as the body names it (`not_found`).
    pub(crate) kind: String,
    /// The message the client was given.
    pub(crate) message: String,
}

/// The latest errors, newest last.
#[derive(Debug, Default)]
pub(crate) struct RecentErrors {
    kept: Mutex<VecDeque<ErrorRecord>>,
}

impl RecentErrors {
    /// Keeps `record`, dropping the oldest past [`CAPACITY`].
    pub(crate) fn record(&self, record: ErrorRecord) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == CAPACITY {
            kept.pop_front();
        }
        kept.push_back(record);
    }

    /// The errors kept, newest first.
    pub(crate) fn latest(&self) -> Vec<ErrorRecord> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: u16) -> ErrorRecord {
        ErrorRecord {
            at: SystemTime::now(),
            method: "GET".into(),
            route: "/v1/leases/{id}".into(),
            status,
            kind: "not_found".into(),
            message: format!("number {status}"),
        }
    }

    #[test]
    fn only_the_latest_are_kept_newest_first() {
        let errors = RecentErrors::default();
        for status in 0..(CAPACITY as u16 + 7) {
            errors.record(record(status));
        }
        let latest = errors.latest();
        assert_eq!(latest.len(), CAPACITY);
        assert_eq!(latest[0].status, CAPACITY as u16 + 6);
        assert_eq!(latest[CAPACITY - 1].status, 7);
    }
}
