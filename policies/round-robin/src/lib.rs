//! `round-robin`: the `sequence`-th healthy cluster, cycling. A plugin keeps
//! no state, so the rotation comes from the decision's sequence number.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

policy_support::placement_policy!(place);

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    let candidates: Vec<usize> =
        policy_support::candidates(clusters.free_slots.len(), &clusters.unhealthy).collect();
    if candidates.is_empty() {
        return Err(Failure {
            kind: FailureKind::InvalidInput,
            message: "no clusters to place on".to_string(),
        });
    }
    let turn = (demand.sequence % candidates.len() as u64) as usize;
    Ok(candidates[turn] as u32)
}
