//! `image-affinity`: a claim goes where a warm sandbox of its image is ready;
//! otherwise, like a pool, where the image is already held (no image pull),
//! then to the cluster with the most free slots. Clusters without a free
//! slot are skipped while another has one.

use std::cmp::Reverse;

use sandfleet_plugin_sdk::Failure;
use sandfleet_plugin_sdk::placement::{ClusterRow, Clusters, Demand, DemandKind, PlacementPolicy};

struct ImageAffinity;

impl PlacementPolicy for ImageAffinity {
    fn place(demand: Demand, clusters: Clusters) -> Result<u32, Failure> {
        let candidates: Vec<ClusterRow> = clusters.candidates().collect();
        let any_free = candidates.iter().any(|row| row.free_slots > 0);
        candidates
            .into_iter()
            .filter(|row| !any_free || row.free_slots > 0)
            .max_by_key(|row| {
                let warm = if demand.kind == DemandKind::Claim {
                    row.warm_ready
                } else {
                    0
                };
                (
                    warm > 0,
                    row.has_image,
                    warm,
                    row.free_slots,
                    Reverse(row.index),
                )
            })
            .map(|row| row.index)
            .ok_or_else(|| Failure::invalid_input("no clusters to place on"))
    }
}

sandfleet_plugin_sdk::placement_policy!(ImageAffinity);
