//! Write [sandfleet](https://github.com/sandfleet/sandfleet) plugins in Rust.
//!
//! A sandfleet plugin is a WebAssembly component implementing one world of
//! the WIT contract `sandfleet:plugin`: a placement policy, a sizing policy,
//! a reset check or a task adapter. This crate is everything such a crate
//! needs:
//!
//! - the contract's WIT, every supported version, embedded ([`wit`]), so
//!   nothing is copied from a checkout;
//! - the types and traits `wit-bindgen` generates for each world, newest
//!   version at the top level ([`placement`], [`sizing`], [`reset`],
//!   [`adapter`], [`types`], [`host`]) and each version in its own module
//!   ([`v0_2_0`], [`v0_1_0`]);
//! - helpers: the cluster table as rows ([`placement::ClusterRow`],
//!   [`Clusters::rows`](placement::Clusters::rows),
//!   [`candidates`](placement::Clusters::candidates)) and failures
//!   ([`Failure::invalid_input`] and friends);
//! - one export macro per world ([`placement_policy!`], [`sizing_policy!`],
//!   [`reset_check!`], [`task_adapter!`]).
//!
//! ```no_run
//! use sandfleet_plugin_sdk::placement::{Clusters, Demand, PlacementPolicy};
//! use sandfleet_plugin_sdk::Failure;
//!
//! struct MostFree;
//!
//! impl PlacementPolicy for MostFree {
//!     fn place(_demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
//!         clusters
//!             .candidates()
//!             .max_by_key(|row| (row.free_slots, std::cmp::Reverse(row.index)))
//!             .map(|row| row.index)
//!             .ok_or_else(|| Failure::invalid_input("no clusters to place on"))
//!     }
//! }
//!
//! sandfleet_plugin_sdk::placement_policy!(MostFree);
//! ```
//!
//! Build it with `crate-type = ["cdylib"]` and `cargo build --release
//! --target wasm32-wasip2`; the `.wasm` in `target/wasm32-wasip2/release/`
//! is the component. A plugin gets no files, network, clock, environment
//! or randomness of its own: every decision depends on its arguments only.
//!
//! Without the default `bindings` feature the crate is only [`wit`] and
//! [`vendor`] (its own files, for `sandfleet plugin new` to copy).

#[cfg(feature = "bindings")]
mod bindings;
#[cfg(feature = "bindings")]
mod clusters;
#[cfg(feature = "bindings")]
mod failure;
pub mod vendor;
pub mod wit;

#[cfg(feature = "bindings")]
pub use bindings::{v0_1_0, v0_2_0};

/// The newest contract version's bindings, which the top-level modules and
/// the export macros use.
#[cfg(feature = "bindings")]
pub use bindings::v0_2_0 as latest;

#[cfg(feature = "bindings")]
pub use latest::{host, types};
#[cfg(feature = "bindings")]
pub use types::{Failure, FailureKind};

/// `placement-policy`: which cluster gets a warm pool or a claim.
#[cfg(feature = "bindings")]
pub mod placement {
    pub use crate::clusters::{ClusterRow, membership};
    pub use crate::latest::placement::exports::sandfleet::plugin::placement::Guest as PlacementPolicy;
    pub use crate::latest::placement::exports::sandfleet::plugin::placement::*;
    pub use crate::types::{Failure, FailureKind};
}

/// `sizing-policy`: warm pool sizes and the order images are warmed in.
#[cfg(feature = "bindings")]
pub mod sizing {
    pub use crate::latest::sizing::exports::sandfleet::plugin::sizing::Guest as SizingPolicy;
    pub use crate::latest::sizing::exports::sandfleet::plugin::sizing::*;
    pub use crate::types::{Failure, FailureKind};
}

/// `reset-check`: resets a used sandbox and verifies it is clean.
#[cfg(feature = "bindings")]
pub mod reset {
    pub use crate::latest::reset::exports::sandfleet::plugin::reset::Guest as ResetCheck;
    pub use crate::latest::reset::exports::sandfleet::plugin::reset::*;
    pub use crate::types::{Command, CommandOutput, Failure, FailureKind, Task};
}

/// `task-adapter`: loads, prepares and grades one kind of dataset's tasks.
#[cfg(feature = "bindings")]
pub mod adapter {
    pub use crate::latest::adapter::exports::sandfleet::plugin::adapter::Guest as TaskAdapter;
    pub use crate::latest::adapter::exports::sandfleet::plugin::adapter::*;
    pub use crate::types::{Command, CommandOutput, Failure, FailureKind, Setting, Task};
}

/// Exports `$plugin`, which implements `$version::$world`'s `Guest` trait,
/// as the component's implementation of the world. Natively (`cargo test`
/// and `clippy` build a plugin crate for the host too) the export names,
/// which contain `:`, cannot be linked into a shared library: there the
/// macro only checks that `$plugin` implements the trait (which also keeps
/// the type from being reported as unused).
#[doc(hidden)]
#[macro_export]
macro_rules! __export_world {
    ($world:ident, $plugin:ident, $version:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::$version::$world::export!($plugin with_types_in $crate::$version::$world);
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn implements<T: $crate::$version::$world::exports::sandfleet::plugin::$world::Guest>() {}
            let _ = implements::<$plugin>;
        };
    };
}

/// Exports a type implementing [`placement::PlacementPolicy`] as the
/// component's `placement-policy`: `placement_policy!(MyPolicy)`. To build
/// against an older contract, name its module and implement that module's
/// trait: `placement_policy!(MyPolicy, v0_1_0)` with
/// `v0_1_0::placement::exports::sandfleet::plugin::placement::Guest`.
#[macro_export]
macro_rules! placement_policy {
    ($plugin:ident) => {
        $crate::__export_world!(placement, $plugin, latest);
    };
    ($plugin:ident, $version:ident) => {
        $crate::__export_world!(placement, $plugin, $version);
    };
}

/// Exports a type implementing [`sizing::SizingPolicy`] as the component's
/// `sizing-policy`; `sizing_policy!(MyPolicy, v0_1_0)` targets an older
/// contract, as [`placement_policy!`] does.
#[macro_export]
macro_rules! sizing_policy {
    ($plugin:ident) => {
        $crate::__export_world!(sizing, $plugin, latest);
    };
    ($plugin:ident, $version:ident) => {
        $crate::__export_world!(sizing, $plugin, $version);
    };
}

/// Exports a type implementing [`reset::ResetCheck`] as the component's
/// `reset-check`; `reset_check!(MyCheck, v0_1_0)` targets an older
/// contract, as [`placement_policy!`] does.
#[macro_export]
macro_rules! reset_check {
    ($plugin:ident) => {
        $crate::__export_world!(reset, $plugin, latest);
    };
    ($plugin:ident, $version:ident) => {
        $crate::__export_world!(reset, $plugin, $version);
    };
}

/// Exports a type implementing [`adapter::TaskAdapter`] as the component's
/// `task-adapter`; `task_adapter!(MyAdapter, v0_1_0)` targets an older
/// contract, as [`placement_policy!`] does.
#[macro_export]
macro_rules! task_adapter {
    ($plugin:ident) => {
        $crate::__export_world!(adapter, $plugin, latest);
    };
    ($plugin:ident, $version:ident) => {
        $crate::__export_world!(adapter, $plugin, $version);
    };
}
