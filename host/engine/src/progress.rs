//! How a run tells the operator what it is doing.

use crate::results::TaskRecord;

/// Receives progress events; the CLI draws a bar on a terminal and prints
/// plain lines otherwise.
pub trait Progress: Send + Sync {
    /// Work is about to start: `total` tasks to run, `skipped` already
    /// finished by an earlier run.
    fn started(&self, total: usize, skipped: usize);
    /// A step of the run's own (warming a window, tearing down).
    fn step(&self, message: &str);
    /// A task finished; `done` of `total` are finished now.
    fn finished(&self, record: &TaskRecord, done: usize, total: usize);
    /// The run is over.
    fn done(&self);
}

/// Progress as `tracing` events.
#[derive(Debug, Default)]
pub struct LogProgress;

impl Progress for LogProgress {
    fn started(&self, total: usize, skipped: usize) {
        tracing::info!("running {total} tasks ({skipped} already finished)");
    }

    fn step(&self, message: &str) {
        tracing::info!("{message}");
    }

    fn finished(&self, record: &TaskRecord, done: usize, total: usize) {
        tracing::info!(
            "[{done}/{total}] {} {:?} ({:.1}s)",
            record.task_id,
            record.status,
            record.timings.total_s
        );
    }

    fn done(&self) {}
}
