//! `sandfleet serve CONFIG [--listen ADDR]`: the daemon, until SIGTERM or
//! SIGINT; a second signal exits at once (`sandfleet reap --run-id` then
//! removes what it left, and so does the next daemon with the same state
//! directory).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use sandfleet_api::{Daemon, Options};

/// Exit code when a second signal cut the shutdown short.
const INTERRUPTED: i32 = 130;

pub(crate) fn serve(config: &Path, listen: Option<SocketAddr>) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let daemon = Daemon::start(Options {
            config: config.to_path_buf(),
            listen,
        })
        .await?;
        println!(
            "sandfleet serve: run id {} (reap with `sandfleet reap --run-id {} {}`)\nlistening on http://{}",
            daemon.run_id(),
            daemon.run_id(),
            config.display(),
            daemon.addr()
        );
        println!("{}", daemon.ui_line());
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("stopping: finishing requests, then releasing every lease and pool (signal again to exit at once)");
        daemon.stop();
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            eprintln!("exiting without releasing; clean up with `sandfleet reap --run-id <id>`");
            std::process::exit(INTERRUPTED);
        });
        daemon.wait().await?;
        eprintln!("stopped; everything released");
        Ok(ExitCode::SUCCESS)
    })
}
