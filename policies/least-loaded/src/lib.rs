//! `least-loaded`: places each pool or claim on the healthy cluster with the
//! most free slots, preferring clusters that already hold the image when free
//! slots tie, then the lowest index. Falls back to all clusters when none is
//! healthy, so a degraded fleet still gets an answer.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

policy_support::placement_policy!(place);

use std::cmp::Reverse;

use policy_support::membership;

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(_demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    let count = clusters.free_slots.len();
    let all_unhealthy = clusters.unhealthy.len() >= count;
    membership(count, &clusters.unhealthy)
        .zip(membership(count, &clusters.with_image))
        .enumerate()
        .filter(|&(_, (unhealthy, _))| all_unhealthy || !unhealthy)
        .max_by_key(|&(index, (_, has_image))| {
            (clusters.free_slots[index], has_image, Reverse(index))
        })
        .map(|(index, _)| index as u32)
        .ok_or_else(|| Failure {
            kind: FailureKind::InvalidInput,
            message: "no clusters to place on".to_string(),
        })
}
