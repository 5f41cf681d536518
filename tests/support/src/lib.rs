//! What sandfleet's engine and end-to-end tests share: probes of what runs
//! leave on this machine (`machine`), and a scripted in-memory backend with
//! injectable faults (`scripted`), for testing the engine's retries,
//! leases, breaker and release queue without processes, and the bundled
//! quickstart's expected outcome (`quickstart`).

mod machine;
pub mod quickstart;
mod scripted;

pub use machine::{processes_running, sandbox_dirs};
pub use scripted::{Op, Reply, Scripted};
