//! `least-loaded`: places each pool or claim on the healthy cluster with the
//! most free slots, preferring clusters that already hold the image when free
//! slots tie, then the lowest index. Falls back to all clusters when none is
//! healthy, so a degraded fleet still gets an answer.

use std::cmp::Reverse;

use sandfleet_plugin_sdk::placement::PlacementPolicy;
pub use sandfleet_plugin_sdk::placement::{Clusters, Demand, DemandKind};
pub use sandfleet_plugin_sdk::{Failure, FailureKind};

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(_demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    clusters
        .candidates()
        .max_by_key(|row| (row.free_slots, row.has_image, Reverse(row.index)))
        .map(|row| row.index)
        .ok_or_else(|| Failure::invalid_input("no clusters to place on"))
}

struct LeastLoaded;

impl PlacementPolicy for LeastLoaded {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        place(&demand, &clusters)
    }
}

sandfleet_plugin_sdk::placement_policy!(LeastLoaded);
