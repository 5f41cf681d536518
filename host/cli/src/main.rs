//! The `sandfleet` command.

mod devcluster_cmd;
mod harness_cmd;
mod images_cmd;
mod inspect_cmd;
mod layer_bars;
mod plugin_cmd;
mod prepull_cmd;
mod progress_ui;
mod reap_cmd;
mod rehearse_cmd;
mod report_cmd;
mod run_cmd;
mod serve_cmd;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sandfleet_backend_local::subordinate::{self, Entered};

/// Run fleets of sandboxes for agent rollouts and evaluations.
#[derive(Parser)]
#[command(name = "sandfleet", version, about, after_help = ENVIRONMENT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const ENVIRONMENT: &str = "\
Environment:
  SANDFLEET_LOG                what reaches stderr, a tracing filter (default: warn)
  SANDFLEET_TRACE              what OTLP exports (default: info)
  OTEL_EXPORTER_OTLP_ENDPOINT  export spans over OTLP/HTTP to this endpoint
  SANDFLEET_SUBORDINATE_IDS    0 (or off): as an ordinary user, do not enter the
                               user's /etc/subuid range (every sandbox file then the user's)";

#[derive(Subcommand)]
enum Command {
    /// Run every task of a fleet file's dataset and grade it.
    Run {
        /// The fleet file.
        config: PathBuf,
        /// Output directory for results.jsonl, report.json, report.html, events.jsonl and logs/ (default:
        /// `[run] out`). Rerunning into the same directory resumes.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Use this run id instead of a generated one.
        #[arg(long)]
        run_id: Option<String>,
    },
    /// Print the warm pool plan (replicas per image, windows, peak) without
    /// creating anything.
    Plan {
        /// The fleet file.
        config: PathBuf,
    },
    /// Check the configured backends and show their capacity.
    Preflight {
        /// The fleet file.
        config: PathBuf,
    },
    /// Fetch the run's images ahead on every cluster that can: into the
    /// local backend's store, and onto every matching node of its
    /// Kubernetes clusters (a DaemonSet per image, deleted once every node
    /// has it), as `[fleet] prepull = true` does before a run.
    Prepull {
        /// The fleet file.
        config: PathBuf,
    },
    /// Remove everything a run left behind (sandboxes, pools, processes).
    Reap {
        /// The run to clean up.
        #[arg(long)]
        run_id: String,
        /// The fleet file the run used (default: the local backend's default
        /// state directory).
        config: Option<PathBuf>,
        /// The local backend's state directory, when not using a fleet file.
        #[arg(long, conflicts_with = "config")]
        state_dir: Option<PathBuf>,
    },
    /// Run one task twice in one sandbox, recycled in between, and report
    /// whether the outputs are byte-identical (exit 1 when they are not).
    Canary {
        /// The fleet file (needs `[plugins] reset`).
        config: PathBuf,
        /// The task to run.
        #[arg(long)]
        task: String,
        /// Where its logs go (default: a temporary directory).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write each instance's evaluation script and task description, with no
    /// sandboxes involved.
    Prepare(harness_cmd::PrepareArgs),
    /// Grade saved test logs the way the adapter's harness does.
    Grade(harness_cmd::GradeArgs),
    /// Print a log parser's status map for a raw log, as JSON.
    ParseLog(harness_cmd::ParseLogArgs),
    /// Inspect, test and list plugins.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Draw a run's report.html again from its output directory
    /// (events.jsonl), for a finished run or one that crashed: open it in
    /// any browser.
    Report {
        /// The run's output directory (its `--out`, or `[run] out`).
        out_dir: PathBuf,
    },
    /// Serve the HTTP API (leases, exec, grading, pools, batch runs) until
    /// SIGINT/SIGTERM; see /v1/openapi.json.
    Serve {
        /// The fleet file.
        config: PathBuf,
        /// Listen here instead of `[api] listen` (default 127.0.0.1:7878).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Pull, list, remove, prune and import OCI images in the local
    /// backend's layer store.
    Images(images_cmd::ImagesArgs),
    /// Run a seed workload at scale on up to four devclusters that behave
    /// like fleets (nodes, image caches, pull latency), through the real
    /// engine and Kubernetes driver; print a table and write rehearsal.json.
    /// Exits 1 when a result is lost, a command ran twice, an object is left,
    /// pods exceed the plan's bound or the wall time exceeds 1.2× the plan's
    /// estimate.
    Rehearse(rehearse_cmd::RehearseArgs),
    /// Run a wire-compatible emulator of a cluster backend on loopback, with
    /// fault injection, until SIGINT/SIGTERM.
    #[command(subcommand)]
    Devcluster(devcluster_cmd::DevclusterCommand),
}

fn main() -> ExitCode {
    // One TLS crypto provider (ring) for every client in the process: the
    // drivers' and the OTLP exporter's reqwest are built without one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    // Before any thread starts: the kernel moves only a single-threaded
    // process into a user namespace.
    let ids = cli.command.runs_sandboxes().then(subordinate::enter);
    let _telemetry = telemetry::init();
    match ids {
        Some(Err(error)) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
        Some(Ok(Entered::Unavailable(why))) => {
            tracing::warn!("sandboxes map only this user, every file their root's: {why}");
        }
        Some(Ok(entered)) => tracing::debug!(?entered, "subordinate ids"),
        None => {}
    }
    let result = match cli.command {
        Command::Run {
            config,
            out,
            run_id,
        } => run_cmd::run(&config, out, run_id),
        Command::Plan { config } => inspect_cmd::plan(&config),
        Command::Preflight { config } => inspect_cmd::preflight(&config),
        Command::Prepull { config } => prepull_cmd::prepull(&config),
        Command::Reap {
            run_id,
            config,
            state_dir,
        } => reap_cmd::reap(&run_id, config.as_deref(), state_dir),
        Command::Canary { config, task, out } => run_cmd::canary(&config, &task, out),
        Command::Prepare(args) => harness_cmd::prepare(&args),
        Command::Grade(args) => harness_cmd::grade(&args),
        Command::ParseLog(args) => harness_cmd::parse_log(&args),
        Command::Plugin(command) => plugin_cmd::run(command),
        Command::Devcluster(command) => devcluster_cmd::run(command),
        Command::Images(args) => images_cmd::run(args),
        Command::Serve { config, listen } => serve_cmd::serve(&config, listen),
        Command::Report { out_dir } => report_cmd::report(&out_dir),
        Command::Rehearse(args) => rehearse_cmd::rehearse(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", describe(&error));
            ExitCode::FAILURE
        }
    }
}

impl Command {
    /// Whether it may make sandboxes or touch the state directory's, whose
    /// files an ordinary user's sandboxes give to its subordinate ids.
    fn runs_sandboxes(&self) -> bool {
        match self {
            Command::Run { .. }
            | Command::Plan { .. }
            | Command::Preflight { .. }
            | Command::Prepull { .. }
            | Command::Reap { .. }
            | Command::Canary { .. }
            | Command::Devcluster(_)
            | Command::Images(_)
            | Command::Serve { .. }
            | Command::Rehearse(_) => true,
            Command::Prepare(_)
            | Command::Grade(_)
            | Command::ParseLog(_)
            | Command::Plugin(_)
            | Command::Report { .. } => false,
        }
    }
}

/// An error and its causes on one line, each cause said once: a cause
/// whose words the message already holds (errors that quote their source)
/// is left out.
fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_said_once() {
        let io = std::io::Error::other("permission denied");
        let quoting = anyhow::Error::new(io).context("creating /x: permission denied");
        assert_eq!(describe(&quoting), "creating /x: permission denied");
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("writing /y");
        assert_eq!(describe(&plain), "writing /y: disk full");
    }
}
