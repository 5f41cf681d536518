//! What a run checks before it creates anything: every backend's
//! preflight, every image made by some cluster, and the clusters' capacity.

use sandfleet_core::Capacity;

use crate::error::RunError;
use crate::fleet::Cluster;
use crate::progress::Progress;

/// Runs every cluster's preflight; warnings go to `progress`, failures fail
/// the run. Notes are logged.
pub(crate) async fn preflight(
    clusters: &[Cluster],
    progress: &dyn Progress,
) -> Result<(), RunError> {
    let mut failures = Vec::new();
    for cluster in clusters {
        let (name, found) = (&cluster.name, cluster.backend.preflight().await);
        for note in found.notes {
            tracing::info!(cluster = %name, "{note}");
        }
        for warning in found.warnings {
            // The progress line is what a user sees; the event is for logs.
            tracing::info!(cluster = %name, "{warning}");
            progress.step(&format!("warning: {name}: {warning}"));
        }
        failures.extend(found.failures.into_iter().map(|f| format!("  {name}: {f}")));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RunError::Preflight(failures))
    }
}

/// Fails for images no cluster can make, naming each and its first task;
/// `images` are (image, task id) pairs.
///
/// # Errors
///
/// [`RunError::Preflight`] listing the images.
pub fn images_made(
    clusters: &[Cluster],
    images: impl IntoIterator<Item = (String, String)>,
) -> Result<(), RunError> {
    let capabilities: Vec<_> = clusters.iter().map(|c| c.backend.capabilities()).collect();
    let mut missing: Vec<String> = Vec::new();
    for (image, task) in images {
        let made = capabilities.iter().any(|c| c.images.can_make(&image));
        if !made
            && !missing
                .iter()
                .any(|m| m.starts_with(&format!("  `{image}`")))
        {
            missing.push(format!("  `{image}` (first needed by task `{task}`)"));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        missing.insert(0, "no cluster can make these images:".into());
        Err(RunError::Preflight(missing))
    }
}

/// Every cluster's capacity, in configuration order.
pub(crate) async fn capacity(clusters: &[Cluster]) -> Result<Vec<Capacity>, RunError> {
    let mut capacity = Vec::new();
    for cluster in clusters {
        capacity.push(cluster.backend.capacity().await?);
    }
    Ok(capacity)
}
