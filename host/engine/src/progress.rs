//! How a run tells the operator what it is doing.

use sandfleet_core::PullEvent;

use crate::results::TaskRecord;

/// Hears one image pull's layer events; dropped when the pull ends.
pub type PullSink = Box<dyn Fn(PullEvent) + Send + Sync>;

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
    /// `cluster` starts pulling `image` before the run warms: the sink
    /// returned hears its layers' progress, and is dropped when the pull
    /// ends. The default shows nothing (the run's steps still say which
    /// image is pulled, and how it went).
    fn pull(&self, cluster: &str, image: &str) -> PullSink {
        let _ = (cluster, image);
        Box::new(|_| {})
    }
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
