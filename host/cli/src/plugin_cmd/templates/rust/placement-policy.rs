//! `{{name}}`: a sandfleet placement policy. Picks the healthy cluster with
//! the most free slots (every cluster counts when none is healthy); the
//! lowest index wins a tie.

use std::cmp::Reverse;

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::placement::{Clusters, Demand, PlacementPolicy};

struct Policy;

impl PlacementPolicy for Policy {
    fn place(_demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        clusters
            .candidates()
            .max_by_key(|row| (row.free_slots, Reverse(row.index)))
            .map(|row| row.index)
            .ok_or_else(|| Failure::invalid_input("no clusters to place on"))
    }
}

sandfleet_plugin_sdk::placement_policy!(Policy);
