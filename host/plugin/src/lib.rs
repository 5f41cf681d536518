//! sandfleet's plugin host.
//!
//! Placement and sizing policies, reset checks and task adapters are
//! WebAssembly components implementing a world of the WIT contract in
//! `wit/`. This crate compiles them (through an on-disk cache), checks which
//! world and contract version they implement, runs every call under a memory
//! cap, a deadline and optional fuel, and swaps new versions in atomically
//! when their files change.
//!
//! ```no_run
//! use sandfleet_plugin::{HostConfig, PluginHost, Registry};
//! use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind};
//!
//! let registry = Registry::new(PluginHost::new(HostConfig::default())?);
//! registry.add_builtins(sandfleet_guests::BUILTINS).expect("built-ins load");
//! let policy = registry.placement("least-loaded")?;
//! let demand = Demand { kind: DemandKind::Claim, image: 0, count: 1, sequence: 0 };
//! let idle = ClusterState {
//!     healthy: true, has_image: false, free_slots: 8, live: 0, warm_ready: 0,
//!     weight: 1, cpu_free_milli: 4000, memory_free_mib: 8192,
//! };
//! let cluster = policy.place(&demand, &Clusters::from_states(&[idle]))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Calls are synchronous and short (microseconds; at most the deadline).
//! WASI's blocking shims must not run on an async runtime's worker thread, so
//! async code calls plugins through `spawn_blocking` or a thread of its own.

mod bindings;
mod cache;
mod contract;
mod dynamic;
mod error;
mod host;
mod limits;
mod loaded;
mod registry;
mod store;
mod watch;
mod worlds;

pub use bindings::SUPPORTED_VERSIONS;
pub use cache::CacheOutcome;
pub use contract::{Contract, Kind};
pub use dynamic::{DynamicPlugin, FunctionType};
pub use error::{CallError, CallErrorKind, LoadError, LookupError, PluginRef, Source};
pub use host::{Compiled, HostConfig, HostError, PluginHost, Tier};
pub use limits::{DEFAULT_DEADLINE, DEFAULT_MEMORY_CAP, KindLimits, Limits};
pub use loaded::VersionInfo;
pub use registry::{LoadCounts, PluginStatus, Registry};
pub use wasmtime::component::Val;
pub use wasmtime::component::types::Type;
pub use watch::{DEBOUNCE, PluginWatcher, WatchError};
pub use worlds::{adapter, placement, reset, sizing};
