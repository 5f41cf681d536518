//! Removing everything a run owns, on every cluster: the end of every run's
//! teardown, and all of `sandfleet reap`.

use sandfleet_core::{Reaped, RunId};

use crate::error::RunError;
use crate::fleet::Cluster;

/// Removes everything `run_id` owns on `clusters`.
///
/// # Errors
///
/// The first backend error; the other clusters are still reaped.
pub async fn reap(clusters: &[Cluster], run_id: &RunId) -> Result<Reaped, RunError> {
    let mut reaped = Reaped::default();
    let mut first_error = None;
    for cluster in clusters {
        match cluster.backend.reap(run_id).await {
            Ok(found) => reaped += found,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(reaped),
    }
}
