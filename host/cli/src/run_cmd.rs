//! `sandfleet run CONFIG`: a batch run on the configured fleet.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use sandfleet_core::RunId;
use sandfleet_engine::{CancellationToken, RunError, RunSpec};

use crate::progress_ui;
use sandfleet_fleet::FleetConfig;
use sandfleet_fleet::setup;

/// Exit code when a signal stopped the run.
const INTERRUPTED: u8 = 130;

pub(crate) fn run(
    config_path: &Path,
    out: Option<PathBuf>,
    run_id: Option<String>,
) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    let plugins = setup::plugins(&config)?;
    let dataset = setup::dataset(&config, &plugins.adapter)?;
    let clusters = setup::clusters(&config)?;
    setup::check_images(&config, &clusters, &dataset.tasks)?;
    let solutions = setup::solutions(config.run.solutions.as_deref())?;
    let items = setup::work_items(&config, &dataset, &solutions);
    let out_dir = out
        .or_else(|| config.run.out.clone())
        .context("no output directory: pass --out DIR or set [run] out")?;
    let run_id = match run_id {
        Some(id) => RunId::new(id).map_err(anyhow::Error::msg)?,
        None => RunId::generate(&config.run.name),
    };
    eprintln!(
        "run {run_id}: {} task(s) → {}",
        items.len(),
        out_dir.display()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cancel = CancellationToken::new();
    let spec = spec(
        config,
        plugins,
        run_id,
        clusters,
        out_dir.clone(),
        cancel.clone(),
    );
    let outcome = runtime.block_on(async {
        tokio::spawn(stop_on_signals(cancel));
        sandfleet_engine::run(spec, items).await
    });
    match outcome {
        Ok(report) => {
            print!("{}", report.render());
            println!(
                "results: {}",
                out_dir.join(sandfleet_engine::RESULTS_FILE).display()
            );
            println!(
                "report:  {}",
                out_dir.join(sandfleet_engine::REPORT_FILE).display()
            );
            let picture = out_dir.join(sandfleet_report::REPORT_HTML);
            if picture.exists() {
                println!("picture: {} (open it in a browser)", picture.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(RunError::Interrupted) => {
            eprintln!("error: {}", RunError::Interrupted);
            Ok(ExitCode::from(INTERRUPTED))
        }
        Err(e) => Err(e.into()),
    }
}

/// The engine's view of a loaded fleet file.
fn spec(
    config: FleetConfig,
    plugins: sandfleet_engine::Plugins,
    run_id: RunId,
    clusters: Vec<sandfleet_engine::Cluster>,
    out_dir: PathBuf,
    cancel: CancellationToken,
) -> RunSpec {
    RunSpec {
        run_id,
        settings: config.fleet,
        clusters,
        plugins,
        out_dir,
        cancel,
        progress: progress_ui::for_stderr(),
    }
}

/// The first SIGINT or SIGTERM cancels the run, which then tears down; a
/// second exits at once, leaving state `sandfleet reap` can find.
pub(crate) async fn stop_on_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot listen for signals; Ctrl-C will not tear down");
        return;
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("stopping: tearing everything down (signal again to exit at once)");
    cancel.cancel();
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("exiting without teardown; clean up with `sandfleet reap --run-id <id>`");
    std::process::exit(i32::from(INTERRUPTED));
}

/// `sandfleet canary CONFIG --task ID`: the task twice in one recycled sandbox.
pub(crate) fn canary(
    config_path: &Path,
    task_id: &str,
    out: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let config = FleetConfig::load(config_path)?;
    let plugins = setup::plugins(&config)?;
    if plugins.reset.is_none() {
        anyhow::bail!(
            "{}: a canary needs a reset check: set [plugins] reset (for example \"git-restore\")",
            config_path.display()
        );
    }
    let tasks = setup::tasks(&config, &plugins.adapter)?;
    let task = tasks
        .into_iter()
        .find(|t| t.id == task_id)
        .with_context(|| format!("{}: no task `{task_id}`", config.run.dataset.display()))?;
    let clusters = setup::clusters(&config)?;
    setup::check_images(&config, &clusters, std::slice::from_ref(&task))?;
    let solutions = setup::solutions(config.run.solutions.as_deref())?;
    let item = sandfleet_engine::WorkItem {
        solution: solutions.get(&task.id).cloned().flatten(),
        task,
        epoch: 0,
        member: None,
    };
    let run_id = RunId::generate("canary");
    let out_dir = match out {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("sandfleet-{run_id}")),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let spec = spec(
        config,
        plugins,
        run_id,
        clusters,
        out_dir,
        CancellationToken::new(),
    );
    let report = runtime.block_on(sandfleet_engine::canary(spec, item))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if report.first_sandbox != report.second_sandbox {
        eprintln!(
            "the reset check quarantined the sandbox after the first run; the second ran in a fresh one"
        );
    }
    Ok(if report.identical {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
