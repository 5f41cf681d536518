//! `fewest-live`: the example policy of the README walkthrough. Places each
//! pool or claim on the healthy cluster that runs the fewest of this host's
//! sandboxes, so load spreads evenly whatever the clusters' sizes.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "../../wit/since_v0.1.0",
});

use exports::sandfleet::plugin::placement::{Clusters, Demand, Guest};
use sandfleet::plugin::types::{Failure, FailureKind};

struct FewestLive;

impl Guest for FewestLive {
    fn place(_demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        let unhealthy = |index: usize| clusters.unhealthy.contains(&(index as u32));
        (0..clusters.live.len())
            .filter(|&index| !unhealthy(index) && clusters.free_slots[index] > 0)
            // The first of the least busy clusters wins a tie.
            .min_by_key(|&index| (clusters.live[index], index))
            .map(|index| index as u32)
            .ok_or_else(|| Failure {
                kind: FailureKind::Unsatisfiable,
                message: "no healthy cluster has a free slot".to_string(),
            })
    }
}

// Natively (cargo test and clippy build every crate for the host) the
// export names, which contain `:`, cannot be linked into a shared library.
#[cfg(target_arch = "wasm32")]
export!(FewestLive);
