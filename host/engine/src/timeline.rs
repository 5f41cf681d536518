//! The run's timeline, for its picture (`report.html`): each step on a
//! sandbox, each task's end, retries and quarantines, and warm-pool
//! targets, appended to `events.jsonl` as they happen (see
//! [`sandfleet_report::events`]). A daemon session records none.
//!
//! The task a step is for is the one whose future it runs in: a worker
//! runs each task inside [`Timeline::for_task`], so the claim, reset and
//! commands the task awaits name it without being told.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use sandfleet_report::events::{
    ClusterEvent, Event, EventLog, EventsError, Mark, MarkKind, Segment, SegmentKind, TaskEnd,
    TaskKey,
};

use crate::plugins::PluginServed;
use crate::results::TaskRecord;

tokio::task_local! {
    static TASK: TaskKey;
}

/// Where a step ran: the names the picture shows.
pub(crate) struct On<'a> {
    pub(crate) cluster: &'a str,
    pub(crate) sandbox: &'a str,
    pub(crate) image: &'a str,
}

/// Appends a run's events; records nothing when off.
pub(crate) struct Timeline {
    log: Option<EventLog>,
    started: Instant,
    /// The same moment on the wall clock.
    started_at: SystemTime,
    /// A write failed: said once, then the picture goes without.
    failed: AtomicBool,
}

impl Timeline {
    /// A timeline that records nothing (a daemon session's).
    pub(crate) fn off() -> Self {
        Timeline {
            log: None,
            started: Instant::now(),
            started_at: SystemTime::now(),
            failed: AtomicBool::new(false),
        }
    }

    /// Starts the timeline of `run_id` in `dir/events.jsonl`, timed from
    /// `started`.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or written.
    pub(crate) fn open(
        dir: &Path,
        started: Instant,
        run_id: &str,
        clusters: Vec<ClusterEvent>,
        plugins: BTreeMap<String, String>,
    ) -> Result<Self, EventsError> {
        let log = EventLog::open(dir)?;
        let started_at = SystemTime::now() - started.elapsed();
        log.append(&Event::Run {
            run_id: run_id.to_string(),
            started_at: humantime::format_rfc3339_millis(started_at).to_string(),
            clusters,
            plugins,
        })?;
        Ok(Timeline {
            log: Some(log),
            started,
            started_at,
            failed: AtomicBool::new(false),
        })
    }

    /// Runs `task` as the work of `key`: the steps it awaits are its.
    pub(crate) async fn for_task<F: Future>(key: TaskKey, task: F) -> F::Output {
        TASK.scope(key, task).await
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    fn append(&self, event: impl FnOnce(&Self) -> Event) {
        let Some(log) = &self.log else { return };
        if let Err(error) = log.append(&event(self))
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(%error, "the run's timeline is incomplete; its report.html will be too");
        }
    }

    /// A step from `started` until now on `on`, for the task running it
    /// (if any).
    pub(crate) fn segment(&self, kind: SegmentKind, started: Instant, on: On<'_>, ok: bool) {
        self.append(|timeline| {
            Event::Segment(Segment {
                kind,
                at: timeline.ms(started),
                end: timeline.ms(Instant::now()),
                cluster: on.cluster.to_string(),
                sandbox: on.sandbox.to_string(),
                image: on.image.to_string(),
                task: TASK.try_with(TaskKey::clone).ok(),
                ok,
            })
        });
    }

    /// `kind` happened now on `on`, for the task running (if any).
    pub(crate) fn mark(&self, kind: MarkKind, on: Option<On<'_>>, detail: &str) {
        self.append(|timeline| {
            Event::Mark(Mark {
                kind,
                at: timeline.ms(Instant::now()),
                cluster: on.as_ref().map(|on| on.cluster.to_string()),
                sandbox: on.as_ref().map(|on| on.sandbox.to_string()),
                task: TASK.try_with(TaskKey::clone).ok(),
                detail: detail.to_string(),
            })
        });
    }

    /// The warm pool of `image` on `cluster` keeps `target` from now on.
    pub(crate) fn pool(&self, cluster: &str, image: &str, target: u32) {
        self.append(|timeline| Event::Pool {
            at: timeline.ms(Instant::now()),
            cluster: cluster.to_string(),
            image: image.to_string(),
            target,
        });
    }

    /// The warm pool of `image` on `cluster` has `ready` sandboxes now.
    pub(crate) fn pool_ready(&self, cluster: &str, image: &str, ready: u32) {
        self.append(|timeline| Event::PoolReady {
            at: timeline.ms(Instant::now()),
            cluster: cluster.to_string(),
            image: image.to_string(),
            ready,
        });
    }

    /// Whether anything is recorded.
    pub(crate) fn is_on(&self) -> bool {
        self.log.is_some()
    }

    /// `record` was just made; its log is `log` (relative to the output
    /// directory).
    pub(crate) fn task(&self, record: &TaskRecord, log: &Path) {
        self.append(|timeline| {
            let end = timeline.ms(Instant::now());
            let mut plugins = BTreeMap::new();
            plugins.insert(
                "adapter".to_string(),
                format!(
                    "{} {}",
                    record.plugins.adapter.name, record.plugins.adapter.version
                ),
            );
            if let Some(reset) = &record.plugins.reset {
                plugins.insert(
                    "reset".to_string(),
                    format!("{} {}", reset.name, reset.version),
                );
            }
            Event::Task(TaskEnd {
                task: TaskKey {
                    id: record.task_id.clone(),
                    epoch: record.epoch,
                    member: record.group.as_ref().map(|group| group.member),
                },
                image: record.image.clone(),
                cluster: record.cluster.clone(),
                sandbox: record.sandbox.clone(),
                status: record.status.name().to_string(),
                timed_out: record.timed_out,
                at: end.saturating_sub((record.timings.total_s * 1000.0) as u64),
                end,
                log: log.display().to_string(),
                error: record.error.clone(),
                detail: record.grade.as_ref().map(|grade| grade.detail.clone()),
                attempts: record.attempts.len().max(1) as u32,
                plugins,
            })
        });
    }

    /// The plugin versions that served the run, each from when it took
    /// over (the report's list).
    pub(crate) fn plugins(&self, served: &[PluginServed]) {
        for plugin in served {
            let at = humantime::parse_rfc3339(&plugin.took_over_at)
                .ok()
                .and_then(|at| at.duration_since(self.started_at).ok())
                .map_or(0, |since| since.as_millis() as u64);
            let role = match plugin.world.as_str() {
                "task-adapter" => "adapter",
                "placement-policy" => "placement",
                "sizing-policy" => "sizing",
                "reset-check" => "reset",
                other => other,
            };
            self.append(|_| Event::Plugin {
                at,
                role: role.to_string(),
                plugin: format!("{} {}", plugin.name, plugin.version),
                calls: plugin.calls,
                faults: plugin.faults,
            });
        }
    }

    /// The run ended (a crashed run never says so).
    pub(crate) fn end(&self) {
        self.append(|timeline| Event::End {
            at: timeline.ms(Instant::now()),
        });
    }
}
