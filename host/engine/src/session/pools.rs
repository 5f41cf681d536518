//! A session's warm pools: sized by the sizing plugin as `sandfleet plan`
//! sizes a run's, filled in the background, and reported with their ready
//! counts.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{Session, SessionError};
use crate::error::RunError;
use crate::plan::{self, Plan};
use crate::settings::Strategy;

/// A warm pool of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// The image.
    pub image: String,
    /// The cluster placement put it on.
    pub cluster: String,
    /// Replicas the sizing plugin asked for.
    pub desired: u32,
    /// Warm sandboxes ready now.
    pub ready: u32,
    /// Why filling it failed, if it did.
    pub error: Option<String>,
}

/// The fill of one pool, running or finished.
pub(super) struct PoolFill {
    pub(super) filling: JoinHandle<Result<(), RunError>>,
    pub(super) failed: Arc<Mutex<Option<String>>>,
}

impl Session {
    /// Sizes warm pools for `images` (one entry per task, so an image's
    /// count weighs its pool) with the sizing plugin, as `sandfleet plan`
    /// does, and starts filling them; returns the plan at once.
    ///
    /// # Errors
    ///
    /// When an image cannot be made or the sizing plugin fails.
    pub async fn warm<'a>(
        &self,
        images: impl IntoIterator<Item = &'a str>,
    ) -> Result<Plan, SessionError> {
        let (names, tasks) = plan::image_table(images);
        for image in &names {
            self.check_image(image)?;
        }
        let mut settings = self.settings.clone();
        // Every pool at once: a service has no windows to slide through.
        settings.strategy = Strategy::Naive;
        let plan = plan::plan(
            &self.plugins.sizing,
            &settings,
            &self.capacity,
            names,
            tasks,
            plan::forking_clusters(&self.fleet.clusters),
        )
        .await
        .map_err(RunError::from)?;
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        for (name, &replicas) in plan.images.iter().zip(&plan.replicas) {
            let image = self.fleet.images.intern(name);
            if let Some(previous) = pools.remove(&image) {
                previous.filling.abort();
            }
            let fleet = self.fleet.clone();
            let failed = Arc::new(Mutex::new(None));
            let noted = failed.clone();
            let filling = tokio::spawn(
                async move {
                    let warmed = fleet.warm(&[(image, replicas)]).await;
                    if let Err(error) = &warmed {
                        tracing::warn!(%error, "filling a warm pool failed");
                        *noted.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
                    }
                    warmed
                }
                .in_current_span(),
            );
            pools.insert(image, PoolFill { filling, failed });
        }
        Ok(plan)
    }

    /// Removes the warm pool of `image` and its unclaimed sandboxes (leases
    /// already claimed from it are untouched). Returns whether there was one.
    ///
    /// # Errors
    ///
    /// When the backend could not remove the pool.
    pub async fn unwarm(&self, image: &str) -> Result<bool, SessionError> {
        let fleet = &self.fleet;
        let Some(index) = fleet.images.lookup(image) else {
            return Ok(false);
        };
        let fill = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&index);
        let Some(fill) = fill else {
            return Ok(false);
        };
        fill.filling.abort();
        fleet.unwarm(&[index]).await?;
        Ok(true)
    }

    /// Every warm pool the session asked for, with its ready count.
    pub async fn pools(&self) -> Vec<PoolState> {
        let asked: Vec<(usize, Option<String>)> = self
            .pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&image, fill)| {
                let failed = fill.failed.lock().unwrap_or_else(|e| e.into_inner());
                (image, failed.clone())
            })
            .collect();
        let fleet = &self.fleet;
        let mut states = Vec::new();
        for (image, error) in asked {
            let mut state = PoolState {
                image: fleet.images[image].clone(),
                cluster: String::new(),
                desired: 0,
                ready: 0,
                error,
            };
            if let Some((desired, ready)) = fleet.prepared_pool(image) {
                // Claimed and prepared by the session, on whichever
                // clusters placement chose.
                state.desired = desired;
                state.ready = ready;
            } else if let Some((cluster, replicas)) = fleet.pool(image).await {
                state.cluster = fleet.clusters[cluster].name.clone();
                state.desired = replicas;
                if let Ok(template) = fleet.template(cluster, image).await {
                    // Only pools a backend has are kept.
                    if let Some(pools) = fleet.clusters[cluster].backend.pools() {
                        match pools.pool_status(&template).await {
                            Ok(status) => state.ready = status.ready,
                            Err(e) => state.error = Some(e.to_string()),
                        }
                    }
                }
            }
            states.push(state);
        }
        states
    }
}
