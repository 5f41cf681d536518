//! A placement policy that always picks the last cluster. Tests swap it in for
//! another policy and tell the versions apart by their answers.

#![allow(missing_docs, reason = "test guest")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "../../../wit/since_v0.1.0",
});

use exports::sandfleet::plugin::placement::{Clusters, Demand, Guest};
use sandfleet::plugin::types::{Failure, FailureKind};

struct PickLast;

impl Guest for PickLast {
    fn place(_demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        match clusters.free_slots.len() {
            0 => Err(Failure {
                kind: FailureKind::InvalidInput,
                message: "no clusters".to_string(),
            }),
            n => Ok(n as u32 - 1),
        }
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(PickLast);
