//! `image-affinity`: a claim goes where a warm sandbox of its image is ready;
//! otherwise, like a pool, where the image is already held (no image pull),
//! then to the cluster with the most free slots. Clusters without a free
//! slot are skipped while another has one.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

policy_support::placement_policy!(place);

use std::cmp::Reverse;

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    let count = clusters.free_slots.len();
    let has_image: Vec<bool> = policy_support::membership(count, &clusters.with_image).collect();
    let candidates: Vec<usize> = policy_support::candidates(count, &clusters.unhealthy).collect();
    let any_free = candidates.iter().any(|&i| clusters.free_slots[i] > 0);
    candidates
        .into_iter()
        .filter(|&i| !any_free || clusters.free_slots[i] > 0)
        .max_by_key(|&i| {
            let warm = if demand.kind == DemandKind::Claim {
                clusters.warm_ready[i]
            } else {
                0
            };
            (
                warm > 0,
                has_image[i],
                warm,
                clusters.free_slots[i],
                Reverse(i),
            )
        })
        .map(|index| index as u32)
        .ok_or_else(|| Failure {
            kind: FailureKind::InvalidInput,
            message: "no clusters to place on".to_string(),
        })
}
