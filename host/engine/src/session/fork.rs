//! Leases forked from a snapshot: the backend makes the sandboxes
//! ([`sandfleet_core::Snapshots::fork`], all or none, on the snapshot's
//! cluster), and the session takes them on as it takes its own claims —
//! on the books, renewed, recyclable and released through its queue.

use std::time::Instant;

use sandfleet_core::{LABEL_TASK, SnapshotRef, label_value, snapshots_of};
use sandfleet_plugin::adapter::Task;

use super::{Lease, Session, SessionError};
use crate::error::StepError;

impl Session {
    /// A lease for each of `names` whose sandbox is a fork of `snapshot`
    /// (one of `image`'s, taken on its cluster), all or none; commands
    /// start in `workdir`.
    ///
    /// # Errors
    ///
    /// [`SessionError::Invalid`] for no names, an image no cluster makes
    /// or a snapshot of a cluster this session does not have; the fork's
    /// error (an `unsupported` naming the cluster where it has no
    /// snapshots).
    pub async fn fork(
        &self,
        snapshot: &SnapshotRef,
        image: &str,
        workdir: &str,
        names: &[String],
    ) -> Result<Vec<Lease>, SessionError> {
        let Some(first) = names.first() else {
            return Err(SessionError::Invalid(format!(
                "a fork of snapshot {} needs a count of at least 1",
                snapshot.id
            )));
        };
        self.check_image(image)?;
        let cluster = self
            .fleet
            .clusters
            .iter()
            .position(|cluster| cluster.name == snapshot.cluster)
            .ok_or_else(|| {
                SessionError::Invalid(format!(
                    "snapshot {} is of cluster `{}`, which this service does not have",
                    snapshot.id, snapshot.cluster
                ))
            })?;
        let backend = &self.fleet.clusters[cluster].backend;
        let snapshots =
            snapshots_of(backend.as_ref()).map_err(|e| StepError::backend("fork", e))?;
        let mut labels = self.fleet.run_id.labels();
        labels.insert(LABEL_TASK.to_string(), label_value(first));
        let count = u32::try_from(names.len()).unwrap_or(u32::MAX);
        let deadline = Instant::now() + self.fleet.settings.claim_timeout;
        let handles = self
            .fleet
            .retries
            .idempotent("fork", || {
                snapshots.fork(snapshot, count, &labels, deadline)
            })
            .await
            .map_err(|e| StepError::backend("fork", e))?;
        let image_index = self.fleet.images.intern(image);
        let claimed = self.fleet.adopt(cluster, image_index, handles).await;
        let mut leases = Vec::with_capacity(claimed.len());
        for (claimed, name) in claimed.into_iter().zip(names) {
            let task = Task {
                id: name.clone(),
                image: image.to_string(),
                workdir: workdir.to_string(),
                data: String::new(),
            };
            let keeper = self.fleet.keep(&claimed);
            let held = self.recycler.held_fresh(claimed, keeper, &task).await;
            leases.push(Lease {
                held,
                image: image_index,
                image_name: image.to_string(),
                task,
                for_task: false,
                set_up: None,
                name: name.clone(),
            });
        }
        Ok(leases)
    }
}
