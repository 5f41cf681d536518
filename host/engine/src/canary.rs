//! `canary`: runs one task twice in one sandbox, recycled in between through
//! the reset check, and tells whether the two runs produced the same bytes.
//! A recycled sandbox is only as good as its reset: outputs that differ mean
//! the first run left something behind that changed the second.

use std::sync::Arc;

use sandfleet_core::file_stem;
use sandfleet_plugin::adapter::CommandOutput;

use crate::error::RunError;
use crate::fleet::{Fleet, FleetSpec};
use crate::phases::PhaseTimes;
use crate::reap::reap;
use crate::recycle::{Held, Recycler};
use crate::release::ReleaseQueue;
use crate::retry::Retries;
use crate::run::RunSpec;
use crate::task::WorkItem;
use crate::{checks, commands};

/// What a canary found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CanaryReport {
    /// The task.
    pub task_id: String,
    /// The sandbox of the first run.
    pub first_sandbox: String,
    /// The sandbox of the second run: the same one, unless the reset check
    /// quarantined it.
    pub second_sandbox: String,
    /// True when both runs' evaluate commands produced the same exit codes,
    /// stdout and stderr, byte for byte.
    pub identical: bool,
    /// Where they differ, one line each.
    pub differences: Vec<String>,
}

/// Runs `item` twice in one recycled sandbox.
///
/// # Errors
///
/// When the spec has no reset check, preflight fails, or claiming, running
/// or preparing the task fails. Everything created is torn down either way.
pub async fn canary(spec: RunSpec, item: WorkItem) -> Result<CanaryReport, RunError> {
    let result = run_twice(&spec, &item).await;
    reap(&spec.clusters, &spec.run_id).await?;
    result
}

async fn run_twice(spec: &RunSpec, item: &WorkItem) -> Result<CanaryReport, RunError> {
    let Some(reset) = spec.plugins.reset.clone() else {
        return Err(RunError::Internal(
            "a canary needs a reset check ([plugins] reset)".into(),
        ));
    };
    checks::preflight(&spec.clusters, spec.progress.as_ref()).await?;
    checks::images_made(
        &spec.clusters,
        [(item.task.image.clone(), item.task.id.clone())],
    )?;
    let capacity = checks::capacity(&spec.clusters).await?;
    let mut settings = spec.settings.clone();
    settings.recycle = true;
    settings.max_reuses = settings.max_reuses.max(1);
    let phases = Arc::new(PhaseTimes::default());
    let retries = Arc::new(Retries::new(settings.retry_budget));
    let fleet = Arc::new(Fleet::new(
        FleetSpec {
            run_id: spec.run_id.clone(),
            clusters: spec.clusters.clone(),
            capacity,
            images: vec![item.task.image.clone()],
            settings,
            placement: spec.plugins.placement.clone(),
            timeline: std::sync::Arc::new(crate::timeline::Timeline::off()),
        },
        phases.clone(),
        retries.clone(),
    ));
    let releases = Arc::new(ReleaseQueue::start(
        fleet.clone(),
        phases.clone(),
        retries.clone(),
        1,
    ));
    let recycler = Recycler::new(fleet.clone(), releases.clone(), Some(reset));
    let logs = spec.out_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log = logs.join(format!("{}.log", file_stem(&item.task.id)));
    let script = spec
        .plugins
        .adapter
        .prepare(&item.task, item.solution.as_deref())
        .await?;

    let mut held: Option<Held> = None;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let sandbox = recycler.sandbox_for(0, &item.task, held.take()).await?;
        let current = held.insert(sandbox);
        current.served += 1;
        let claimed = current.claimed.clone();
        let outputs = commands::execute(&fleet, &claimed, &script, Some(&log))
            .await?
            .outputs;
        runs.push((claimed.handle.id, outputs));
    }
    if let Some(done) = held {
        recycler.release(done);
    }
    releases.drain().await;
    let (second_sandbox, second) = runs.pop().expect("two runs");
    let (first_sandbox, first) = runs.pop().expect("two runs");
    let differences = compare(&first, &second);
    Ok(CanaryReport {
        task_id: item.task.id.clone(),
        identical: differences.is_empty(),
        first_sandbox,
        second_sandbox,
        differences,
    })
}

/// Where two runs' outputs differ, command by command.
fn compare(first: &[CommandOutput], second: &[CommandOutput]) -> Vec<String> {
    let mut differences = Vec::new();
    for (index, (a, b)) in first.iter().zip(second).enumerate() {
        if a.exit_code != b.exit_code {
            differences.push(format!(
                "command {index}: exit code {} then {}",
                a.exit_code, b.exit_code
            ));
        }
        for (stream, x, y) in [
            ("stdout", &a.stdout, &b.stdout),
            ("stderr", &a.stderr, &b.stderr),
        ] {
            if let Some(at) = first_difference(x.as_bytes(), y.as_bytes()) {
                let line = x.as_bytes()[..at.min(x.len())]
                    .iter()
                    .filter(|&&c| c == b'\n')
                    .count()
                    + 1;
                differences.push(format!(
                    "command {index}: {stream} differs from byte {at} (line {line}; {} then {} bytes)",
                    x.len(),
                    y.len()
                ));
            }
        }
    }
    if first.len() != second.len() {
        differences.push(format!("{} commands then {}", first.len(), second.len()));
    }
    differences
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(exit_code: i32, stdout: &str) -> CommandOutput {
        CommandOutput {
            exit_code,
            stdout: stdout.to_string(),
            stderr: String::new(),
            timed_out: false,
            duration_ms: 5,
        }
    }

    #[test]
    fn identical_outputs_ignore_durations() {
        let mut slower = output(0, "ok\n");
        slower.duration_ms = 500;
        assert!(compare(&[output(0, "ok\n")], &[slower]).is_empty());
    }

    #[test]
    fn differences_name_the_command_the_stream_and_the_place() {
        let found = compare(
            &[output(0, "same\n"), output(0, "a\nb\n")],
            &[output(0, "same\n"), output(1, "a\nc\n")],
        );
        assert_eq!(
            found,
            [
                "command 1: exit code 0 then 1",
                "command 1: stdout differs from byte 2 (line 2; 4 then 4 bytes)",
            ]
        );
        assert_eq!(first_difference(b"abc", b"ab"), Some(2));
        assert_eq!(first_difference(b"abc", b"abc"), None);
    }
}
