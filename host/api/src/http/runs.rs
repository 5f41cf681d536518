//! The batch-run endpoints: a fleet file submitted, loaded and handed to
//! the engine, observed and cancelled.

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandfleet_core::RunId;
use sandfleet_engine::RunSpec;
use sandfleet_fleet::{FleetConfig, setup};

use super::Answer;
use crate::domain::runs::{BatchRun, runs_dir};
use crate::error::{AppError, ErrorBody, Json};
use crate::model::{RunList, RunRequest, RunView};
use crate::state::AppState;

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
    let dataset = setup::dataset(&config, &plugins.adapter)?;
    let clusters = setup::clusters_with(&config, &state.connections)?;
    setup::check_images(&config, &clusters, &dataset.tasks)?;
    let solutions = setup::solutions(config.run.solutions.as_deref())?;
    let items = setup::work_items(&config, &dataset, &solutions);
    Ok((config, plugins, clusters, items))
}

#[utoipa::path(post, tag = "crate::runs", path = "/v1/runs", request_body = RunRequest,
    responses((status = 202, body = RunView), (status = 422, body = ErrorBody)))]
pub(crate) async fn start(
    State(state): State<AppState>,
    Json(body): Json<RunRequest>,
) -> Answer<(StatusCode, axum::Json<RunView>)> {
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
    let run = BatchRun::new(
        id.clone(),
        runs_dir(&state.state_dir).join(&id),
        items.len(),
    );
    let spec = RunSpec {
        run_id,
        settings: config.fleet,
        clusters,
        plugins,
        out_dir: run.out_dir().to_path_buf(),
        cancel: run.cancellation(),
        progress: run.progress(),
    };
    let watched = run.clone();
    run.running(tokio::spawn(async move {
        watched.ended(sandfleet_engine::run(spec, items).await);
    }));
    state.runs.insert(run.clone());
    Ok((StatusCode::ACCEPTED, axum::Json(run.view())))
}

#[utoipa::path(get, tag = "crate::runs", path = "/v1/runs", responses((status = 200, body = RunList)))]
pub(crate) async fn list(State(state): State<AppState>) -> Answer<axum::Json<RunList>> {
    Ok(axum::Json(RunList {
        runs: state.runs.views(),
    }))
}

#[utoipa::path(get, tag = "crate::runs", path = "/v1/runs/{id}", responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Answer<axum::Json<RunView>> {
    Ok(axum::Json(state.runs.get(&id)?.view()))
}

#[utoipa::path(get, tag = "crate::runs", path = "/v1/runs/{id}/results",
    responses((status = 200, content_type = "application/x-ndjson", body = String, description = "results.jsonl as written so far"), (status = 404, body = ErrorBody)))]
pub(crate) async fn results(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Answer<Response> {
    let run = state.runs.get(&id)?;
    let text = tokio::fs::read(run.out_dir().join(sandfleet_engine::RESULTS_FILE))
        .await
        .unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text).into_response())
}

/// What a run's report may do: draw itself from what it carries inline;
/// it fetches nothing.
const REPORT_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

#[utoipa::path(get, tag = "crate::runs", path = "/v1/runs/{id}/report.html",
    params(("token" = Option<String>, Query, description = "the bearer token, for a browser following a link (accepted here and on /ui only)")),
    responses((status = 200, content_type = "text/html", body = String, description = "the run's report.html, once written"), (status = 404, body = ErrorBody)))]
pub(crate) async fn report_html(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Answer<Response> {
    let path = state.runs.get(&id)?.report_html()?;
    let page = tokio::fs::read(&path)
        .await
        .map_err(|_| crate::domain::Refusal::NoReport { id })?;
    Ok(super::ops::html(page, REPORT_POLICY))
}

#[utoipa::path(delete, tag = "crate::runs", path = "/v1/runs/{id}", responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Answer<axum::Json<RunView>> {
    let run = state.runs.get(&id)?;
    run.cancel().await;
    Ok(axum::Json(run.view()))
}
