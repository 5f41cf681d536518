//! Checks before anything is made: preflight (tools, images, and a sandbox
//! made and probed the way every sandbox is), the state directory's
//! reachability, the cgroup controllers, and the machine's capacity.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sandfleet_core::{Capacity, Preflight, RunId};
use sandfleet_jail::cgroup::{Cgroups, Limits};
use sandfleet_jail::protocol::IdMap;

use crate::backend::{Inner, WARM_CREATE_TIMEOUT};
use crate::error::{IoContext, LocalError};
use crate::machine;
use crate::namespace::{SANDBOX_PATH, sandbox_tool};
use crate::sandbox::Sandbox;
use crate::state;
use crate::templates::{ImageRoot, Isolation, Resources, Template};

/// Fails unless the sandboxes' root can reach `state_dir`: the mounts are
/// made as that user, so every directory above the state directory must be
/// searchable by others (root's home, mode 0700, is not).
pub(crate) fn check_searchable(state_dir: &Path, ids: &IdMap) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if ids.count == 1 {
        // Unprivileged, the sandbox's root is the user who owns the state.
        return Ok(());
    }
    for dir in state_dir.ancestors() {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 && meta.uid() != ids.uid {
            return Err(format!(
                "state_dir {}: {} (mode {:o}) cannot be entered by the sandboxes' root (host uid \
                 {}); choose a state_dir whose directories are searchable by others, such as \
                 /var/lib/sandfleet",
                state_dir.display(),
                dir.display(),
                mode & 0o7777,
                ids.uid
            ));
        }
    }
    Ok(())
}

/// The cgroup controllers sandboxes can be limited by, once a cgroup could
/// be made under `parent` in every one of them.
pub(crate) fn usable_cgroups(parent: &Path) -> Result<Cgroups, String> {
    let cgroups = Cgroups::detect();
    let missing = cgroups.missing();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
        return Err(format!("no {} controller is mounted", names.join(", ")));
    }
    let probe = parent.join(crate::state::probe_name("probe"));
    cgroups
        .create(&probe, &Limits::default())
        .and_then(|_| cgroups.remove(&probe))
        .map_err(|e| e.to_string())?;
    Ok(cgroups)
}

impl Inner {
    pub(crate) async fn preflight(self: &Arc<Self>) -> Preflight {
        let mut report = Preflight::default();
        let probe_file = self.site.state.root().join(".preflight");
        match std::fs::write(&probe_file, b"") {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe_file);
            }
            Err(error) => report.failures.push(format!(
                "state_dir {} is not writable: {error}",
                self.site.state.root().display()
            )),
        }
        let mut tools = vec!["sh", "cp"];
        if self.site.isolation == Isolation::Plain {
            tools.push("env");
        }
        if self.config.images.values().any(|source| source.git) {
            tools.push("git");
        }
        for tool in tools {
            if sandbox_tool(tool).is_none() {
                report.failures.push(format!(
                    "`{tool}` is not in any directory of {SANDBOX_PATH}"
                ));
            }
        }
        report.warnings.extend(self.warnings.iter().cloned());
        // Every task of an image with no directory would fail at warm-up,
        // after other pools were already created: refuse the run up front.
        for (name, source) in &self.config.images {
            if !source.path.is_dir() {
                report.failures.push(format!(
                    "image `{name}`: {} is not a directory",
                    source.path.display()
                ));
            }
        }
        if self.site.isolation == Isolation::Namespaces {
            match self.probe_isolation().await {
                Ok(()) => report.notes.push(self.isolation_note()),
                Err(error) => report.failures.push(format!(
                    "sandboxes cannot be isolated here, so none will be made: {error}"
                )),
            }
        }
        report
    }

    /// Makes a sandbox of an empty image (through the probe every sandbox
    /// passes) and destroys it.
    async fn probe_isolation(self: &Arc<Self>) -> Result<(), LocalError> {
        let image_dir = self.site.state.root().join("probe-image");
        std::fs::create_dir_all(&image_dir)
            .context(|| format!("creating {}", image_dir.display()))?;
        let template = Arc::new(Template {
            name: "isolation-probe".into(),
            run_id: preflight_run(),
            image: "isolation-probe".into(),
            source: ImageRoot::Directory(image_dir),
            workdir: self.config.workdir.clone(),
            share_network: false,
            env: Vec::new(),
            id_prefix: "isolation-probe".into(),
            resources: Resources {
                memory_mib: 64,
                cpu_milli: 100,
                disk_mib: 16,
                limits: self.config.limits,
            },
        });
        let run_id = template.run_id.clone();
        let deadline = Instant::now() + WARM_CREATE_TIMEOUT;
        let made = Sandbox::create(&self.site, template, Vec::new(), Vec::new(), deadline).await;
        let destroyed = match &made {
            Ok(sandbox) => sandbox.destroy().await,
            Err(_) => Ok(()),
        };
        // The probe's run leaves nothing: its directory and cgroup.
        state::reap_run(self.site.state.root(), &run_id).await?;
        if let Some(cgroups) = &self.site.cgroups {
            let relative = self.site.cgroup_parent.join(run_id.as_str());
            cgroups
                .remove(&relative)
                .context(|| format!("removing cgroup {}", relative.display()))?;
        }
        made.map(drop).and(destroyed)
    }

    /// What sandboxes of this cluster are confined by, for preflight.
    fn isolation_note(&self) -> String {
        let root = crate::ids::describe(&self.site.ids);
        let limits = match &self.site.cgroups {
            Some(cgroups) => cgroups
                .hierarchies()
                .iter()
                .map(|h| {
                    format!(
                        "{} ({:?}, {})",
                        h.controller.name(),
                        h.version,
                        h.root.display()
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            None => "none".to_string(),
        };
        format!(
            "sandboxes are isolated (namespaces, read-only host directories, masked /proc, no \
             CAP_SYS_ADMIN, no_new_privs, seccomp) and probed before use; their root is {root}; \
             cgroup limits enforced: {limits}"
        )
    }

    pub(crate) fn capacity(&self) -> Result<Capacity, LocalError> {
        Ok(Capacity {
            nodes: Some(1),
            cpu_milli: Some(u64::from(machine::cores()) * 1000),
            memory_mib: Some(machine::memory_available_mib()?),
            disk_mib_per_node: Some(machine::disk_free_mib(self.site.state.root())?),
            sandbox_slots: Some(self.max_sandboxes),
            reserves_requests: false,
        })
    }
}

/// A run of its own for each preflight's probe sandbox: its cleanup reaps
/// the whole run, which must not reach another preflight's.
fn preflight_run() -> RunId {
    static PREFLIGHTS: AtomicU64 = AtomicU64::new(0);
    let number = PREFLIGHTS.fetch_add(1, Ordering::Relaxed);
    RunId::new(format!("preflight-{}-{number}", std::process::id())).expect("a valid run id")
}
