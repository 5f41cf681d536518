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
//! registry
//!     .add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
//!     .expect("built-ins load");
//! let policy = registry.placement("least-loaded")?;
//! let demand = Demand { kind: DemandKind::Claim, image: 0, count: 1, sequence: 0 };
//! let idle = ClusterState {
//!     healthy: true, has_image: false, free_slots: 8, live: 0, warm_ready: 0,
//!     weight: 1, cpu_free_milli: 4000, memory_free_mib: 8192,
//! };
//! let clusters = Clusters::from_states(&[idle]);
//! // From async code: the call runs on tokio's blocking pool.
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # runtime.block_on(async {
//! let cluster = policy.place(&demand, &clusters).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(()) })?;
//! // From a thread that is no async runtime's worker: on that thread.
//! let cluster = policy.place_blocking(&demand, &clusters)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Calls are short (microseconds; at most the deadline) and run wasm to
//! completion without yielding; a guest's stdout and stderr go through
//! WASI's blocking shims, which must not run on an async runtime's worker
//! thread. So every call of the typed wrappers comes in two forms: an async
//! one (`place`) that moves the call onto tokio's blocking pool, for async
//! code, and `place_blocking`, for plain threads. Every call runs in a
//! `plugin_call` span (debug level) with `plugin`, `version` and `function`
//! fields.

mod bindings;
mod cache;
mod calls;
mod contract;
mod deadline;
mod dynamic;
mod error;
mod function_cache;
mod host;
mod limits;
mod loaded;
mod registry;
mod store;
mod watch;
mod worlds;

pub use bindings::SUPPORTED_VERSIONS;
pub use cache::{CacheContents, CacheOutcome, cache_contents, clear_cache};
pub use calls::PluginCalls;
pub use contract::{Contract, Kind};
pub use deadline::WALL_CEILING_FACTOR;
pub use dynamic::{DynamicPlugin, FunctionType};
pub use error::{CallError, CallErrorKind, LoadError, LookupError, PluginRef, Source};
pub use function_cache::FunctionReuse;
pub use host::{Compiled, DEFAULT_CACHE_BUDGET, HostConfig, HostError, PluginHost, Tier};
pub use limits::{
    DEFAULT_DEADLINE, DEFAULT_MEMORY_CAP, INPUT_BYTES_PER_SECOND, KindLimits, Limits,
    MEMORY_PER_INPUT_BYTE, WASM32_MEMORY_MAX,
};
pub use loaded::VersionInfo;
pub use registry::{Builtin, LoadCounts, PluginStatus, Registry, Takeover};
pub use wasmtime::component::Val;
pub use wasmtime::component::types::Type;
pub use watch::{DEBOUNCE, PluginWatcher, WatchError};
pub use worlds::{adapter, placement, reset, sizing};
