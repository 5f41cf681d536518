//! `sandfleet rehearse`: a seed workload at scale on devclusters that behave
//! like fleets, through the real engine and Kubernetes driver.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use sandfleet_engine::{LogProgress, Progress};
use sandfleet_rehearsal::{Options, REHEARSAL_FILE, Workload};

use crate::progress_ui;

/// Arguments of `sandfleet rehearse`.
#[derive(clap::Args)]
pub(crate) struct RehearseArgs {
    /// The workload: `eval-500` (500 images × 2 tasks, every warm
    /// strategy), `rl-50x40` (50 problems × 40 rollouts, fresh and
    /// recycled) or `mixed-10k` (10,000 tasks over 200 skewed images,
    /// image-affinity and capacity-weighted placement).
    #[arg(long)]
    workload: Workload,
    /// Its size against the published one (0.1: a tenth of the images or
    /// problems or tasks).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Where the variants' fleet files, kubeconfigs, runs and
    /// rehearsal.json go.
    #[arg(long, default_value = "out/rehearsal")]
    out: PathBuf,
    /// Devclusters to run on, largest first (8, 4, 2 and 1 nodes).
    #[arg(long, default_value_t = 4)]
    clusters: usize,
    /// Only this variant (a strategy for eval-500, `fresh` or `recycled`
    /// for rl-50x40, a placement for mixed-10k).
    #[arg(long)]
    variant: Option<String>,
    /// The placement policy of every variant, in place of the workload's
    /// own (eval-500 and rl-50x40 use image-affinity, which keeps a
    /// claim where its pool is and so packs the largest cluster).
    #[arg(long)]
    placement: Option<String>,
    /// What each task's test takes (a sleep).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    task_time: Duration,
}

pub(crate) fn rehearse(args: RehearseArgs) -> anyhow::Result<ExitCode> {
    let options = Options {
        workload: args.workload,
        scale: args.scale,
        out: args.out.clone(),
        clusters: args.clusters,
        variant: args.variant,
        placement: args.placement,
        task_time: args.task_time,
        progress: Box::new(|| -> Arc<dyn Progress> {
            if std::io::stderr().is_terminal() {
                progress_ui::for_stderr()
            } else {
                Arc::new(LogProgress)
            }
        }),
    };
    let rehearsal = sandfleet_rehearsal::rehearse(&options)?;
    print!("{}", rehearsal.render());
    println!("rehearsal: {}", args.out.join(REHEARSAL_FILE).display());
    Ok(if rehearsal.held() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
