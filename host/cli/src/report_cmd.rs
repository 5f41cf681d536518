//! `sandfleet report OUT_DIR`: draws a run's `report.html` again from its
//! `events.jsonl`, for a run that crashed before drawing it, or after the
//! page itself changed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

pub(crate) fn report(out_dir: &Path) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        out_dir.is_dir(),
        "{}: no such output directory",
        out_dir.display()
    );
    let written = sandfleet_report::write(out_dir)
        .with_context(|| format!("drawing the picture of the run in {}", out_dir.display()))?;
    println!(
        "wrote {}: {} tasks, {} steps",
        written.path.display(),
        written.tasks,
        written.segments
    );
    if !written.finished {
        println!("the run did not finish: the picture ends at its last recorded event");
    }
    Ok(ExitCode::SUCCESS)
}
