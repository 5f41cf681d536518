//! What the backend holds, per run: templates, warm pools and the tasks
//! filling them; and the claimed sandboxes, by id. No I/O: the backend's
//! operations take what they need under the lock and act outside it.

use std::collections::HashMap;
use std::sync::Arc;

use sandfleet_core::RunId;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::TaskTracker;

use crate::error::LocalError;
use crate::pool::Pool;
use crate::sandbox::Sandbox;
use crate::snapshot::Snapshot;
use crate::templates::Template;

/// A live sandbox and the slot it occupies until it is destroyed (in-flight
/// commands may still hold the sandbox itself).
pub(crate) struct Held {
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) _slot: OwnedSemaphorePermit,
}

/// One run's templates and pools.
#[derive(Default)]
pub(crate) struct RunLive {
    pub(crate) templates: HashMap<String, Arc<Template>>,
    pub(crate) pools: HashMap<String, Pool<Held>>,
    /// The tasks making this run's warm sandboxes; its reap waits for them,
    /// so none lands in the run's directory after it.
    pub(crate) warming: TaskTracker,
    /// Whether `run.json` was written by this process.
    pub(crate) recorded: bool,
}

/// Everything live, every run's.
#[derive(Default)]
pub(crate) struct Live {
    pub(crate) runs: HashMap<RunId, RunLive>,
    pub(crate) claimed: HashMap<String, Held>,
    /// Snapshots, by id.
    pub(crate) snapshots: HashMap<String, Arc<Snapshot>>,
}

impl Live {
    /// Run `run_id`'s state, made empty on first use.
    pub(crate) fn run(&mut self, run_id: &RunId) -> &mut RunLive {
        self.runs.entry(run_id.clone()).or_default()
    }

    /// Template `name` of run `run_id`.
    pub(crate) fn template(&self, run_id: &RunId, name: &str) -> Result<Arc<Template>, LocalError> {
        self.runs
            .get(run_id)
            .and_then(|run| run.templates.get(name))
            .cloned()
            .ok_or_else(|| LocalError::NotFound(format!("template `{name}` of run {run_id}")))
    }

    /// The pool of template `name` of run `run_id`, when it has one.
    pub(crate) fn pool(&mut self, run_id: &RunId, name: &str) -> Option<&mut Pool<Held>> {
        self.runs.get_mut(run_id)?.pools.get_mut(name)
    }

    /// Every template that has a pool, over all runs.
    pub(crate) fn pooled_templates(&self) -> Vec<Arc<Template>> {
        self.runs
            .values()
            .flat_map(|run| {
                run.pools
                    .keys()
                    .filter_map(|name| run.templates.get(name).cloned())
            })
            .collect()
    }

    /// Forgets run `run_id`: its templates, pools and claimed sandboxes,
    /// handed back to be destroyed (or dropped, which kills them), and its
    /// snapshots.
    pub(crate) fn forget(
        &mut self,
        run_id: &RunId,
    ) -> (Option<RunLive>, Vec<Held>, Vec<Arc<Snapshot>>) {
        let run = self.runs.remove(run_id);
        let snapshots: Vec<String> = self
            .snapshots
            .iter()
            .filter(|(_, snapshot)| snapshot.template.run_id == *run_id)
            .map(|(id, _)| id.clone())
            .collect();
        let snapshots = snapshots
            .iter()
            .filter_map(|id| self.snapshots.remove(id))
            .collect();
        let claimed: Vec<String> = self
            .claimed
            .iter()
            .filter(|(_, held)| held.sandbox.template().run_id == *run_id)
            .map(|(id, _)| id.clone())
            .collect();
        let held = claimed
            .iter()
            .filter_map(|id| self.claimed.remove(id))
            .collect();
        (run, held, snapshots)
    }
}
