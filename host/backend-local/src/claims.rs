//! Claimed sandboxes: taking one (warm, or made on demand), running
//! commands in it, scrubbing it for reuse, releasing it, and reaping
//! everything a run owns.

use std::sync::Arc;
use std::time::Instant;

use sandfleet_core::{
    ExecRequest, ExecResult, Labels, OutputSink, Reaped, RunId, SandboxHandle, TemplateRef,
};
use tokio::sync::OwnedSemaphorePermit;

use crate::backend::{Inner, WARM_CREATE_TIMEOUT};
use crate::blocking;
use crate::error::{IoContext, LocalError};
use crate::exec;
use crate::inventory::Held;
use crate::sandbox::Sandbox;
use crate::state;
use crate::templates::Template;
use sandfleet_jail::protocol::Volume;

impl Inner {
    pub(crate) async fn claim(
        self: &Arc<Self>,
        template: &TemplateRef,
        labels: &Labels,
        deadline: Instant,
    ) -> Result<SandboxHandle, LocalError> {
        self.claim_with(template, labels, Vec::new(), deadline)
            .await
    }

    /// [`Inner::claim`], with `volumes` mounted: a sandbox with volumes is
    /// always made new (warm ones have none).
    pub(crate) async fn claim_with(
        self: &Arc<Self>,
        template: &TemplateRef,
        labels: &Labels,
        volumes: Vec<Volume>,
        deadline: Instant,
    ) -> Result<SandboxHandle, LocalError> {
        let run_id = Inner::run_of(labels, template)?;
        sandfleet_core::validate_labels(labels).map_err(|e| LocalError::Rejected(e.to_string()))?;
        let made = self.live().template(&run_id, &template.name)?;
        let volumes = self.own_volumes(volumes).await?;
        let held = loop {
            if !volumes.is_empty() {
                break self.make_cold(Arc::clone(&made), volumes, deadline).await?;
            }
            match self.take_warm(&made) {
                Some(held) if held.sandbox.is_alive() => {
                    self.refill(&made);
                    break held;
                }
                Some(dead) => {
                    tracing::warn!(
                        sandbox = dead.sandbox.id(),
                        "discarding a warm sandbox whose init died"
                    );
                    self.destroy_all(vec![dead]).await;
                }
                None => {
                    break self
                        .make_cold(Arc::clone(&made), Vec::new(), deadline)
                        .await?;
                }
            }
        };
        tracing::debug!(cluster = %self.name, sandbox = held.sandbox.id(), ?labels, "claimed");
        let handle = self.handle_of(&held.sandbox);
        self.live().claimed.insert(handle.id.clone(), held);
        Ok(handle)
    }

    /// The handle a claim of `sandbox` hands out.
    pub(crate) fn handle_of(&self, sandbox: &Sandbox) -> SandboxHandle {
        SandboxHandle {
            id: sandbox.id().to_string(),
            cluster: self.name.clone(),
            template: sandbox.template().name.clone(),
            run_id: sandbox.template().run_id.clone(),
            hostname: sandbox.id().to_string(),
            endpoint: None,
            driver: String::new(),
        }
    }

    /// Checks `volumes` and, running as root, gives each directory to the
    /// sandboxes' root (ids the caller's directories are not).
    async fn own_volumes(&self, volumes: Vec<Volume>) -> Result<Vec<Volume>, LocalError> {
        let ids = self.site.ids;
        blocking(move || {
            for volume in &volumes {
                Volume::check_target(&volume.target).map_err(LocalError::Rejected)?;
                let source = std::fs::canonicalize(&volume.source).map_err(|e| {
                    LocalError::Rejected(format!("volume {}: {e}", volume.source.display()))
                })?;
                if source != volume.source || !source.is_dir() {
                    return Err(LocalError::Rejected(format!(
                        "volume {} is not a canonical path to a directory",
                        volume.source.display()
                    )));
                }
                if rustix::process::geteuid().is_root() {
                    std::os::unix::fs::chown(&source, Some(ids.uid), Some(ids.gid))
                        .context(|| format!("giving volume {} to the sandbox", source.display()))?;
                }
            }
            Ok(volumes)
        })
        .await
    }

