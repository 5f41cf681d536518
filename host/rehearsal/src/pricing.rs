//! The plan's wall estimate priced for the devclusters: the calibration's
//! costs, and pulls at each image's size over the bandwidth, on the nodes
//! of the clusters the placement policy fills.

use std::time::Duration;

use sandfleet_emulator_k8s::PullModel;
use sandfleet_engine::plan::Plan;
use sandfleet_engine::wall_estimate::{HostCpu, SandboxCosts};

use crate::peak::Placement;
use crate::{Calibration, PULL_BANDWIDTH, PULL_LATENCY, PULLS_PER_NODE, Shape, image_bytes};

/// Each image's size over the bandwidth, on top of a fixed latency.
pub(crate) fn pull_model(images: &[String]) -> PullModel {
    PullModel {
        latency: PULL_LATENCY,
        bandwidth: Some(PULL_BANDWIDTH),
        sizes: images
            .iter()
            .map(|image| (image.clone(), image_bytes(image)))
            .collect(),
        per_node: Some(PULLS_PER_NODE),
    }
}

/// One image's first pull onto a node.
fn pull_cost(image: &str) -> Duration {
    PULL_LATENCY + Duration::from_secs_f64(image_bytes(image) as f64 / PULL_BANDWIDTH as f64)
}

/// The nodes pulling for a run that places `placed` sandboxes on each
/// cluster: pulls follow the sandboxes, so the cluster with the most of
/// them per node sets the pace, as if the fleet had `nodes / share` of its
/// nodes (rounded down). Everything on one cluster is that cluster's
/// nodes; a spread in proportion to nodes is all of them.
fn pulling_nodes(shapes: &[Shape], placed: &[u32]) -> u32 {
    let total: u32 = placed.iter().sum();
    if total == 0 {
        return shapes.iter().map(|s| s.nodes as u32).sum();
    }
    shapes
        .iter()
        .zip(placed)
        .filter(|(_, placed)| **placed > 0)
        .map(|(shape, placed)| shape.nodes as f64 * f64::from(total) / f64::from(*placed))
        .fold(f64::INFINITY, f64::min)
        .floor()
        .max(1.0) as u32
}

/// The plan's images priced with the calibration and the pull model, its
/// pulls on the nodes of the clusters the placement policy uses.
pub(crate) fn costs(
    plan: &Plan,
    calibration: &Calibration,
    shapes: &[Shape],
    placed: &Placement,
) -> SandboxCosts {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    SandboxCosts {
        task: Duration::from_secs_f64(calibration.task_s),
        cold_claim: Duration::from_secs_f64(calibration.cold_claim_s),
        warm_claim: Duration::ZERO,
        warm_start: Duration::from_secs_f64(calibration.warm_start_s),
        cold_start_after: sandfleet_emulator_k8s::Tuning::default().cold_start_after,
        reset: Duration::from_secs_f64(calibration.reset_s),
        pulls: plan.images.iter().map(|i| pull_cost(i)).collect(),
        nodes: pulling_nodes(shapes, &placed.per_cluster),
        pulls_per_node: PULLS_PER_NODE as u32,
        pool_hit: placed.pool_hit,
        host_cpu: Some(HostCpu {
            fresh_task: Duration::from_secs_f64(calibration.host_cpu_fresh_task_s),
            reused_task: Duration::from_secs_f64(calibration.host_cpu_reused_task_s),
            cores,
        }),
    }
}

/// Costs for the run that measures them (the calibration), whose estimate
/// nothing reads.
pub(crate) fn costs_unknown() -> SandboxCosts {
    SandboxCosts {
        task: Duration::ZERO,
        cold_claim: Duration::ZERO,
        warm_claim: Duration::ZERO,
        warm_start: Duration::ZERO,
        cold_start_after: Duration::ZERO,
        reset: Duration::ZERO,
        pulls: Vec::new(),
        nodes: 1,
        pulls_per_node: 1,
        pool_hit: 1.0,
        host_cpu: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SHAPES;

    #[test]
    fn pulls_run_at_the_pace_of_the_cluster_with_most_sandboxes_per_node() {
        // 8, 4, 2 and 1 nodes.
        assert_eq!(pulling_nodes(&SHAPES, &[64, 0, 0, 0]), 8);
        assert_eq!(pulling_nodes(&SHAPES, &[80, 40, 20, 10]), 15);
        // A quarter of the sandboxes on the one-node cluster: it pulls as
        // if the fleet had 4 nodes.
        assert_eq!(pulling_nodes(&SHAPES, &[60, 20, 0, 20]), 5);
        assert_eq!(pulling_nodes(&SHAPES, &[0, 0, 0, 0]), 15);
    }
}
