//! Warm-pool levels for the run's picture: while a run goes, the sandboxes
//! each backend pool has ready are sampled onto the timeline, so a pool
//! that did not keep up with its claims shows as a gap.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::fleet::Fleet;

/// How often the pools are sampled.
const INTERVAL: Duration = Duration::from_secs(1);

/// Pools asked per sample, at most: with many images warm at once the
/// samples take turns, so a run never spends more than this many status
/// calls a second on its picture.
const PER_SAMPLE: usize = 16;

/// Samples `fleet`'s pools until the returned task is aborted; does nothing
/// when the run records no timeline.
pub(crate) fn start(fleet: Arc<Fleet>) -> Option<tokio::task::JoinHandle<()>> {
    if !fleet.timeline.is_on() {
        return None;
    }
    Some(tokio::spawn(
        async move {
            let mut turn = 0;
            let mut ticks = tokio::time::interval(INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let pools = fleet.warm_pools().await;
                if pools.is_empty() {
                    continue;
                }
                let first = turn % pools.len();
                turn = first + PER_SAMPLE;
                for (cluster, image, template) in pools
                    .iter()
                    .cycle()
                    .skip(first)
                    .take(PER_SAMPLE.min(pools.len()))
                {
                    let Some(part) = fleet.clusters[*cluster].backend.pools() else {
                        continue;
                    };
                    // A failed sample is a gap in the picture, not an error
                    // of the run.
                    if let Ok(status) = part.pool_status(template).await {
                        fleet.timeline.pool_ready(
                            &fleet.clusters[*cluster].name,
                            &fleet.images[*image],
                            status.ready,
                        );
                    }
                }
            }
        }
        .in_current_span(),
    ))
}
