//! A placement policy that traps on its third decision (the demand whose
//! `sequence` is 2) and picks cluster 0 otherwise: a run whose policy
//! breaks part-way, for the fallback to answer or the run to stop on.

#![allow(missing_docs, reason = "test guest")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "../../../wit/since_v0.1.0",
});

use exports::sandfleet::plugin::placement::{Clusters, Demand, Guest};
use sandfleet::plugin::types::Failure;

/// The decision it traps on, counted from 0.
pub const TRAPS_ON: u64 = 2;

struct TrapThird;

impl Guest for TrapThird {
    fn place(demand: Demand, _clusters: Clusters) -> Result<u32, Failure> {
        if demand.sequence == TRAPS_ON {
            panic!("deliberate trap on decision {TRAPS_ON}");
        }
        Ok(0)
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(TrapThird);
