//! Where the placement policy puts a plan's sandboxes, asked of the policy
//! itself before the run: the clusters that pull, and the share of claims
//! that find their image's pool.

use anyhow::Context as _;
use sandfleet_engine::plan::Plan;
use sandfleet_plugin::placement::{ClusterState, Clusters, Demand, DemandKind, PlacementPolicy};

/// Where the placement policy puts a run's sandboxes, found before the run
/// through the policy itself.
pub(crate) struct Placement {
    /// The sandboxes of the plan's peak on each cluster.
    pub(crate) per_cluster: Vec<u32>,
    /// Of an image's claims, the share put on the cluster of its pool.
    pub(crate) pool_hit: f64,
}

/// Claims of each image placed after its pool, to measure the pool hits.
const CLAIMS_AFTER_POOL: u64 = 8;

/// Where the placement policy puts `plan`'s peak: its sandboxes placed one
/// by one as the run's first claims are, before anything is warm or
/// pulled, each cluster as its capacity and weight describe it, its free
/// slots falling as sandboxes land. Then, for each image, its pool and a
/// few of its claims after it, the pool's cluster holding the image and a
/// warm sandbox of it, as the engine shows them to the policy.
pub(crate) async fn place_peak(
    plan: &Plan,
    placement: &PlacementPolicy,
    capacity: &[sandfleet_core::Capacity],
    weights: &[u32],
) -> anyhow::Result<Placement> {
    let states = |live: &[u32], pool: Option<usize>| -> Vec<ClusterState> {
        capacity
            .iter()
            .zip(weights)
            .zip(live)
            .enumerate()
            .map(|(index, ((capacity, weight), live))| ClusterState {
                healthy: true,
                has_image: pool == Some(index),
                free_slots: capacity
                    .sandbox_slots
                    .map_or(u32::MAX, |slots| slots.saturating_sub(*live)),
                live: *live,
                warm_ready: u32::from(pool == Some(index)),
                weight: *weight,
                cpu_free_milli: u32::MAX,
                memory_free_mib: u32::MAX,
            })
            .collect()
    };
    let place = |kind: DemandKind, image: u32, sequence: u64, states: Vec<ClusterState>| async move {
        let demand = Demand {
            kind,
            image,
            count: 1,
            sequence,
        };
        placement
            .place(&demand, &Clusters::from_states(&states))
            .await
            .context("placing the plan's sandboxes")
            .map(|index| index as usize)
    };
    let mut placed = vec![0u32; capacity.len()];
    let images = plan.images.len().max(1) as u32;
    let mut sequence = 0;
    while sequence < u64::from(plan.peak_warm + plan.concurrent) {
        let image = (sequence % u64::from(images)) as u32;
        let at = place(DemandKind::Claim, image, sequence, states(&placed, None)).await?;
        placed[at] += 1;
        sequence += 1;
    }
    let (mut claims, mut hits) = (0u32, 0u32);
    for image in 0..images {
        let pool = place(DemandKind::Pool, image, sequence, states(&placed, None)).await?;
        sequence += 1;
        for _ in 0..CLAIMS_AFTER_POOL {
            let at = place(
                DemandKind::Claim,
                image,
                sequence,
                states(&placed, Some(pool)),
            )
            .await?;
            sequence += 1;
            claims += 1;
            hits += u32::from(at == pool);
        }
    }
    Ok(Placement {
        per_cluster: placed,
        pool_hit: f64::from(hits) / f64::from(claims.max(1)),
    })
}
