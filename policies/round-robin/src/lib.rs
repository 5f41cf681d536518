//! `round-robin`: the `sequence`-th healthy cluster, cycling. A plugin keeps
//! no state, so the rotation comes from the decision's sequence number.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::placement::{Clusters, Demand, PlacementPolicy};

struct RoundRobin;

impl PlacementPolicy for RoundRobin {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        let candidates: Vec<u32> = clusters.candidates().map(|row| row.index).collect();
        if candidates.is_empty() {
            return Err(Failure::invalid_input("no clusters to place on"));
        }
        let turn = (demand.sequence % candidates.len() as u64) as usize;
        Ok(candidates[turn])
    }
}

sandfleet_plugin_sdk::placement_policy!(RoundRobin);
