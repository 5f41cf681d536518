//! The circuit breaker: counts the run's live sandboxes, as the backends
//! see them, and stops the run when they exceed what its plan explains.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::fleet::Fleet;
use crate::plan::Plan;
use crate::settings::FleetSettings;

/// Counts live sandboxes every `breaker_interval`; above the limit it
/// records why in `tripped` and cancels the run.
pub(crate) fn start(
    fleet: Arc<Fleet>,
    plan: &Plan,
    settings: &FleetSettings,
    tripped: Arc<OnceLock<String>>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let expected = plan.expected_live();
    let by_factor = (f64::from(expected) * settings.overcommit_factor).ceil() as usize;
    let limit = by_factor.min(settings.max_live_sandboxes as usize);
    let interval: Duration = settings.breaker_interval;
    let (factor, max_live) = (settings.overcommit_factor, settings.max_live_sandboxes);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            match fleet.count_live().await {
                Ok(live) if live > limit => {
                    let _ = tripped.set(format!(
                        "{live} live sandboxes exceed the limit of {limit} (expected {expected} × overcommit_factor {factor}, capped by max_live_sandboxes {max_live}); tore everything down"
                    ));
                    cancel.cancel();
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("breaker cannot count live sandboxes: {e}"),
            }
        }
    }.in_current_span())
}
