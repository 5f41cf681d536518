//! Releasing sandboxes off the critical path: a task's result is recorded
//! first, then its sandbox goes to this queue, where a few workers release
//! sandboxes with retries. Teardown drains the queue; whatever still fails
//! is left to the run's reap, which teardown runs next. A release that
//! fails never changes a recorded result.
//!
//! The queue holds at most `backlog` sandboxes: a worker waits for room
//! before it claims another ([`ReleaseQueue::room`]), so a slow backend
//! slows the run instead of piling up live sandboxes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use sandfleet_report::events::SegmentKind;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::fleet::{Claimed, Fleet};
use crate::phases::{Phase, PhaseTimes};
use crate::retry::Retries;

/// Releases at once at most.
const WORKERS: usize = 8;

/// Counts for the report.
#[derive(Debug, Default)]
pub(crate) struct Released {
    pub(crate) released: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// The queue of sandboxes to release.
pub(crate) struct ReleaseQueue {
    jobs: std::sync::Mutex<Option<mpsc::UnboundedSender<Claimed>>>,
    workers: TaskTracker,
    pub(crate) counts: Arc<Released>,
    backlog: Arc<Backlog>,
}

/// Sandboxes queued or being released, and a wake-up when one is done.
struct Backlog {
    pending: AtomicUsize,
    limit: usize,
    shrunk: Notify,
}

impl ReleaseQueue {
    /// Starts the workers; at most `backlog` sandboxes wait at once.
    pub(crate) fn start(
        fleet: Arc<Fleet>,
        phases: Arc<PhaseTimes>,
        retries: Arc<Retries>,
        backlog: usize,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel::<Claimed>();
        let receiver = Arc::new(Mutex::new(receiver));
        let counts = Arc::new(Released::default());
        let backlog = Arc::new(Backlog {
            pending: AtomicUsize::new(0),
            limit: backlog.max(1),
            shrunk: Notify::new(),
        });
        let workers = TaskTracker::new();
        // Each release is a span of the run that started the queue.
        let run = tracing::Span::current();
        for _ in 0..WORKERS {
            let (run, receiver, fleet, phases, retries, counts, backlog) = (
                run.clone(),
                receiver.clone(),
                fleet.clone(),
                phases.clone(),
                retries.clone(),
                counts.clone(),
                backlog.clone(),
            );
            workers.spawn(async move {
                loop {
                    let Some(claimed) = receiver.lock().await.recv().await else {
                        return;
                    };
                    let started = Instant::now();
                    let span = tracing::info_span!(
                        parent: &run,
                        "release",
                        cluster = %claimed.handle.cluster,
                        sandbox = %claimed.handle.id,
                    );
                    async {
                        let released = retries
                            .idempotent("release", || fleet.release_on_backend(&claimed))
                            .await;
                        fleet.forget_claim(&claimed).await;
                        fleet.timeline.segment(
                            SegmentKind::Release,
                            started,
                            fleet.on(&claimed),
                            released.is_ok(),
                        );
                        match released {
                            Ok(()) => counts.released.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                // The run's reap at teardown removes it.
                                tracing::warn!(%error, "release failed");
                                counts.failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                    .instrument(span)
                    .await;
                    phases.record(Phase::Release, started.elapsed());
                    backlog.pending.fetch_sub(1, Ordering::AcqRel);
                    backlog.shrunk.notify_waiters();
                }
            });
        }
        workers.close();
        ReleaseQueue {
            jobs: std::sync::Mutex::new(Some(sender)),
            workers,
            counts,
            backlog,
        }
    }

    /// Waits until the queue has room for another sandbox.
    pub(crate) async fn room(&self) {
        loop {
            let shrunk = self.backlog.shrunk.notified();
            if self.backlog.pending.load(Ordering::Acquire) < self.backlog.limit {
                return;
            }
            shrunk.await;
        }
    }

    /// Queues `claimed` for release; returns at once.
    pub(crate) fn submit(&self, claimed: Claimed) {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        self.backlog.pending.fetch_add(1, Ordering::AcqRel);
        match jobs.as_ref() {
            Some(sender) if sender.send(claimed.clone()).is_ok() => {}
            // After the drain: the run's reap, which comes next, removes it.
            _ => {
                self.backlog.pending.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!(sandbox = %claimed.handle.id, "released after the queue was drained");
            }
        }
    }

    /// Waits until every queued release is done.
    pub(crate) async fn drain(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.workers.wait().await;
    }
}
