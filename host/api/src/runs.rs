//! Batch runs inside the daemon: a fleet file run by the engine as
//! `sandfleet run` runs it, with its own run id and output directory
//! (`<state>/runs/<id>/`), observed and cancelled over the API.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandfleet_core::RunId;
use sandfleet_engine::{CancellationToken, Progress, RunSpec, TaskRecord, TaskStatus};
use sandfleet_fleet::{FleetConfig, setup};

use crate::error::{AppError, ErrorBody, Json};
use crate::model::{RunList, RunRequest, RunView};
use crate::state::AppState;

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

/// The engine's progress events, kept for `GET /v1/runs/{id}`.
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
    fn update(&self, change: impl FnOnce(&mut RunView)) {
        change(&mut self.progress.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn view(&self) -> RunView {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Runs {
    fn get(&self, id: &str) -> Result<Arc<BatchRun>, AppError> {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| AppError::not_found(format!("no batch run `{id}`")))
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

impl BatchRun {
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

/// Where batch runs keep their output; a directory without a report is a
/// run a killed daemon left.
pub(crate) fn runs_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("runs")
}

/// Loads a fleet file and everything it builds, off the async runtime
/// (adapters load rows with blocking plugin calls).
fn load(
    config: FleetConfig,
    state: &AppState,
) -> anyhow::Result<(
    FleetConfig,
    sandfleet_engine::Plugins,
    Vec<sandfleet_engine::Cluster>,
    Vec<sandfleet_engine::WorkItem>,
)> {
    let plugins = setup::plugins(&config)?;
    let tasks = setup::tasks(&config, &plugins.adapter)?;
    let clusters = setup::clusters_with(&config, &state.connections)?;
    setup::check_images(&config, &clusters, &tasks)?;
    let solutions = setup::solutions(config.run.solutions.as_deref())?;
    let items = setup::work_items(&config, tasks, &solutions);
    Ok((config, plugins, clusters, items))
}

#[utoipa::path(post, path = "/v1/runs", request_body = RunRequest,
    responses((status = 202, body = RunView), (status = 422, body = ErrorBody)))]
pub(crate) async fn start(
    State(state): State<AppState>,
    Json(body): Json<RunRequest>,
) -> Result<(StatusCode, axum::Json<RunView>), AppError> {
    state.check_accepting()?;
    let config = match (&body.path, &body.config) {
        (Some(path), None) => FleetConfig::load(Path::new(path)),
        (None, Some(text)) => {
            let base = body.base_dir.as_deref().map_or_else(
                || {
                    state
                        .config
                        .path
                        .parent()
                        .unwrap_or(Path::new("."))
                        .to_path_buf()
                },
                PathBuf::from,
            );
            FleetConfig::parse(text, &base.join("submitted.toml"))
        }
        _ => {
            return Err(AppError::invalid(
                "give `path` (a fleet file) or `config` (its text), one of them",
            ));
        }
    }
    .map_err(|e| AppError::invalid(e.to_string()))?;
    let run_id = match &body.run_id {
        Some(id) => {
            RunId::new(id.clone()).map_err(|e| AppError::invalid(format!("run_id: {e}")))?
        }
        None => RunId::generate(&config.run.name),
    };
    let id = run_id.to_string();
    if state.runs.get(&id).is_ok() {
        return Err(AppError::conflict(format!("batch run `{id}` exists")));
    }
    let loader = state.clone();
    let (config, plugins, clusters, items) =
        tokio::task::spawn_blocking(move || load(config, &loader))
            .await
            .map_err(|e| AppError::internal(e.to_string()))?
            .map_err(|e| AppError::invalid(format!("{e:#}")))?;
    let out_dir = runs_dir(&state.state_dir).join(&id);
    let run = Arc::new(BatchRun {
        id: id.clone(),
        out_dir: out_dir.clone(),
        cancel: CancellationToken::new(),
        progress: Mutex::new(RunView {
            id: id.clone(),
            state: "running".into(),
            total: items.len(),
            done: 0,
            ok: 0,
            failed: 0,
            infra_error: 0,
            step: "starting".into(),
            error: None,
            report: None,
        }),
        running: Mutex::new(None),
    });
    let spec = RunSpec {
        run_id,
        settings: config.fleet,
        clusters,
        plugins,
        out_dir,
        cancel: run.cancel.clone(),
        progress: Arc::new(Tracker(run.clone())),
    };
    let watched = run.clone();
    let running = tokio::spawn(async move {
        let outcome = sandfleet_engine::run(spec, items).await;
        // A run that failed or was cancelled still wrote its report.
        let report = match &outcome {
            Ok(report) => serde_json::to_value(report).ok(),
            Err(_) => std::fs::read(watched.out_dir.join(sandfleet_engine::REPORT_FILE))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok()),
        };
        watched.update(|view| {
            view.report = report;
            match outcome {
                Ok(_) => view.state = "finished".into(),
                Err(sandfleet_engine::RunError::Interrupted) => view.state = "cancelled".into(),
                Err(error) => {
                    view.state = "failed".into();
                    view.error = Some(error.to_string());
                }
            }
        });
    });
    *run.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
    state
        .runs
        .by_id
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, run.clone());
    Ok((StatusCode::ACCEPTED, axum::Json(run.view())))
}

#[utoipa::path(get, path = "/v1/runs", responses((status = 200, body = RunList)))]
pub(crate) async fn list(State(state): State<AppState>) -> axum::Json<RunList> {
    let runs = state
        .runs
        .by_id
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|run| {
            let mut view = run.view();
            view.report = None;
            view
        })
        .collect();
    axum::Json(RunList { runs })
}

#[utoipa::path(get, path = "/v1/runs/{id}", responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<axum::Json<RunView>, AppError> {
    Ok(axum::Json(state.runs.get(&id)?.view()))
}

#[utoipa::path(get, path = "/v1/runs/{id}/results",
    responses((status = 200, content_type = "application/x-ndjson", body = String, description = "results.jsonl as written so far"), (status = 404, body = ErrorBody)))]
pub(crate) async fn results(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, AppError> {
    let run = state.runs.get(&id)?;
    let text = tokio::fs::read(run.out_dir.join(sandfleet_engine::RESULTS_FILE))
        .await
        .unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response())
}

#[utoipa::path(delete, path = "/v1/runs/{id}", responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<axum::Json<RunView>, AppError> {
    let run = state.runs.get(&id)?;
    run.cancel.cancel();
    run.wait().await;
    Ok(axum::Json(run.view()))
}

impl std::fmt::Debug for BatchRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BatchRun({})", self.id)
    }
}
