//! `round-robin`: the `sequence`-th healthy cluster, cycling. A plugin keeps
//! no state, so the rotation comes from the decision's sequence number.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

wit_bindgen::generate!({
    world: "placement-policy",
    path: "../../wit/since_v0.1.0",
});

pub use exports::sandfleet::plugin::placement::{Clusters, Demand, DemandKind};
pub use sandfleet::plugin::types::{Failure, FailureKind};

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    let candidates: Vec<usize> =
        policy_columns::candidates(clusters.free_slots.len(), &clusters.unhealthy).collect();
    if candidates.is_empty() {
        return Err(Failure {
            kind: FailureKind::InvalidInput,
            message: "no clusters to place on".to_string(),
        });
    }
    let turn = (demand.sequence % candidates.len() as u64) as usize;
    Ok(candidates[turn] as u32)
}

struct RoundRobin;

impl exports::sandfleet::plugin::placement::Guest for RoundRobin {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        place(&demand, &clusters)
    }
}

#[cfg(target_arch = "wasm32")]
export!(RoundRobin);
