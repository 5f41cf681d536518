//! `capacity-weighted`: spreads decisions over the healthy clusters in
//! proportion to `free-slots × weight`. A plugin has no randomness, so the
//! decision's sequence number walks the clusters' shares: over many
//! decisions each cluster gets its share, and the same inputs always give
//! the same answer.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::placement::{Clusters, Demand, PlacementPolicy};

struct CapacityWeighted;

impl PlacementPolicy for CapacityWeighted {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        let shares: Vec<(u32, u64)> = clusters
            .candidates()
            .map(|row| (row.index, u64::from(row.free_slots) * u64::from(row.weight)))
            .collect();
        let Some(&(first, _)) = shares.first() else {
            return Err(Failure::invalid_input("no clusters to place on"));
        };
        let total: u64 = shares.iter().map(|(_, share)| share).sum();
        if total == 0 {
            return Err(Failure::unsatisfiable("no cluster has free capacity"));
        }
        // Spread the sequence over the shares with a stride coprime to most
        // totals, so consecutive decisions land on different clusters.
        let mut point = demand.sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) % total;
        for &(index, share) in &shares {
            if point < share {
                return Ok(index);
            }
            point -= share;
        }
        Ok(first)
    }
}

sandfleet_plugin_sdk::placement_policy!(CapacityWeighted);
