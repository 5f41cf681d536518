//! The fleet file and dataset a rehearsal's run is: written out, with
//! relative paths, so a user can run it again with `sandfleet run`.

use std::time::Duration;

use sandfleet_emulator_k8s::CONTEXT;

use crate::{MAX_REUSES, Shape, Task, Variant};

/// What a run's fleet file says.
pub(crate) struct FleetFile<'a> {
    pub(crate) name: String,
    pub(crate) tasks: &'a [Task],
    pub(crate) task_time: Duration,
    pub(crate) variant: &'a Variant,
    pub(crate) concurrent: u32,
    pub(crate) plain: bool,
}

impl FleetFile<'_> {
    /// The fleet file, with relative paths as a user writes them.
    pub(crate) fn text(&self, shapes: &[Shape]) -> String {
        let v = self.variant;
        let mut text = format!(
            "# Written by `sandfleet rehearse`; run it again with\n\
             # `sandfleet run fleet.toml` while the devclusters are up.\n\n\
             [run]\nname = \"{}\"\ndataset = \"tasks.jsonl\"\nout = \"out\"\n\n\
             [adapter]\nname = \"generic\"\n\n\
             [fleet]\nstrategy = \"{}\"\nmax_concurrent = {}\nmax_warmpool_size = {}\n\
             claim_timeout = \"300s\"\ncpu_milli = 250\nmemory_mib = 256\n\
             # The breaker at what the clusters' nodes hold in pods; the plan\n\
             # itself is bounded by what their CPU and memory hold.\n\
             max_live_sandboxes = {}\n",
            self.name,
            v.strategy,
            self.concurrent,
            2 * self.concurrent,
            shapes.iter().map(|s| s.nodes as u32 * s.pods).sum::<u32>()
        );
        if v.recycle {
            text.push_str(&format!("recycle = true\nmax_reuses = {MAX_REUSES}\n"));
        }
        text.push_str(&format!(
            "\n[plugins]\nplacement = \"{}\"\nreset = \"git-restore\"\n",
            v.placement
        ));
        for shape in shapes {
            text.push_str(&format!(
                "\n[[clusters]]\nname = \"{0}\"\nbackend = \"k8s\"\n\n[clusters.k8s]\n\
                 kubeconfig = \"{0}.kubeconfig\"\ncontext = \"{CONTEXT}\"\nnamespace = \"default\"\n",
                shape.name
            ));
        }
        text
    }

    /// `tasks.jsonl`: each test a sleep that carries its task's id as the
    /// command marker the clusters count starts of (through `env`: the
    /// adapter runs a test as words, not through a shell).
    pub(crate) fn dataset(&self) -> String {
        let seconds = self.task_time.as_secs_f64();
        self.tasks
            .iter()
            .map(|task| {
                let mut row = serde_json::json!({
                    "id": task.id,
                    "image": task.image,
                    "test": format!("env {}={} sleep {seconds}", sandfleet_emulator_k8s::MARKER_ENV, task.id),
                });
                if self.plain {
                    // A plain pod is a process on the host, whose root has
                    // no /workspace.
                    row["workdir"] = serde_json::json!("/tmp");
                }
                format!("{row}\n")
            })
            .collect()
    }
}
