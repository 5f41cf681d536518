//! `capacity-weighted`: spreads decisions over the healthy clusters in
//! proportion to `free-slots × weight`. A plugin has no randomness, so the
//! decision's sequence number walks the clusters' shares: over many
//! decisions each cluster gets its share, and the same inputs always give
//! the same answer.

#![allow(missing_docs, reason = "bindings generated from wit/")]
#![allow(unsafe_code, reason = "wit-bindgen generates the canonical ABI glue")]

policy_support::placement_policy!(place);

/// The policy's decision, callable natively for tests and benchmarks.
pub fn place(demand: &Demand, clusters: &Clusters) -> Result<u32, Failure> {
    let shares: Vec<(usize, u64)> =
        policy_support::candidates(clusters.free_slots.len(), &clusters.unhealthy)
            .map(|index| {
                let share =
                    u64::from(clusters.free_slots[index]) * u64::from(clusters.weight[index]);
                (index, share)
            })
            .collect();
    let Some(&(first, _)) = shares.first() else {
        return Err(Failure {
            kind: FailureKind::InvalidInput,
            message: "no clusters to place on".to_string(),
        });
    };
    let total: u64 = shares.iter().map(|(_, share)| share).sum();
    if total == 0 {
        return Err(Failure {
            kind: FailureKind::Unsatisfiable,
            message: "no cluster has free capacity".to_string(),
        });
    }
    // Spread the sequence over the shares with a stride coprime to most
    // totals, so consecutive decisions land on different clusters.
    let mut point = demand.sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) % total;
    for &(index, share) in &shares {
        if point < share {
            return Ok(index as u32);
        }
        point -= share;
    }
    Ok(first as u32)
}