    async fn make_cold(
        &self,
        template: Arc<Template>,
        volumes: Vec<Volume>,
        deadline: Instant,
    ) -> Result<Held, LocalError> {
        let slot = self.take_slots(1, deadline).await?;
        let budget = deadline.saturating_duration_since(Instant::now());
        let _turn = tokio::time::timeout(budget, self.starts.acquire())
            .await
            .map_err(|_| LocalError::Timeout {
                what: "a turn to start a sandbox (as many start at once as there are cores)".into(),
                after: budget,
            })?
            .map_err(|_| LocalError::Failed("the sandbox starts were closed".into()))?;
        let sandbox = Sandbox::create(&self.site, template, Vec::new(), volumes, deadline).await?;
        Ok(Held {
            sandbox: Arc::new(sandbox),
            _slot: slot,
        })
    }

    /// Takes `count` sandbox slots at once (all or none), waiting for them
    /// until `deadline`.
    pub(crate) async fn take_slots(
        &self,
        count: u32,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit, LocalError> {
        let budget = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(budget, Arc::clone(&self.slots).acquire_many_owned(count))
            .await
            .map_err(|_| LocalError::Timeout {
                what: format!(
                    "{count} free sandbox slot(s) (max_sandboxes = {} are live)",
                    self.max_sandboxes
                ),
                after: budget,
            })?
            .map_err(|_| LocalError::Failed("the sandbox slots were closed".into()))
    }

    pub(crate) async fn exec(
        &self,
        handle: &SandboxHandle,
        request: &ExecRequest,
        sink: Option<&OutputSink>,
    ) -> Result<ExecResult, LocalError> {
        let sandbox = self.claimed(handle)?;
        let program = request.argv.first().map_or("", String::as_str);
        sandbox.check_alive()?;
        let prepared = sandbox.command(request)?;
        let disk = sandbox.disk_limit();
        let ran = exec::run(
            prepared.command,
            prepared.stdin_prefix,
            prepared.leader,
            request,
            sink,
            disk.as_ref(),
        )
        .await
        .context(|| format!("sandbox {}: running `{program}`", sandbox.id()))?;
        sandbox.check_ended_alive(program, ran.result.exit_code == 0 && !ran.result.timed_out)?;
        Ok(ran.result)
    }

    pub(crate) async fn scrub(&self, handle: &SandboxHandle) -> Result<(), LocalError> {
        self.claimed(handle)?.scrub(&self.site).await
    }

    pub(crate) async fn release(
        self: &Arc<Self>,
        handle: &SandboxHandle,
    ) -> Result<(), LocalError> {
        if handle.cluster != self.name {
            return Err(LocalError::NotFound(format!(
                "sandbox {} (it belongs to cluster `{}`)",
                handle.id, handle.cluster
            )));
        }
        let Some(held) = self.live().claimed.remove(&handle.id) else {
            return Ok(());
        };
        let released = held.sandbox.release(&self.site).await;
        drop(held);
        self.refill_all();
        released
    }

    /// Destroys sandboxes concurrently, logging failures: their slots are
    /// free either way, and `reap` removes what is left.
    pub(crate) async fn destroy_all(&self, sandboxes: Vec<Held>) {
        let mut destroying = tokio::task::JoinSet::new();
        for held in sandboxes {
            destroying.spawn(async move {
                if let Err(error) = held.sandbox.destroy().await {
                    tracing::warn!(sandbox = held.sandbox.id(), %error, "destroying a sandbox failed");
                }
            });
        }
        destroying.join_all().await;
    }

    /// Removes everything run `run_id` owns, and only that: its live
    /// sandboxes, pools and templates here, and whatever its state
    /// directory, cgroups and `/proc` show of it (a crashed run's included).
    pub(crate) async fn reap(self: &Arc<Self>, run_id: &RunId) -> Result<Reaped, LocalError> {
        // Forgotten first, so that no refill makes new sandboxes of the run;
        // the sandboxes are kept (their drop kills them) until the reap has
        // killed and counted their processes.
        let (run, claimed, snapshots) = self.live().forget(run_id);
        if let Some(run) = &run {
            // Sandboxes still being made find their pool gone and destroy
            // themselves; wait for that before removing the run's directory.
            run.warming.close();
            if tokio::time::timeout(WARM_CREATE_TIMEOUT, run.warming.wait())
                .await
                .is_err()
            {
                tracing::warn!(cluster = %self.name, run = %run_id, "warm sandboxes still being made at reap");
            }
        }
        self.site.discards.settled().await;
        let reaped = state::reap_run(self.site.state.root(), run_id).await;
        // Dropped after the run's directory is gone, so their layers are
        // not removed twice at once.
        drop((run, claimed, snapshots));
        self.pools_changed.notify_waiters();
        self.refill_all();
        reaped
    }
}
