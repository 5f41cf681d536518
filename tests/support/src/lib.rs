//! What sandfleet's engine and end-to-end tests share: probes of what runs
//! leave on this machine (`machine`), and a scripted in-memory backend with
//! injectable faults (`scripted`), for testing the engine's retries,
//! leases, breaker and release queue without processes, and the bundled
//! quickstart's expected outcome (`quickstart`), a one-file SWE-bench
//! repository for grading tests (`calc`), new versions of a component
//! (`salted`) and plugin files put in place (`install_plugin`), and the
//! snapshot contract's checks, run on every backend with snapshots
//! (`snapshots`), and headless Chromium for pages drawn by their own
//! scripts (`chromium`).

pub mod calc;
pub mod chromium;
mod components;
mod machine;
pub mod quickstart;
mod scripted;
pub mod snapshots;

pub use components::{install_plugin, salted};
pub use machine::{processes_running, sandbox_dirs};
pub use scripted::{Op, Reply, Scripted};
