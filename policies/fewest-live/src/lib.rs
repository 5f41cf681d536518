//! `fewest-live`: the example policy of the README walkthrough. Places each
//! pool or claim on the healthy cluster that runs the fewest of this host's
//! sandboxes, so load spreads evenly whatever the clusters' sizes.

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::placement::{Clusters, Demand, PlacementPolicy};

struct FewestLive;

impl PlacementPolicy for FewestLive {
    fn place(_demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        clusters
            .rows()
            .filter(|row| row.healthy && row.free_slots > 0)
            // The first of the least busy clusters wins a tie.
            .min_by_key(|row| (row.live, row.index))
            .map(|row| row.index)
            .ok_or_else(|| Failure::unsatisfiable("no healthy cluster has a free slot"))
    }
}

sandfleet_plugin_sdk::placement_policy!(FewestLive);
