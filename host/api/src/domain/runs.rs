//! The batch runs this daemon started: each a fleet file the engine runs
//! as `sandfleet run` runs it, under its own run id and output directory
//! (`<state>/runs/<id>/`), its progress kept for whoever asks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sandfleet_engine::{CancellationToken, Progress, RunError, RunReport, TaskRecord, TaskStatus};

use super::Refusal;
use crate::model::RunView;

/// The batch runs this daemon started.
#[derive(Default)]
pub(crate) struct Runs {
    by_id: Mutex<BTreeMap<String, Arc<BatchRun>>>,
}

pub(crate) struct BatchRun {
    id: String,
    out_dir: PathBuf,
    cancel: CancellationToken,
    progress: Mutex<RunView>,
    running: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The engine's progress events, kept for the run's view.
struct Tracker(Arc<BatchRun>);

impl Progress for Tracker {
    fn started(&self, total: usize, _skipped: usize) {
        self.0.update(|view| view.total = total);
    }

    fn step(&self, message: &str) {
        self.0.update(|view| view.step = message.to_string());
    }

    fn finished(&self, record: &TaskRecord, done: usize, _total: usize) {
        self.0.update(|view| {
            view.done = done;
            match record.status {
                TaskStatus::Ok => view.ok += 1,
                TaskStatus::Failed => view.failed += 1,
                TaskStatus::InfraError => view.infra_error += 1,
            }
        });
    }

    fn done(&self) {}
}

impl BatchRun {
    /// A run of `total` items starting now, writing to `out_dir`.
    pub(crate) fn new(id: String, out_dir: PathBuf, total: usize) -> Arc<Self> {
        Arc::new(BatchRun {
            id: id.clone(),
            out_dir,
            cancel: CancellationToken::new(),
            progress: Mutex::new(RunView {
                id,
                state: "running".into(),
                total,
                done: 0,
                ok: 0,
                failed: 0,
                infra_error: 0,
                step: "starting".into(),
                error: None,
                report: None,
            }),
            running: Mutex::new(None),
        })
    }

    pub(crate) fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    /// The run's `report.html`, once it is there: a regular file directly
    /// in the run's output directory (never a link, never anywhere else).
    pub(crate) fn report_html(&self) -> Result<PathBuf, Refusal> {
        let missing = || Refusal::NoReport {
            id: self.id.clone(),
        };
        let path = self.out_dir.join(sandfleet_report::REPORT_HTML);
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_file());
        let inside = match (path.canonicalize(), self.out_dir.canonicalize()) {
            (Ok(file), Ok(dir)) => file.parent() == Some(dir.as_path()),
            _ => false,
        };
        if regular && inside {
            Ok(path)
        } else {
            Err(missing())
        }
    }

    /// What cancels the run, for the engine to watch.
    pub(crate) fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Where the engine reports its progress to.
    pub(crate) fn progress(self: &Arc<Self>) -> Arc<dyn Progress> {
        Arc::new(Tracker(self.clone()))
    }

    /// The task running the engine, which cancelling waits for.
    pub(crate) fn running(&self, task: tokio::task::JoinHandle<()>) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Records how the engine's run ended.
    pub(crate) fn ended(&self, outcome: Result<RunReport, RunError>) {
        // A run that failed or was cancelled still wrote its report.
        let report = match &outcome {
            Ok(report) => serde_json::to_value(report).ok(),
            Err(_) => std::fs::read(self.out_dir.join(sandfleet_engine::REPORT_FILE))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok()),
        };
        self.update(|view| {
            view.report = report;
            match outcome {
                Ok(_) => view.state = "finished".into(),
                Err(RunError::Interrupted) => view.state = "cancelled".into(),
                Err(error) => {
                    view.state = "failed".into();
                    view.error = Some(error.to_string());
                }
            }
        });
    }

    fn update(&self, change: impl FnOnce(&mut RunView)) {
        change(&mut self.progress.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn view(&self) -> RunView {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Cancels the run and waits for its teardown.
    pub(crate) async fn cancel(&self) {
        self.cancel.cancel();
        self.wait().await;
    }

    async fn wait(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(running) = running {
            let _ = running.await;
        }
    }
}

impl Runs {
    pub(crate) fn get(&self, id: &str) -> Result<Arc<BatchRun>, Refusal> {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Refusal::NoSuchRun { id: id.to_string() })
    }

    pub(crate) fn insert(&self, run: Arc<BatchRun>) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run.id.clone(), run);
    }

    /// Every run's view, without their reports.
    pub(crate) fn views(&self) -> Vec<RunView> {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|run| {
                let mut view = run.view();
                view.report = None;
                view
            })
            .collect()
    }

    /// Cancels every run and waits for their teardowns.
    pub(crate) async fn cancel_all(&self) {
        let runs: Vec<Arc<BatchRun>> = self
            .by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for run in &runs {
            run.cancel.cancel();
        }
        for run in runs {
            run.wait().await;
        }
    }
}

/// Where batch runs keep their output; a directory without a report is a
/// run a killed daemon left.
pub(crate) fn runs_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("runs")
}

impl std::fmt::Debug for BatchRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BatchRun({})", self.id)
    }
}
